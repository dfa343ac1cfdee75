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
    *sent_ns = 0;
    struct timespec mono, real;
    if ((mh.msg_flags & MSG_CTRUNC) || clock_gettime(CLOCK_MONOTONIC, &mono) != 0 ||
        clock_gettime(CLOCK_REALTIME, &real) != 0)
        return n;
    uint64_t now = timespec_ns(&mono), real_now = timespec_ns(&real);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS ||
            c->cmsg_len < CMSG_LEN(sizeof(struct timespec)))
            continue;
        struct timespec stamp;
        memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
        uint64_t then = timespec_ns(&stamp);
        if (then <= real_now && real_now - then < PLAUSIBLE_AGE_NS && real_now - then < now)
            *sent_ns = now - (real_now - then);
    }
    return n;
}
