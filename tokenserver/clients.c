/*
 * Client connections: one per shim process, on its tenant's socket. Reads
 * whole messages (SOCK_SEQPACKET), decodes them with the shared protocol
 * code, and hands them to the scheduler. A malformed, truncated, oversized
 * or unexpected message closes that connection with one log line; nobody
 * else notices.
 */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct client *clients;

int client_slot(const struct client *c, const struct device *d)
{
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        if (c->devices[i] == d)
            return i;
    return -1;
}

int client_send(struct client *c, const struct gs_msg *msg)
{
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(msg, buf, sizeof buf);
    if (len == 0)
        return -1;
    /* Non-blocking: a client that does not read its messages is dropped
     * rather than allowed to stall the server. */
    ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != (ssize_t)len && errno != EPIPE && errno != ECONNRESET)
        slog(LOG_WARN, "tenant %s pid %u: could not send %s: %s", c->tenant->name, c->pid,
             gs_msg_type_str(msg->type), strerror(errno));
    return n == (ssize_t)len ? 0 : -1;
}

void client_close(struct client *c, const char *reason)
{
    if (reason) {
        struct gs_msg msg = {.type = GS_MSG_ERROR};
        snprintf(msg.u.error.reason, sizeof msg.u.error.reason, "%s", reason);
        client_send(c, &msg);
    }
    for (struct client **p = &clients; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    mem_client_gone(c);
    sched_client_gone(c);
    if (c->tenant && c->tenant->clients > 0)
        c->tenant->clients--;
    loop_del(&c->watch);
    close(c->fd);
    free(c);
}

static void drop(struct client *c, const char *what)
{
    slog(LOG_WARN, "tenant %s pid %u: %s; connection closed", c->tenant->name, c->pid, what);
    client_close(c, what);
}

static void handle(struct client *c, const struct gs_msg *msg)
{
    if (!c->greeted && msg->type != GS_MSG_HELLO) {
        drop(c, "first message was not HELLO");
        return;
    }
    switch (msg->type) {
    case GS_MSG_HELLO: {
        if (c->greeted) {
            drop(c, "second HELLO");
            return;
        }
        c->greeted = true;
        if (!c->pid) /* SO_PEERCRED could not say */
            c->pid = msg->u.hello.pid;
        struct gs_msg welcome = {.type = GS_MSG_WELCOME};
        snprintf(welcome.u.welcome.tenant, sizeof welcome.u.welcome.tenant, "%s", c->tenant->name);
        client_send(c, &welcome);
        slog(LOG_DEBUG, "tenant %s: pid %u connected", c->tenant->name, c->pid);
        break;
    }
    case GS_MSG_DEVICE: {
        int slot = (int)msg->u.device.slot;
        struct device *d = device_get(msg->u.device.uuid);
        if (!d) {
            drop(c, "out of memory for a new device");
            return;
        }
        if (c->devices[slot] && c->devices[slot] != d && (c->wants[slot] || c->holds[slot])) {
            drop(c, "re-declared a device slot it is using");
            return;
        }
        c->devices[slot] = d;
        break;
    }
    case GS_MSG_ACQUIRE:
        if (!c->devices[msg->u.acquire.slot]) {
            drop(c, "ACQUIRE for an undeclared device");
            return;
        }
        sched_acquire(c, (int)msg->u.acquire.slot);
        break;
    case GS_MSG_RELEASE:
        if (!c->devices[msg->u.grant.slot]) {
            drop(c, "RELEASE for an undeclared device");
            return;
        }
        sched_release(c, (int)msg->u.grant.slot, msg->u.grant.grant, msg->u.grant.flags & GS_RELEASE_MORE);
        break;
    case GS_MSG_MEM_RESERVE:
    case GS_MSG_MEM_FREE:
    case GS_MSG_MEM_QUERY:
    case GS_MSG_MEM_DECLARE:
        mem_handle(c, msg);
        break;
    default: {
        char what[64];
        snprintf(what, sizeof what, "unexpected %s message", gs_msg_type_str(msg->type));
        drop(c, what);
        break;
    }
    }
}

static void client_readable(void *arg, uint32_t events)
{
    struct client *c = arg;
    uint8_t buf[GS_MSG_MAX];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, MSG_TRUNC | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (events & (EPOLLHUP | EPOLLERR))
                    break;
                return;
            }
            if (errno == EINTR)
                continue;
            break;
        }
        if (n == 0)
            break; /* EOF: the process exited or was killed */
        if ((size_t)n > sizeof buf) {
            drop(c, "oversized message");
            return;
        }
        struct gs_msg msg;
        enum gs_decode_result r = gs_msg_decode(buf, (size_t)n, &msg);
        if (r != GS_DECODE_OK) {
            char what[128];
            if (r == GS_DECODE_BAD_VERSION && n >= 6)
                snprintf(what, sizeof what, "protocol version mismatch: this server speaks %d, the client %u",
                         GS_PROTOCOL_VERSION, (unsigned)(buf[4] | (buf[5] << 8)));
            else
                snprintf(what, sizeof what, "%s", gs_decode_result_str(r));
            drop(c, what);
            return;
        }
        /* handle may close c: read nothing more after a close */
        struct client *still = clients;
        handle(c, &msg);
        for (still = clients; still && still != c; still = still->next) {
        }
        if (!still)
            return;
    }
    slog(LOG_DEBUG, "tenant %s: pid %u disconnected", c->tenant->name, c->pid);
    client_close(c, NULL);
}

void client_accept(struct tenant *t)
{
    for (;;) {
        int fd = accept4(t->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                slog(LOG_WARN, "tenant %s: accept: %s", t->name, strerror(errno));
            return;
        }
        struct client *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            slog(LOG_ERR, "tenant %s: out of memory for a client", t->name);
            return;
        }
        c->fd = fd;
        c->tenant = t;
        peer_identify(fd, &c->peer);
        c->pid = c->peer.pid;
        c->watch = (struct loop_watch){.fd = fd, .fn = client_readable, .arg = c};
        c->connected_ns = now_ns();
        if (loop_add(&c->watch, EPOLLIN | EPOLLRDHUP) != 0) {
            close(fd);
            free(c);
            return;
        }
        t->clients++;
        c->next = clients;
        clients = c;
    }
}

void clients_sweep(void)
{
    uint64_t now = now_ns();
    for (struct client *c = clients, *next; c; c = next) {
        next = c->next;
        if (!c->greeted && now - c->connected_ns > 5000000000ull)
            drop(c, "said nothing for 5 s after connecting");
    }
}
