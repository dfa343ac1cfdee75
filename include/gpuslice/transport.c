/*
 * Receiving protocol messages with the time they were sent (transport.h).
 * The kernel stamps a message on CLOCK_REALTIME when the sender queues it;
 * its age, read against CLOCK_REALTIME now, is subtracted from
 * CLOCK_MONOTONIC now. Both clock reads are vDSO calls, no system call.
 */
#include "transport.h"

#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* An older stamp is taken for a real-time clock that was set meanwhile
 * (the message is then dated now). A message waits this long only for a
 * stopped process, whose slice the server revokes sooner anyway. */
#define PLAUSIBLE_AGE_NS 1000000000ull

int gs_transport_stamp_messages(int fd)
{
    int one = 1;
    return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

static uint64_t timespec_ns(const struct timespec *ts)
{
    return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

ssize_t gs_transport_recv(int fd, void *buf, size_t cap, int flags, uint64_t *sent_ns)
{
    union {
        char space[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                        .msg_controllen = sizeof control.space};
    ssize_t n = recvmsg(fd, &mh, flags);
    if (n < 0)
        return n;
    struct timespec mono, real;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    uint64_t now = timespec_ns(&mono), age = 0;
    if (!(mh.msg_flags & MSG_CTRUNC)) {
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS ||
                c->cmsg_len < CMSG_LEN(sizeof(struct timespec)))
                continue;
            struct timespec stamp;
            memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
            uint64_t then = timespec_ns(&stamp), real_now = timespec_ns(&real);
            if (then <= real_now && real_now - then < PLAUSIBLE_AGE_NS && real_now - then < now)
                age = real_now - then;
        }
    }
    *sent_ns = now - age;
    return n;
}
