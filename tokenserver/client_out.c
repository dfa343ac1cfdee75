/*
 * What goes out to a client connection, below the scheduler's driver
 * (dispatch.c), which sends through it: messages; the GRANTs the
 * scheduler sends unasked for a new bound (notices), which go out only
 * while a quarter or less of the client's buffer is queued and otherwise
 * wait, the latest per slot, for EPOLLOUT; a client dropped for what it
 * did (marked closing: clients.c closes it at its next event); and the log
 * lines of what a client was refused or warned of.
 */
#include "server.h"
#include "metrics/metrics.h"
#include "gpuslice/rules.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

void client_memory_refused(const struct client *c, const struct sched_slot *slot, uint64_t need, uint64_t cap_bytes,
                          uint64_t used_bytes)
{
    char uuid[37] = "?", want[32], cap[32], used[32];
    if (slot && slot->device)
        uuid_text(slot->device->uuid, uuid);
    slog_refusal(c->tenant, "memory cap",
                 "tenant %s pid %u GPU-%s: memory lease refused at the tenant's cap: the process needed %s more "
                 "than its unused headroom, and the tenant holds %s of its %s cap (all its processes on the GPU, "
                 "leased headroom and each context's memory included); the application gets "
                 "CUDA_ERROR_OUT_OF_MEMORY, and the shim's line on its stderr names the call and the size it asked "
                 "for", c->tenant->name, c->pid, uuid, gs_bytes_text(need, want), gs_bytes_text(used_bytes, used),
                 gs_bytes_text(cap_bytes, cap));
}

/* Marks c for closing: it is closed at its next event (clients.c) (the shutdown makes
 * one at once). Callers may be in the middle of walking the clients. */
static void doom(struct client *c)
{
    if (c->closing)
        return;
    c->closing = true;
    if (shutdown(c->fd, SHUT_RDWR) != 0 && errno != ENOTCONN)
        slog(LOG_WARN, "shutdown: %s", strerror(errno));
}

static void notice_replaced(struct client *c, const struct gs_msg *msg)
{
    if ((msg->type == GS_MSG_GRANT || msg->type == GS_MSG_REVOKE) && msg->u.grant.slot < GS_MAX_DEVICES)
        c->notices_waiting &= ~(1u << msg->u.grant.slot);
}

int client_send(struct client *c, const struct gs_msg *msg)
{
    if (c->closing)
        return -1;
    notice_replaced(c, msg);
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(msg, buf, sizeof buf);
    if (len == 0)
        return -1;
    ssize_t n;
    do
        n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)len)
        return 0;
    if (n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
        metrics_count_drop(DROP_NOT_READING, 1);
        slog_limited(c->tenant, LOG_WARN,
                     "tenant %s pid %u: does not read its messages (%u bytes queued, its limit); dropped", c->tenant->name,
                     c->pid, options.client_buffer);
    } else if (errno != EPIPE && errno != ECONNRESET)
        slog_limited(c->tenant, LOG_WARN, "tenant %s pid %u: could not send %s: %s; dropped", c->tenant->name, c->pid,
                     gs_msg_type_str(msg->type), strerror(errno));
    doom(c);
    return -1;
}

/* Writable in epoll's sense: for a Unix socket, at most a quarter of its
 * send buffer (client_buffer, which the kernel doubles) is queued. */
static bool room_for_notice(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n;
    do
        n = poll(&p, 1, 0);
    while (n < 0 && errno == EINTR);
    return n == 1 && (p.revents & POLLOUT);
}

/* Sends the notice of one slot if there is room: true if sent (or the
 * client is going), false if it must wait. */
static bool notice_sent(struct client *c, uint32_t slot)
{
    if (c->closing || !room_for_notice(c->fd))
        return c->closing;
    struct gs_msg msg = {.type = GS_MSG_GRANT};
    msg.u.grant = c->notices[slot];
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(&msg, buf, sizeof buf);
    ssize_t n;
    do
        n = len ? send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)len)
        return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return false;
    if (n >= 0 || (errno != EPIPE && errno != ECONNRESET))
        slog_limited(c->tenant, LOG_WARN, "tenant %s pid %u: could not send a GRANT: %s; dropped", c->tenant->name,
                     c->pid, n >= 0 ? "cut short" : strerror(errno));
    doom(c);
    return true;
}

/* Sends what notices wait and there is room for; watches for room while
 * any still waits. */
void client_send_waiting_notices(struct client *c)
{
    for (uint32_t slot = 0; slot < GS_MAX_DEVICES && !c->closing; slot++)
        if ((c->notices_waiting & (1u << slot)) && notice_sent(c, slot))
            c->notices_waiting &= ~(1u << slot);
    bool watch_room = c->notices_waiting && !c->closing;
    if (watch_room == c->watching_room)
        return;
    if (loop_mod(&c->watch, EPOLLIN | EPOLLRDHUP | (watch_room ? EPOLLOUT : 0)) == 0)
        c->watching_room = watch_room;
    else
        slog(LOG_WARN, "tenant %s pid %u: epoll: %s", c->tenant->name, c->pid, strerror(errno));
}

void client_notify(struct client *c, const struct gs_msg *msg)
{
    uint32_t slot = msg->u.grant.slot;
    if (c->closing || msg->type != GS_MSG_GRANT || slot >= GS_MAX_DEVICES)
        return;
    c->notices[slot] = msg->u.grant;
    c->notices_waiting |= 1u << slot;
    client_send_waiting_notices(c);
}

void client_drop(struct client *c, const char *what)
{
    if (c->closing)
        return;
    slog_refusal(c->tenant, what, "tenant %s pid %u: %s; connection closed", c->tenant->name, c->pid, what);
    struct gs_msg msg = {.type = GS_MSG_ERROR};
    snprintf(msg.u.error.reason, sizeof msg.u.error.reason, "%s", what);
    if (client_send(c, &msg) == 0) /* else client_send dropped it (counted if it does not read) */
        metrics_count_drop_message(what);
    doom(c);
}

void client_cap_above_memory(const struct client *c, const uint8_t uuid[16], uint64_t cap, uint64_t total)
{
    char text[37], capt[32], totalt[32];
    uuid_text(uuid, text);
    slog_refusal(c->tenant, "cap above the GPU's memory",
                 "tenant %s: its memory cap %s is more than GPU-%s has (%s, as pid %u's driver reports it): "
                 "the cap never binds there", c->tenant->name, gs_bytes_text(cap, capt), text,
                 gs_bytes_text(total, totalt), c->pid);
}
