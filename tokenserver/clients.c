/*
 * Client connections: one per shim process, on its tenant's socket. Reads
 * whole messages (SOCK_SEQPACKET), decodes them with the shared protocol
 * code, and hands each to client_messages.c, which decides what it does
 * (and which the simulation runs unchanged): this file is the thin part
 * it cannot run, the sockets, epoll and the batches. A malformed, truncated, oversized or unexpected
 * message closes that connection with one log line (once a minute per
 * cause and tenant, then a count; client_out.c); nobody else notices.
 * What goes out to a client is client_out.c's.
 *
 * What one client can take is bounded: its messages queued in the kernel
 * (SO_SNDBUF = --client-buffer; client_out.c), CLIENT_BATCH messages handled per wake-up, GS_MAX_DEVICES device slots,
 * and its tenant's limits (accept.c, devices.c). What one tenant can take
 * is bounded too: TENANT_BATCH messages of all its clients together per
 * round of the loop. The rest waits in the kernel (epoll is
 * level-triggered, and puts a descriptor it reported again behind the
 * others that are ready), so a tenant with hundreds of busy connections
 * gets no more of the loop than one with a single connection.
 */
#include "server.h"
#include "metrics/metrics.h"
#include "gpuslice/transport.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CLIENT_BATCH 32
#define TENANT_BATCH 16
#define HELLO_TIMEOUT_NS 5000000000ull

/* Closing a socket with messages still unread resets the connection, and
 * the peer then loses the ERROR it has not read yet: so the peer is shut
 * out first (it can send no more) and what it had sent is discarded. */
static void discard_unread(struct client *c)
{
    if (shutdown(c->fd, SHUT_RDWR) != 0 && errno != ENOTCONN)
        slog(LOG_DEBUG, "shutdown: %s", strerror(errno));
    char byte;
    for (int i = 0; i < 4096; i++)
        if (recv(c->fd, &byte, 1, MSG_DONTWAIT | MSG_TRUNC) <= 0)
            break;
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
    *c->member_prev = c->member_next;
    if (c->member_next)
        c->member_next->member_prev = c->member_prev;
    /* A process that lives on (the server drops it, or it reconnects)
     * still holds its memory. */
    bool lives_on = c->peer.pid && process_lives((pid_t)c->peer.pid);
    devices_client_gone(c, lives_on);
    c->tenant->clients--;
    nclients--;
    loop_del(&c->watch);
    discard_unread(c);
    if (close(c->fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    free(c);
}

static void close_passed(int fd)
{
    if (fd >= 0 && close(fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
}

static void client_readable(void *arg, uint32_t events)
{
    struct client *c = arg;
    uint8_t buf[GS_MSG_MAX];
    bool gone = false;
    if (events & EPOLLOUT) {
        client_send_waiting_notices(c);
        if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
            return;
    }
    /* At most CLIENT_BATCH messages: the rest waits for the next round
     * (epoll is level-triggered), so that others are served in between. */
    struct tenant *t = c->tenant;
    if (t->read_round != loop_round()) {
        t->read_round = loop_round();
        t->read_count = 0;
    }
    for (int handled = 0; handled < CLIENT_BATCH && !c->closing; handled++) {
        if (t->read_count >= TENANT_BATCH && !(events & (EPOLLHUP | EPOLLERR)))
            return; /* the tenant's share of this round is spent */
        t->read_count++;
        uint64_t sent_ns;
        int passed; /* a descriptor passed with the message (-1 none): closed here, whatever came */
        ssize_t n = gs_transport_recv_passed(c->fd, buf, sizeof buf, MSG_TRUNC | MSG_DONTWAIT, &sent_ns, &passed);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !(events & (EPOLLHUP | EPOLLERR)))
            return;
        if (n <= 0) {
            /* EOF (the process exited or was killed), or an error */
            slog(LOG_DEBUG, "tenant %s: pid %u disconnected", c->tenant->name, c->pid);
            gone = true;
            break;
        }
        if ((size_t)n > sizeof buf) {
            close_passed(passed);
            client_drop(c, "oversized message");
            break;
        }
        struct gs_msg msg;
        enum gs_decode_result r = gs_msg_decode(buf, (size_t)n, &msg);
        if (r != GS_DECODE_OK) {
            close_passed(passed);
            char what[128];
            if (r == GS_DECODE_BAD_VERSION && n >= 6)
                snprintf(what, sizeof what, "protocol version mismatch: this server speaks %d, the client %u",
                         GS_PROTOCOL_VERSION, (unsigned)(buf[4] | (buf[5] << 8)));
            else
                snprintf(what, sizeof what, "%s", gs_decode_result_str(r));
            client_drop(c, what);
            break;
        }
        client_message(c, &msg, sent_ns ? sent_ns : now_ns(), passed);
        close_passed(passed);
    }
    if (gone || c->closing)
        client_close(c, NULL);
}

void client_add(struct tenant *t, int fd)
{
    int sndbuf = (int)options.client_buffer;
    struct client *c = calloc(1, sizeof *c);
    if (!c || setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) != 0) {
        slog_limited(t, LOG_ERR, "tenant %s: cannot take a connection: %s", t->name,
                     c ? strerror(errno) : "out of memory");
        free(c);
        if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        return;
    }
    /* Each message stamped with when it was sent: a slice is charged until
     * its holder released it, not until this loop read the release. */
    if (gs_transport_stamp_messages(fd) != 0)
        slog(LOG_DEBUG, "tenant %s: SO_TIMESTAMPNS: %s", t->name, strerror(errno));
    c->fd = fd;
    c->tenant = t;
    peer_identify(fd, &c->peer);
    c->pid = c->peer.pid;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        c->slots[i] = (struct sched_slot){.owner = c, .number = (uint32_t)i, .tenant = &t->sched,
                                          .pid = c->peer.pid};
    c->watch = (struct loop_watch){.fd = fd, .fn = client_readable, .arg = c};
    c->connected_ns = now_ns();
    if (loop_add(&c->watch, EPOLLIN | EPOLLRDHUP) != 0) {
        slog_limited(t, LOG_ERR, "tenant %s: epoll: %s", t->name, strerror(errno));
        if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        free(c);
        return;
    }
    t->clients++;
    if (nclients++ == 0)
        rundir_mark_clients(true);
    c->next = clients;
    clients = c;
    c->member_next = t->members;
    if (t->members)
        t->members->member_prev = &c->member_next;
    c->member_prev = &t->members;
    t->members = c;
}

void clients_sweep(void)
{
    uint64_t now = now_ns();
    for (struct client *c = clients, *next; c; c = next) {
        next = c->next;
        if (c->closing)
            client_close(c, NULL); /* its event never came: close it now */
        else if (!c->greeted && now - c->connected_ns > HELLO_TIMEOUT_NS)
            client_drop(c, "said nothing for 5 s after connecting");
    }
}
