/*
 * The /metrics listener: HTTP/1.x on a TCP socket in the server's own
 * event loop (no thread, no library), for Prometheus to scrape.
 *
 * Nothing a peer does can hold the loop or grow without bound:
 *   - every socket is non-blocking; the listener and the connections are
 *     watched in an epoll set of their own, and that set is one watch on
 *     the server's loop: each round of the loop, metrics get one turn
 *     (on_round), which handles at most ROUND_EVENTS events (an accept, a
 *     read, a write), takes at most one snapshot and renders at most
 *     ROUND_BYTES of text, all connections together. Whatever else is
 *     ready (a tenant's ACQUIRE) is served before the next turn, however
 *     many scrapers there are. Turns take at most SHARE_PERCENT of the
 *     time (each charged the time it took, at least TURN_MIN_NS; a bucket
 *     of CREDIT_MAX_NS for bursts): past it, the set leaves the loop until
 *     the bucket has refilled, so that the server, idle most of the time,
 *     is quick to wake for a tenant even on a machine short of CPU, and a
 *     peer sending a byte at a time wakes it rarely;
 *   - at most METRICS_MAX_CONNS connections; when full, a new one closes
 *     the oldest that has not sent its whole request yet, and if every one
 *     is being answered the listener waits (connections queue in the
 *     kernel's backlog);
 *   - a request head is at most HTTP_REQUEST_MAX bytes (then 431), read
 *     into a fixed buffer and parsed as it arrives (the search for its end
 *     goes on where it stopped: a head sent a byte at a time is never read
 *     again from its start), and must be complete REQUEST_TIMEOUT_NS after
 *     the connection was accepted; the response must be taken within
 *     RESPONSE_TIMEOUT_NS; a peer past either is closed;
 *   - a scrape copies the figures at once (metrics_snapshot.c), then
 *     writes its text at most PIECE bytes per turn as the socket takes it
 *     (chunked for HTTP/1.1, so a cut-off response is seen as one), so a
 *     scrape of any size costs the scheduler at most one piece at a time.
 * One request per connection ("Connection: close"). Only GET and HEAD of
 * /metrics (and / with a pointer to it) are served.
 *
 * A port that cannot be bound (in use) is logged and tried again every
 * RETRY_NS: the token server runs on without its metrics meanwhile.
 */
#include "metrics_snapshot.h"
#include "http_request.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define METRICS_MAX_CONNS 16
/* What one turn of the loop may do, all connections together. */
#define ROUND_EVENTS 8
#define ROUND_BYTES 32768 /* received and rendered */
/* And over time: the time turns hold the loop, as a share of the time that
 * passes, with a bucket for bursts (a scrape of 100 tenants x 8 GPUs takes
 * about 3 ms). A turn is charged the wall time it took: its CPU time, or
 * more where the machine is busy and it was preempted, which is the delay
 * a tenant's message behind it sees; so metrics slow down when CPU is
 * short. And at least TURN_MIN_NS, about what waking the server for it
 * and its system calls cost, so that turns come at most 2000 times a
 * second: a peer that sends its request a byte at a time cannot wake the
 * server for each byte. */
#define SHARE_PERCENT 10
#define CREDIT_MAX_NS 5000000ull
#define TURN_MIN_NS 50000ull
/* The kernel's queue of connections not yet accepted (capped by
 * net.core.somaxconn). A connection that finds it full has its SYN dropped
 * and waits for TCP's retransmission, a second later: deep enough that a
 * flood of held connections rarely leaves a real scrape waiting so. */
#define LISTEN_BACKLOG 1024
#define REQUEST_TIMEOUT_NS 2000000000ull
#define RESPONSE_TIMEOUT_NS 10000000000ull
#define TICK_NS 250000000ull
#define RETRY_NS 5000000000ull
#define PIECE 32768
#define CHUNK_HEAD 10 /* "XXXXXXXX\r\n": the size of a chunk, fixed width */

