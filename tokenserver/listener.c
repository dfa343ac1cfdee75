/*
 * A listening socket served within limits: the tenants' sockets (accept.c),
 * the admin socket (admin.c) and the metrics listener (metrics/) each keep
 * one. It is watched for connections in its owner's epoll set, can be
 * paused (for a while, then it resumes itself, or until its owner resumes
 * it), and accepts with the process's spare descriptor when there is no
 * other left: the connection can then be refused with a reason, or the
 * operator served, rather than stay in the backlog with the socket ready
 * and the loop spinning on it.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* The spare descriptor (/dev/null), kept for a connection accepted when
 * the process has no other; -1 while that connection has it. Owned by the
 * loop's thread. */
static int spare_fd = -1;

int listener_spare_take(void)
{
    if (spare_fd < 0)
        spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return spare_fd >= 0 ? 0 : -1;
}

bool listener_out_of_descriptors(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

static void resume_fired(void *arg)
{
    listener_resume(arg);
}

void listener_init(struct listener *l, int fd, void (*fn)(void *, uint32_t), void *arg,
                   int (*add)(struct loop_watch *, uint32_t), void (*del)(struct loop_watch *))
{
    *l = (struct listener){.watch = {.fd = fd, .fn = fn, .arg = arg}, .add = add, .del = del};
    timer_init(&l->resume, resume_fired, l);
}

bool listener_resume(struct listener *l)
{
    timer_at(&l->resume, 0);
    if (l->watched || l->watch.fd < 0)
        return l->watched;
    if (l->add(&l->watch, EPOLLIN) == 0)
        l->watched = true;
    else
        slog(LOG_ERR, "listening socket: epoll: %s", strerror(errno));
    return l->watched;
}

void listener_pause(struct listener *l, uint64_t for_ns)
{
    if (l->watched)
        l->del(&l->watch);
    l->watched = false;
    timer_at(&l->resume, for_ns ? now_ns() + for_ns : 0);
}

void listener_close(struct listener *l)
{
    listener_pause(l, 0);
    timer_close(&l->resume);
    l->watch.fd = -1;
}

int listener_accept(struct listener *l, bool with_spare, bool *used_spare)
{
    if (used_spare)
        *used_spare = false;
    for (;;) {
        int fd = accept4(l->watch.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            return fd;
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        int err = errno;
        if (!with_spare || !listener_out_of_descriptors(err) || spare_fd < 0)
            return -1;
        if (close(spare_fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        spare_fd = -1;
        fd = accept4(l->watch.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            listener_spare_back();
            errno = err;
            return -1;
        }
        *used_spare = true;
        return fd;
    }
}

void listener_spare_back(void)
{
    if (listener_spare_take() != 0)
        slog(LOG_WARN, "cannot keep a spare descriptor: %s", strerror(errno));
}
