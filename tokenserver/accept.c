/*
 * Accepting connections on the tenants' sockets within the limits:
 * connections per tenant (--max-clients-per-tenant), all together
 * (--max-clients), and the descriptors the process has (RLIMIT_NOFILE,
 * less one per tenant's socket and FD_RESERVE for everything else: the
 * loop's, the admin socket and its connections, the metrics listener and
 * its connections, reading the configuration; timers take none).
 *
 * A connection over a limit gets an ERROR saying which, and is closed. Out
 * of descriptors (EMFILE and the like, which a wrong count could still
 * cause), the spare descriptor kept for that is closed so that the
 * connection can be accepted and closed, then taken again. Either way that
 * tenant's socket is not read for PAUSE_NS, so a tenant that keeps
 * connecting cannot keep the server busy, and a readable socket that cannot
 * be accepted from never spins the loop. Each wake-up accepts at most
 * ACCEPT_BATCH connections, so other sockets are served in between.
 */
#include "server.h"
#include "metrics/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_BATCH 16
#define PAUSE_NS 100000000ull
#define FD_RESERVE 64

/* The spare descriptor and the timer that resumes paused sockets (armed
 * for resume_next, 0 when none is paused); owned by the loop's thread. */
static int spare_fd = -1;
static struct timer resume_timer;
static uint64_t resume_next;

static void take_spare(void)
{
    if (spare_fd < 0)
        spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_resume(void *arg)
{
    (void)arg;
    uint64_t now = now_ns();
    resume_next = 0;
    for (struct tenant *t = tenants; t; t = t->next) {
        if (t->accepting || t->sock.fd < 0 || !t->resume_at)
            continue;
        if (t->resume_at > now) {
            if (!resume_next || t->resume_at < resume_next)
                resume_next = t->resume_at;
            continue;
        }
        t->resume_at = 0;
        if (loop_add(&t->watch, EPOLLIN) == 0)
            t->accepting = true;
        else
            slog(LOG_ERR, "tenant %s: epoll: %s", t->name, strerror(errno));
    }
    timer_at(&resume_timer, resume_next);
}

int accept_init(void)
{
    take_spare();
    timer_init(&resume_timer, on_resume, NULL);
    if (spare_fd < 0) {
        slog(LOG_ERR, "cannot start: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Stops reading t's socket for PAUSE_NS. */
static void pause_tenant(struct tenant *t)
{
    if (t->accepting)
        loop_del(&t->watch);
    t->accepting = false;
    t->resume_at = now_ns() + PAUSE_NS;
    if (!resume_next || t->resume_at < resume_next) {
        resume_next = t->resume_at;
        timer_at(&resume_timer, resume_next);
    }
}

/* Tells a connection why it is refused, and closes it. */
static void refuse(int fd, const char *reason)
{
    struct gs_msg msg = {.type = GS_MSG_ERROR};
    snprintf(msg.u.error.reason, sizeof msg.u.error.reason, "%s", reason);
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(&msg, buf, sizeof buf);
    /* Best effort: a peer that is gone or full learns it from the close. */
    if (len && send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != EPIPE &&
        errno != ECONNRESET)
        slog(LOG_DEBUG, "refused connection: send: %s", strerror(errno));
    if (close(fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
}

static bool out_of_descriptors(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* Accepts with the spare descriptor; it must be given back. */
static int accept_with_spare(int listen_fd)
{
    if (spare_fd >= 0 && close(spare_fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    spare_fd = -1;
    return accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

void accept_spare_back(void)
{
    take_spare();
}

unsigned long accept_client_budget(void)
{
    unsigned long others = (unsigned long)ntenants + FD_RESERVE;
    unsigned long left = options.nofile > others ? options.nofile - others : 0;
    return left < options.max_clients ? left : options.max_clients;
}

void accept_tenant(struct tenant *t)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        int fd = accept4(t->sock.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EINTR || err == ECONNABORTED)
                continue;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return;
            if (out_of_descriptors(err)) {
                fd = accept_with_spare(t->sock.fd);
                if (fd >= 0)
                    refuse(fd, "gpuslice-server is out of file descriptors");
                take_spare();
            }
            slog_limited(t, LOG_WARN, "tenant %s: accept: %s; its socket is not read for %llu ms", t->name,
                         strerror(err), (unsigned long long)(PAUSE_NS / 1000000));
            pause_tenant(t);
            return;
        }
        char reason[GS_REASON_MAX];
        bool per_tenant = t->clients >= options.max_clients_per_tenant;
        if (per_tenant)
            snprintf(reason, sizeof reason, "tenant %s has %u connections, its limit", t->name,
                     options.max_clients_per_tenant);
        else if (nclients >= accept_client_budget())
            snprintf(reason, sizeof reason, "gpuslice-server has %u connections, its limit", nclients);
        else {
            client_add(t, fd);
            continue;
        }
        metrics_count_drop(DROP_CONNECTION_LIMIT, 1);
        slog_refusal(t, per_tenant ? "tenant connection limit" : "connection limit",
                     "tenant %s: connection refused: limit %lu connections%s, %u in use, 1 more asked for; the socket "
                     "is not read for %llu ms", t->name,
                     per_tenant ? (unsigned long)options.max_clients_per_tenant : accept_client_budget(),
                     per_tenant ? " per tenant" : " in all", per_tenant ? t->clients : nclients,
                     (unsigned long long)(PAUSE_NS / 1000000));
        refuse(fd, reason);
        pause_tenant(t);
        return;
    }
}

int accept_admin(int listen_fd, bool *used_spare)
{
    *used_spare = false;
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            return fd;
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (!out_of_descriptors(errno) || spare_fd < 0)
            return -1;
        /* The operator is served even at the limit: with the spare. */
        fd = accept_with_spare(listen_fd);
        if (fd < 0) {
            take_spare();
            return -1;
        }
        *used_spare = true;
        return fd;
    }
}