struct metrics_conn {
    int fd;
    struct loop_watch watch;
    bool writing;                  /* the request is in; the answer goes out */
    char request[HTTP_REQUEST_MAX];
    size_t request_len;
    struct http_scan scan;         /* how far the request has been parsed */
    bool snapshot_due;             /* a scrape whose figures are not taken yet */
    struct metrics_snapshot *snapshot; /* NULL for answers without a body to write */
    struct metrics_cursor cursor;
    bool chunked, complete;        /* complete: nothing more to write into out */
    struct text out;
    size_t sent;                   /* bytes of out sent */
    uint64_t deadline;
    struct metrics_conn *next;
};

/* The listener, its connections, their epoll set and its watch on the
 * loop, this turn's budget and the timer; owned by the loop's thread. */
static int set_fd = -1;
static struct loop_watch set_watch = {.fd = -1};
static bool set_watched;           /* set_watch is in the loop's epoll set */
static struct {
    unsigned events, snapshots;
    size_t bytes;
} round_left;
static int64_t credit_ns = (int64_t)CREDIT_MAX_NS; /* the time turns may take now */
static uint64_t credit_at;         /* when credit_ns was last brought up to date */
static struct timer resume;
static struct listener listener = {.watch = {.fd = -1}}; /* in the set */
static struct sockaddr_storage listen_addr;
static socklen_t listen_addr_len;
static uint64_t retry_at;          /* 0, or when to try to bind again */
static bool bind_failed_logged;
static struct timer tick;
static bool tick_armed;
static struct metrics_conn *conns;
static unsigned nconns;

bool metrics_parse_addr(const char *text, struct sockaddr_storage *out, socklen_t *len)
{
    const char *colon = strrchr(text, ':');
    if (!colon || !colon[1] || strlen(colon + 1) > 5)
        return false;
    char *end;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end || port == 0 || port > 65535 || colon[1] < '0' || colon[1] > '9')
        return false;
    char host[64];
    size_t host_len = (size_t)(colon - text);
    if (host_len >= sizeof host)
        return false;
    memcpy(host, text, host_len);
    host[host_len] = '\0';
    memset(out, 0, sizeof *out);
    if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;
        host[host_len - 1] = '\0';
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        *len = sizeof *a;
        return inet_pton(AF_INET6, host + 1, &a->sin6_addr) == 1;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)out;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    *len = sizeof *a;
    if (host_len == 0) {
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        return true;
    }
    return inet_pton(AF_INET, host, &a->sin_addr) == 1;
}

static int set_add(struct loop_watch *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};
    return epoll_ctl(set_fd, EPOLL_CTL_ADD, w->fd, &ev);
}

static int set_mod(struct loop_watch *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};
    return epoll_ctl(set_fd, EPOLL_CTL_MOD, w->fd, &ev);
}

static void set_del(struct loop_watch *w)
{
    if (epoll_ctl(set_fd, EPOLL_CTL_DEL, w->fd, NULL) != 0)
        slog(LOG_ERR, "metrics: epoll_ctl(DEL, fd %d): %s", w->fd, strerror(errno));
}

static void spend_bytes(size_t n)
{
    round_left.bytes = n < round_left.bytes ? round_left.bytes - n : 0;
}

static void on_resume(void *arg)
{
    (void)arg;
    if (!set_watched && set_fd >= 0) {
        if (loop_add(&set_watch, EPOLLIN) == 0)
            set_watched = true;
        else
            slog(LOG_ERR, "metrics: epoll: %s", strerror(errno));
    }
}

/* Charges a turn that took took_ns, ending now; past the share, the set
 * leaves the loop until the credit is back. */
static void charge(uint64_t took_ns, uint64_t now)
{
    credit_ns -= (int64_t)(took_ns > TURN_MIN_NS ? took_ns : TURN_MIN_NS);
    if (credit_ns >= 0)
        return;
    loop_del(&set_watch);
    set_watched = false;
    timer_at(&resume, now + (uint64_t)(-credit_ns) * 100 / SHARE_PERCENT);
}

/* Metrics' turn in a round of the loop: ready events of the set one at a
 * time (so a callback that closes a connection leaves no stale event
 * behind), while the turn's budget lasts. What is left stays ready, and
 * the set with it: the loop comes back to it next round. */
