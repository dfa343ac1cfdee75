/*
 * The admin socket, RUN_DIR/admin.sock (mode 0600, so the host's root
 * only), that gpuslicectl asks for the status on. Non-blocking like
 * everything else on the loop: each connection is a watch of its own that
 * reads one STATUS_REQUEST, then writes the report a piece at a time as
 * the socket takes it, as STATUS_REPLY messages of up to 64 KiB followed
 * by an empty one that ends it (protocol.h). A peer that sends nothing
 * within ADMIN_REQUEST_NS, or stops reading for ADMIN_STALL_NS, is closed.
 * At most ADMIN_MAX_CONNS are open at once; when full, a new connection
 * closes the oldest one that has not sent its request yet (else it waits
 * in the backlog), so silent peers cost nothing but their connection and
 * never keep gpuslicectl waiting.
 */
#include "server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define ADMIN_MAX_CONNS 8
#define ADMIN_REQUEST_NS 1000000000ull
#define ADMIN_STALL_NS 10000000000ull
#define ADMIN_PAUSE_NS 100000000ull
#define CHUNK (GS_MSG_MAX - GS_HEADER_SIZE)
#define STEP 16384 /* bytes of report written per wake-up: about 0.1 ms */

struct admin_conn {
    int fd;
    struct loop_watch watch;
    bool used_spare;          /* accepted with accept.c's spare descriptor */
    bool writing;             /* the request is in; the report goes out */
    bool complete;            /* the whole report is in text */
    struct status_cursor cursor;
    struct text text;
    size_t sent;              /* bytes of text sent */
    uint64_t deadline;
    struct admin_conn *next;
};

/* The listening socket, its state and the connections; owned by the
 * loop's thread. */
static struct bound_socket admin_sock = {.fd = -1};
static struct listener admin_listener = {.watch = {.fd = -1}};
static struct admin_conn *conns;
static unsigned nconns;

static void admin_listen_again(void)
{
    if (admin_sock.fd >= 0 && nconns < ADMIN_MAX_CONNS)
        listener_resume(&admin_listener);
}

