/*
 * Receiving protocol messages with the time they were sent (transport.h).
 * The kernel stamps a message on CLOCK_REALTIME when the sender queues it;
 * its age, read against CLOCK_REALTIME now, is subtracted from
 * CLOCK_MONOTONIC now. Both clock reads are vDSO calls, no system call.
 * And the offset between this process's CLOCK_MONOTONIC and the wire's.
 */
#include "transport.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

ssize_t gs_transport_recv_passed(int fd, void *buf, size_t cap, int flags, uint64_t *sent_ns, int *passed)
{
    union {
        char space[CMSG_SPACE(sizeof(struct timespec)) + CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                        .msg_controllen = passed ? sizeof control.space : CMSG_SPACE(sizeof(struct timespec))};
    if (passed)
        *passed = -1;
    ssize_t n = recvmsg(fd, &mh, flags | (passed ? MSG_CMSG_CLOEXEC : 0));
    if (n < 0)
        return n;
    *sent_ns = 0;
    struct timespec mono, real;
    bool clocks = clock_gettime(CLOCK_MONOTONIC, &mono) == 0 && clock_gettime(CLOCK_REALTIME, &real) == 0;
    uint64_t now = clocks ? timespec_ns(&mono) : 0, real_now = clocks ? timespec_ns(&real) : 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET)
            continue;
        if (c->cmsg_type == SCM_RIGHTS) {
            /* one descriptor is taken; any more in the same message
             * (a peer's mistake) are closed */
            size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; i++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
                if (passed && *passed < 0)
                    *passed = got;
                else if (close(got) != 0) {
                    /* a descriptor nobody used: nothing to lose */
                }
            }
            continue;
        }
        if (c->cmsg_type != SCM_TIMESTAMPNS || c->cmsg_len < CMSG_LEN(sizeof(struct timespec)) || !clocks ||
            (mh.msg_flags & MSG_CTRUNC))
            continue;
        struct timespec stamp;
        memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
        uint64_t then = timespec_ns(&stamp);
        if (then <= real_now && real_now - then < PLAUSIBLE_AGE_NS && real_now - then < now)
            *sent_ns = now - (real_now - then);
    }
    return n;
}

ssize_t gs_transport_recv(int fd, void *buf, size_t cap, int flags, uint64_t *sent_ns)
{
    return gs_transport_recv_passed(fd, buf, cap, flags, sent_ns, NULL);
}

ssize_t gs_transport_send_passing(int fd, const void *buf, size_t len, int passed)
{
    union {
        char space[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (passed >= 0) {
        memset(&control, 0, sizeof control);
        mh.msg_control = control.space;
        mh.msg_controllen = sizeof control.space;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &passed, sizeof passed);
    }
    return sendmsg(fd, &mh, MSG_NOSIGNAL);
}

int64_t gs_transport_clock_offset_ns(void)
{
    /* The file shows the namespace this process's children get; after an
     * unshare(CLONE_NEWTIME) without exec that is not its own, and its
     * own offset cannot be read: 0 then. */
    char own[64], children[64];
    ssize_t own_len = readlink("/proc/self/ns/time", own, sizeof own);
    ssize_t children_len = readlink("/proc/self/ns/time_for_children", children, sizeof children);
    if (own_len > 0 && children_len > 0 && (own_len != children_len || memcmp(own, children, (size_t)own_len) != 0))
        return 0;
    int fd = open("/proc/self/timens_offsets", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* "monotonic <seconds> <nanoseconds>\nboottime ...\n", seconds signed,
     * nanoseconds 0 .. 999999999 (a negative offset of 0.5 s is -1 500000000) */
    char text[256];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, text + len, sizeof text - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == sizeof text - 1)
            break;
    }
    close(fd);
    text[len] = '\0';
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        long long seconds;
        long nanoseconds;
        if (sscanf(line, "monotonic %lld %ld", &seconds, &nanoseconds) == 2 && nanoseconds >= 0 &&
            nanoseconds < 1000000000L && seconds > -(1ll << 33) && seconds < (1ll << 33))
            return (int64_t)seconds * 1000000000ll + nanoseconds;
    }
    return 0;
}