static void on_round(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    uint64_t start = now_ns();
    credit_ns += (int64_t)((start - credit_at) * SHARE_PERCENT / 100);
    if (credit_ns > (int64_t)CREDIT_MAX_NS)
        credit_ns = (int64_t)CREDIT_MAX_NS;
    round_left.events = ROUND_EVENTS;
    round_left.bytes = ROUND_BYTES;
    round_left.snapshots = 1;
    while (round_left.events > 0 && round_left.bytes > 0) {
        struct epoll_event ev;
        int n = epoll_wait(set_fd, &ev, 1, 0);
        if (n < 0 && errno != EINTR)
            slog(LOG_ERR, "metrics: epoll_wait: %s", strerror(errno));
        if (n <= 0)
            break;
        round_left.events--;
        struct loop_watch *w = ev.data.ptr;
        w->fn(w->arg, ev.events);
    }
    uint64_t end = now_ns();
    credit_at = start;
    charge(end - start, end);
}

/* Arms the timer for the next thing due: a connection's deadline (checked
 * every TICK_NS), or the next try to bind. */
static void arm_tick(void)
{
    if (tick_armed)
        return;
    uint64_t when = conns ? now_ns() + TICK_NS : 0;
    if (retry_at && (!when || retry_at < when))
        when = retry_at;
    if (when) {
        timer_at(&tick, when);
        tick_armed = true;
    }
}

static void listen_resume(void)
{
    if (listener.watch.fd >= 0 && nconns < METRICS_MAX_CONNS)
        listener_resume(&listener);
}

