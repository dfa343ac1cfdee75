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
 * cause), it is accepted with the spare descriptor (listener.c) and closed
 * the same way. Either way that tenant's socket is not read for PAUSE_NS, so a tenant that keeps
 * connecting cannot keep the server busy, and a readable socket that cannot
 * be accepted from never spins the loop. Each wake-up accepts at most
 * ACCEPT_BATCH connections, so other sockets are served in between.
 */
#include "server.h"
#include "metrics/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_BATCH 16
#define PAUSE_NS 100000000ull
#define FD_RESERVE 64

int accept_init(void)
{
    if (listener_spare_take() != 0) {
        slog(LOG_ERR, "cannot start: %s", strerror(errno));
        return -1;
    }
    return 0;
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

unsigned long accept_client_budget(void)
{
    unsigned long others = (unsigned long)ntenants + FD_RESERVE;
    unsigned long left = options.nofile > others ? options.nofile - others : 0;
    return left < options.max_clients ? left : options.max_clients;
}

void accept_tenant(struct tenant *t)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        bool used_spare;
        int fd = listener_accept(&t->listener, true, &used_spare);
        if (fd < 0 || used_spare) {
            int err = fd < 0 ? errno : EMFILE;
            if (fd < 0 && (err == EAGAIN || err == EWOULDBLOCK))
                return;
            if (used_spare) {
                refuse(fd, "gpuslice-server is out of file descriptors");
                listener_spare_back();
            }
            slog_limited(t, LOG_WARN, "tenant %s: accept: %s; its socket is not read for %llu ms", t->name,
                         strerror(err), (unsigned long long)(PAUSE_NS / 1000000));
            listener_pause(&t->listener, PAUSE_NS);
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
        listener_pause(&t->listener, PAUSE_NS);
        return;
    }
}