static void conn_close(struct admin_conn *a)
{
    for (struct admin_conn **p = &conns; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            break;
        }
    loop_del(&a->watch);
    if (close(a->fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    if (a->used_spare)
        listener_spare_back();
    text_free(&a->text);
    free(a);
    nconns--;
    admin_listen_again();
}

/* Sends the next message of the report; false when it must wait (the
 * socket is full) or the connection was closed. */
static bool send_next(struct admin_conn *a)
{
    size_t pending = a->text.len - a->sent;
    if (pending < CHUNK && !a->complete)
        a->complete = status_next(&a->cursor, &a->text, STEP);
    if (a->text.failed) {
        slog(LOG_ERR, "admin: out of memory writing the status");
        conn_close(a);
        return false;
    }
    pending = a->text.len - a->sent;
    size_t n = pending < CHUNK ? pending : CHUNK;
    if (n < CHUNK && !a->complete)
        return true; /* more to write before a full message: next round */
    static uint8_t buf[GS_MSG_MAX]; /* the loop's thread only */
    struct gs_msg reply = {.type = GS_MSG_STATUS_REPLY, .text = a->text.data + a->sent, .text_len = n};
    size_t len = gs_msg_encode(&reply, buf, sizeof buf);
    ssize_t sent = len ? send(a->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return false;
    if (sent != (ssize_t)len) {
        slog(LOG_WARN, "admin: could not send the status: %s", sent < 0 ? strerror(errno) : "short send");
        conn_close(a);
        return false;
    }
    a->deadline = now_ns() + ADMIN_STALL_NS;
    if (n == 0) { /* the empty message that ends the report */
        conn_close(a);
        return false;
    }
    a->sent += n;
    if (a->sent > a->text.len / 2) { /* keep the buffer to about two messages */
        memmove(a->text.data, a->text.data + a->sent, a->text.len - a->sent);
        a->text.len -= a->sent;
        a->sent = 0;
    }
    return true;
}

static void read_request(struct admin_conn *a, uint32_t events)
{
    uint8_t req[GS_MSG_MAX];
    ssize_t n = recv(a->fd, req, sizeof req, MSG_TRUNC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && !(events & (EPOLLHUP | EPOLLERR)))
        return;
    struct gs_msg msg;
    if (n <= 0 || (size_t)n > sizeof req || gs_msg_decode(req, (size_t)n, &msg) != GS_DECODE_OK ||
        msg.type != GS_MSG_STATUS_REQUEST) {
        if (n != 0)
            slog_limited(&admin_sock, LOG_WARN, "admin: malformed request; connection closed");
        conn_close(a);
        return;
    }
    a->writing = true;
    a->deadline = now_ns() + ADMIN_STALL_NS;
    status_begin(&a->cursor, (enum gs_status_format)msg.u.status.format);
    if (loop_mod(&a->watch, EPOLLOUT) != 0) {
        slog(LOG_ERR, "admin: epoll: %s", strerror(errno));
        conn_close(a);
    }
}

static void conn_event(void *arg, uint32_t events)
{
    struct admin_conn *a = arg;
    if (!a->writing) {
        read_request(a, events);
        return; /* writable is reported next round */
    }
    if (events & (EPOLLHUP | EPOLLERR)) {
        conn_close(a);
        return;
    }
    /* One piece per wake-up: tenants are served between two. */
    send_next(a);
}

/* Closes the oldest connection still waiting for its request, to make
 * room; false if every one is being answered. */
static bool evict_silent(void)
{
    struct admin_conn *oldest = NULL;
    for (struct admin_conn *a = conns; a; a = a->next)
        if (!a->writing && (!oldest || a->deadline < oldest->deadline))
            oldest = a;
    if (!oldest)
        return false;
    slog_limited(&admin_sock, LOG_WARN, "admin: %u connections open and a new one: the oldest silent one is closed",
                 nconns);
    conn_close(oldest);
    return true;
}

static void admin_readable(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    for (int i = 0; i < 4 * ADMIN_MAX_CONNS && (nconns < ADMIN_MAX_CONNS || evict_silent()); i++) {
        /* The operator is served even out of descriptors: with the spare. */
        bool used_spare;
        int fd = listener_accept(&admin_listener, true, &used_spare);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                slog_limited(&admin_sock, LOG_WARN, "admin socket: accept: %s; not read for 100 ms", strerror(errno));
                listener_pause(&admin_listener, ADMIN_PAUSE_NS);
            }
            return;
        }
        struct admin_conn *a = calloc(1, sizeof *a);
        if (!a) {
            slog(LOG_ERR, "admin: out of memory");
            if (close(fd) != 0)
                slog(LOG_WARN, "close: %s", strerror(errno));
            if (used_spare)
                listener_spare_back();
            return;
        }
        a->fd = fd;
        a->used_spare = used_spare;
        a->deadline = now_ns() + ADMIN_REQUEST_NS;
        a->watch = (struct loop_watch){.fd = fd, .fn = conn_event, .arg = a};
        a->next = conns;
        conns = a;
        nconns++;
        if (loop_add(&a->watch, EPOLLIN) != 0) {
            slog(LOG_ERR, "admin: epoll: %s", strerror(errno));
            conn_close(a);
            return;
        }
    }
    if (nconns >= ADMIN_MAX_CONNS)
        listener_pause(&admin_listener, 0); /* all busy answering: the rest wait in the backlog */
}

int admin_open(void)
{
    if (rundir_listen(rundir_admin_dir(), "admin.sock", 0600, 16, &admin_sock) != 0) {
        slog(LOG_ERR, "cannot listen on %s/admin.sock: %s", options.run_dir, strerror(errno));
        return -1;
    }
    listener_init(&admin_listener, admin_sock.fd, admin_readable, NULL, loop_add, loop_del);
    return listener_resume(&admin_listener) ? 0 : -1;
}

void admin_sweep(void)
{
    uint64_t now = now_ns();
    for (struct admin_conn *a = conns, *next; a; a = next) {
        next = a->next;
        if (now > a->deadline) {
            slog_limited(&admin_sock, LOG_WARN, "admin: a peer %s; connection closed",
                         a->writing ? "stopped reading the status" : "sent no request within 1 s");
            conn_close(a);
        }
    }
}

void admin_close(void)
{
    while (conns)
        conn_close(conns);
    listener_close(&admin_listener);
    rundir_unlisten(rundir_admin_dir(), "admin.sock", &admin_sock);
}