static void conn_close(struct metrics_conn *c)
{
    for (struct metrics_conn **p = &conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    set_del(&c->watch);
    if (close(c->fd) != 0)
        slog(LOG_WARN, "metrics: close: %s", strerror(errno));
    metrics_snapshot_free(c->snapshot);
    text_free(&c->out);
    free(c);
    nconns--;
    listen_resume();
}

/* Queues a whole answer without a body to render: an error, or /. */
static void answer_fixed(struct metrics_conn *c, int minor, const char *status, const char *extra, const char *body,
                         bool head_only)
{
    text_printf(&c->out,
                "HTTP/1.%d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n%s"
                "Connection: close\r\n\r\n%s",
                minor, status, strlen(body), extra, head_only ? "" : body);
    c->complete = true;
}

static void answer(struct metrics_conn *c, enum http_parse parsed, const struct http_request *req)
{
    int minor = parsed == HTTP_OK ? req->minor : 1;
    switch (parsed) {
    case HTTP_OK: break;
    case HTTP_URI_TOO_LONG: answer_fixed(c, minor, "414 URI Too Long", "", "URI too long\n", false); return;
    case HTTP_TOO_LARGE:
        answer_fixed(c, minor, "431 Request Header Fields Too Large", "", "request head too large\n", false);
        return;
    case HTTP_BAD_VERSION:
        answer_fixed(c, minor, "505 HTTP Version Not Supported", "", "HTTP/1.0 and HTTP/1.1 only\n", false);
        return;
    default: answer_fixed(c, minor, "400 Bad Request", "", "bad request\n", false); return;
    }
    bool head_only = req->method == HTTP_HEAD;
    if (req->method == HTTP_OTHER_METHOD) {
        answer_fixed(c, minor, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", "GET or HEAD only\n", false);
        return;
    }
    if (strcmp(req->path, "/") == 0) {
        answer_fixed(c, minor, "200 OK", "", "gpuslice-server: metrics at /metrics\n", head_only);
        return;
    }
    if (strcmp(req->path, "/metrics") != 0) {
        answer_fixed(c, minor, "404 Not Found", "", "not found: metrics are at /metrics\n", head_only);
        return;
    }
    c->chunked = minor >= 1;
    text_printf(&c->out,
                "HTTP/1.%d 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n%s"
                "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
                minor, c->chunked && !head_only ? "Transfer-Encoding: chunked\r\n" : "");
    if (head_only) {
        c->complete = true;
        return;
    }
    c->snapshot_due = true; /* on its first turn to write (on_writable) */
}

/* Takes the figures of a scrape, the turn's one snapshot; false if this
 * turn has taken one already. */
static bool take_snapshot(struct metrics_conn *c)
{
    if (!round_left.snapshots)
        return false;
    round_left.snapshots--;
    c->snapshot_due = false;
    c->snapshot = metrics_snapshot_take();
    if (!c->snapshot) {
        slog(LOG_ERR, "metrics: out of memory taking a snapshot");
        c->out.len = 0;
        answer_fixed(c, c->chunked ? 1 : 0, "503 Service Unavailable", "", "out of memory\n", false);
    }
    return true;
}

/* Renders the next piece of the body into out (empty before), at most
 * what is left of the turn's budget. */
static void render_piece(struct metrics_conn *c)
{
    size_t head = c->out.len;
    if (c->chunked) {
        text_printf(&c->out, "%08x\r\n", 0u); /* its size, filled in below */
        if (c->out.failed)
            return;
    }
    size_t body = c->out.len;
    size_t budget = round_left.bytes < PIECE ? round_left.bytes : PIECE;
    c->complete = metrics_render_next(c->snapshot, &c->cursor, &c->out, budget);
    spend_bytes(c->out.len - head);
    if (!c->chunked || c->out.failed)
        return;
    size_t n = c->out.len - body;
    if (n == 0)
        c->out.len = head; /* nothing more: no empty chunk before the last */
    else {
        char size[32]; /* n < 2^32: eight digits */
        snprintf(size, sizeof size, "%08x\r\n", (unsigned)n);
        memcpy(c->out.data + head, size, CHUNK_HEAD);
        text_printf(&c->out, "\r\n");
    }
    if (c->complete)
        text_printf(&c->out, "0\r\n\r\n");
}

static void on_writable(struct metrics_conn *c)
{
    if (c->snapshot_due && !take_snapshot(c))
        return; /* next turn */
    if (c->sent == c->out.len && !c->complete) {
        if (!round_left.bytes)
            return; /* next turn */
        c->out.len = c->sent = 0;
        render_piece(c);
    }
    if (c->out.failed) {
        slog(LOG_ERR, "metrics: out of memory writing a scrape");
        conn_close(c);
        return;
    }
    if (c->sent < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->sent, c->out.len - c->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n < 0) {
            if (errno != EPIPE && errno != ECONNRESET)
                slog_limited(&conns, LOG_WARN, "metrics: send: %s", strerror(errno));
            conn_close(c);
            return;
        }
        c->sent += (size_t)n;
    }
    if (c->sent == c->out.len && c->complete)
        conn_close(c); /* all sent: the kernel delivers what it holds */
}

static void on_readable(struct metrics_conn *c, uint32_t events)
{
    ssize_t n = recv(c->fd, c->request + c->request_len, sizeof c->request - c->request_len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && !(events & (EPOLLHUP | EPOLLERR)))
        return;
    if (n <= 0) {
        conn_close(c);
        return;
    }
    c->request_len += (size_t)n;
    spend_bytes((size_t)n);
    struct http_request req;
    enum http_parse parsed = http_parse_more(&c->scan, c->request, c->request_len, &req);
    if (parsed == HTTP_INCOMPLETE)
        return;
    c->writing = true;
    c->deadline = now_ns() + RESPONSE_TIMEOUT_NS;
    answer(c, parsed, &req);
    if (set_mod(&c->watch, EPOLLOUT) != 0) {
        slog(LOG_ERR, "metrics: epoll: %s", strerror(errno));
        conn_close(c);
    }
}

static void conn_event(void *arg, uint32_t events)
{
    struct metrics_conn *c = arg;
    if (!c->writing)
        on_readable(c, events);
    else if (events & EPOLLERR)
        conn_close(c);
    else
        on_writable(c);
}

/* Closes the oldest connection that has not sent its request, to make
 * room; false if every one is being answered. */
static bool evict_reading(void)
{
    struct metrics_conn *oldest = NULL;
    for (struct metrics_conn *c = conns; c; c = c->next)
        if (!c->writing && (!oldest || c->deadline < oldest->deadline))
            oldest = c;
    if (!oldest)
        return false;
    metrics_count_drop(DROP_CONNECTION_LIMIT, 1);
    conn_close(oldest);
    return true;
}

/* One connection per event: the listener stays ready while more wait, and
 * comes back within the turn's budget. */
static void on_accept(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    if (nconns >= METRICS_MAX_CONNS && !evict_reading()) {
        listener_pause(&listener, 0); /* every one is being answered: the rest wait in the backlog */
        return;
    }
    int fd = listener_accept(&listener, false, NULL);
    if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            slog_limited(&conns, LOG_WARN, "metrics: accept: %s; not accepting for %llu ms", strerror(errno),
                         (unsigned long long)(TICK_NS / 1000000));
            listener_pause(&listener, TICK_NS);
        }
        return;
    }
    struct metrics_conn *c = calloc(1, sizeof *c);
    if (!c) {
        slog_limited(&conns, LOG_ERR, "metrics: out of memory");
        if (close(fd) != 0)
            slog(LOG_WARN, "metrics: close: %s", strerror(errno));
        return;
    }
    c->fd = fd;
    c->deadline = now_ns() + REQUEST_TIMEOUT_NS;
    c->watch = (struct loop_watch){.fd = fd, .fn = conn_event, .arg = c};
    c->next = conns;
    conns = c;
    nconns++;
    if (set_add(&c->watch, EPOLLIN) != 0) {
        slog(LOG_ERR, "metrics: epoll: %s", strerror(errno));
        conn_close(c);
        return;
    }
    arm_tick();
    on_readable(c, 0); /* the request is often there already */
}

static char addr_text[80];

static void describe_addr(void)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (listen_addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&listen_addr;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
        snprintf(addr_text, sizeof addr_text, "[%s]:%u", host, port);
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&listen_addr;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
        snprintf(addr_text, sizeof addr_text, "%s:%u", host, port);
    }
}

/* Binds and listens; on failure, tries again RETRY_NS later. */
static void try_listen(void)
{
    int fd = socket(listen_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&listen_addr, listen_addr_len) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        int err = errno;
        if (fd >= 0 && close(fd) != 0)
            slog(LOG_WARN, "metrics: close: %s", strerror(errno));
        if (!bind_failed_logged)
            slog(LOG_ERR, "metrics: cannot listen on %s: %s; trying again every %llu s", addr_text, strerror(err),
                 (unsigned long long)(RETRY_NS / 1000000000ull));
        bind_failed_logged = true;
        retry_at = now_ns() + RETRY_NS;
        arm_tick();
        return;
    }
    retry_at = 0;
    listener_init(&listener, fd, on_accept, NULL, set_add, set_del);
    listen_resume();
    slog(LOG_INFO, "metrics: serving http://%s/metrics", addr_text);
}

static void on_tick(void *arg)
{
    (void)arg;
    tick_armed = false;
    uint64_t now = now_ns();
    for (struct metrics_conn *c = conns, *next; c; c = next) {
        next = c->next;
        if (now > c->deadline) {
            slog_limited(&conns, LOG_INFO, "metrics: a peer %s in time; connection closed",
                         c->writing ? "did not take its answer" : "did not send its request");
            conn_close(c);
        }
    }
    if (retry_at && now >= retry_at)
        try_listen();
    arm_tick();
}

int metrics_open(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
        metrics_start_time = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (!options.metrics_addr || !options.metrics_addr[0])
        return 0;
    if (!metrics_parse_addr(options.metrics_addr, &listen_addr, &listen_addr_len))
        return -1;
    describe_addr();
    set_fd = epoll_create1(EPOLL_CLOEXEC);
    set_watch = (struct loop_watch){.fd = set_fd, .fn = on_round, .arg = NULL};
    if (set_fd < 0 || loop_add(&set_watch, EPOLLIN) != 0) {
        slog(LOG_ERR, "metrics: epoll: %s", strerror(errno));
        return -1;
    }
    set_watched = true;
    credit_at = now_ns();
    timer_init(&tick, on_tick, NULL);
    timer_init(&resume, on_resume, NULL);
    try_listen();
    return 0;
}

void metrics_close(void)
{
    while (conns)
        conn_close(conns);
    int fd = listener.watch.fd;
    listener_close(&listener);
    if (fd >= 0 && close(fd) != 0)
        slog(LOG_WARN, "metrics: close: %s", strerror(errno));
    timer_close(&tick);
    timer_close(&resume);
    if (set_watched) {
        loop_del(&set_watch);
        set_watched = false;
    }
    if (set_fd >= 0) {
        if (close(set_fd) != 0)
            slog(LOG_WARN, "metrics: close: %s", strerror(errno));
    }
    set_fd = set_watch.fd = -1;
}
