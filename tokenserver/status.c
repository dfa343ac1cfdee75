/*
 * The admin socket (RUNDIR/admin.sock, mode 0600) and the status report
 * gpuslicectl prints: per device the holder and the queue, per tenant its
 * settings and, per device, achieved share over the last 10 s, slices,
 * wait time and GPU time, and its processes (host PID, container, pod).
 * The JSON layout is stable: fields are only ever added.
 */
#include "server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The admin listening socket; owned by the loop's thread. */
static struct loop_watch admin_watch = {.fd = -1};
static char admin_path[4096];

struct out {
    char *buf;
    size_t cap, len;
};

static void out(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(struct out *o, const char *fmt, ...)
{
    if (o->len >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
    if (o->len >= o->cap)
        o->len = o->cap; /* truncated; the caller checks */
}

static void uuid_str(const uint8_t uuid[16], char str[37])
{
    static const int dash[16] = {0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0};
    char *p = str;
    for (int i = 0; i < 16; i++) {
        p += sprintf(p, "%02x", uuid[i]);
        if (dash[i])
            *p++ = '-';
    }
    *p = '\0';
}

/* The tenant's entry on a device, or NULL if it never used it. */
static const struct device_tenant *tenant_on(const struct device *d, const struct tenant *t)
{
    for (size_t i = 0; i < d->ntenants; i++)
        if (d->tenants[i].tenant == t)
            return &d->tenants[i];
    return NULL;
}

static const char *state_name(enum device_state s)
{
    return s == DEV_IDLE ? "idle" : s == DEV_RUNNING ? "running" : "revoking";
}

/* Three arguments for "%s%s%s": the string in quotes, or null if empty. */
#define QUOTED_OR_NULL(s) (s)[0] ? "\"" : "", (s)[0] ? (s) : "null", (s)[0] ? "\"" : ""

/* The tenant's connected processes: host PID, container ID, pod UID. */
static void processes_json(struct out *o, const struct tenant *t)
{
    bool first = true;
    for (const struct client *c = clients; c; c = c->next) {
        if (c->tenant != t)
            continue;
        out(o, "%s{\"pid\":%u,\"container_id\":%s%s%s,\"pod_uid\":%s%s%s}", first ? "" : ",", c->pid,
            QUOTED_OR_NULL(c->peer.container_id), QUOTED_OR_NULL(c->peer.pod_uid));
        first = false;
    }
}

static void processes_table(struct out *o)
{
    out(o, "\nTENANT           PID       CONTAINER     POD\n");
    if (!clients)
        out(o, "(no process connected)\n");
    for (const struct tenant *t = tenants; t; t = t->next)
        for (const struct client *c = clients; c; c = c->next)
            if (c->tenant == t)
                out(o, "%-15s  %-8u  %-12.12s  %s\n", t->name, c->pid,
                    c->peer.container_id[0] ? c->peer.container_id : "-",
                    c->peer.pod_uid[0] ? c->peer.pod_uid : "-");
}

size_t status_json(char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    uint64_t now = now_ns();
    out(&o, "{\"version\":1,\"devices\":[");
    for (struct device *d = devices; d; d = d->next) {
        char uuid[37];
        uuid_str(d->uuid, uuid);
        out(&o, "%s{\"uuid\":\"GPU-%s\",\"state\":\"%s\",\"holder\":", d == devices ? "" : ",", uuid,
            state_name(d->state));
        if (d->holder)
            out(&o, "\"%s\",\"slice_remaining_ms\":%.3f", d->holder->tenant->name,
                d->deadline > now ? (double)(d->deadline - now) / 1e6 : 0.0);
        else
            out(&o, "null");
        out(&o, ",\"slices\":%llu,\"queue\":[", (unsigned long long)d->slices);
        bool first = true;
        for (size_t i = 0; i < d->ntenants; i++)
            if (d->tenants[i].waiting > 0) {
                out(&o, "%s\"%s\"", first ? "" : ",", d->tenants[i].tenant->name);
                first = false;
            }
        out(&o, "]}");
    }
    out(&o, "],\"tenants\":[");
    for (struct tenant *t = tenants; t; t = t->next) {
        out(&o, "%s{\"name\":\"%s\",\"share\":%g,\"limit\":%g,\"quantum_ms\":%llu,\"memory\":%llu,"
                "\"clients\":%u,\"devices\":[",
            t == tenants ? "" : ",", t->name, t->config.share, t->config.limit,
            (unsigned long long)(t->config.quantum_ns / 1000000), (unsigned long long)t->config.memory,
            t->clients);
        bool first = true;
        for (struct device *d = devices; d; d = d->next) {
            const struct device_tenant *dt = tenant_on(d, t);
            if (!dt)
                continue;
            char uuid[37];
            uuid_str(d->uuid, uuid);
            out(&o, "%s{\"uuid\":\"GPU-%s\",\"achieved_share\":%.4f,\"slices\":%llu,\"wait_ms\":%.1f,"
                    "\"gpu_ms\":%.1f,\"waiting\":%u,\"overrun_p99_ms\":%.3f,\"overruns\":%zu,"
                    "\"mem_used\":%llu,\"mem_cap\":%llu,\"mem_peak\":%llu,\"oom_refusals\":%llu}",
                first ? "" : ",", uuid, device_tenant_recent_share(d, dt, now), (unsigned long long)dt->slices,
                (double)dt->wait_ns / 1e6, (double)dt->used_ns / 1e6, dt->waiting,
                (double)device_tenant_overrun_p99(dt) / 1e6, dt->noverruns, (unsigned long long)dt->mem_used,
                (unsigned long long)t->config.memory, (unsigned long long)dt->mem_peak,
                (unsigned long long)dt->oom_refusals);
            first = false;
        }
        out(&o, "],\"processes\":[");
        processes_json(&o, t);
        out(&o, "]}");
    }
    out(&o, "]}\n");
    return o.len < o.cap ? o.len : 0;
}

size_t status_table(char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    uint64_t now = now_ns();
    out(&o, "DEVICE                                    STATE     HOLDER           QUEUE\n");
    for (struct device *d = devices; d; d = d->next) {
        char uuid[37], queue[256] = "-";
        uuid_str(d->uuid, uuid);
        size_t q = 0;
        for (size_t i = 0; i < d->ntenants; i++)
            if (d->tenants[i].waiting > 0 && q < sizeof queue - GS_NAME_MAX - 2) {
                int n = snprintf(queue + q, sizeof queue - q, "%s%s", q ? "," : "", d->tenants[i].tenant->name);
                q += n > 0 ? (size_t)n : 0;
            }
        out(&o, "GPU-%-36s  %-8s  %-15s  %s\n", uuid, state_name(d->state),
            d->holder ? d->holder->tenant->name : "-", queue);
    }
    if (!devices)
        out(&o, "(no GPU in use yet)\n");
    out(&o, "\nTENANT           SHARE  LIMIT  CLIENTS  DEVICE         ACHIEVED(10s)  SLICES    WAIT(ms)    GPU(ms)"
            "   MEM(MiB)   CAP(MiB)  PEAK(MiB)  OOM\n");
    for (struct tenant *t = tenants; t; t = t->next) {
        bool any = false;
        for (struct device *d = devices; d; d = d->next) {
            const struct device_tenant *dt = tenant_on(d, t);
            if (!dt)
                continue;
            char uuid[37];
            uuid_str(d->uuid, uuid);
            char cap[32] = "-";
            if (t->config.memory)
                snprintf(cap, sizeof cap, "%.1f", (double)t->config.memory / 1048576.0);
            out(&o, "%-15s  %5g  %5g  %7u  GPU-%.8s...  %12.1f%%  %6llu  %10.1f  %9.1f  %9.1f  %9s  %9.1f  %3llu\n",
                t->name, t->config.share, t->config.limit, t->clients, uuid,
                100.0 * device_tenant_recent_share(d, dt, now), (unsigned long long)dt->slices,
                (double)dt->wait_ns / 1e6, (double)dt->used_ns / 1e6, (double)dt->mem_used / 1048576.0, cap,
                (double)dt->mem_peak / 1048576.0, (unsigned long long)dt->oom_refusals);
            any = true;
        }
        if (!any)
            out(&o, "%-15s  %5g  %5g  %7u  -\n", t->name, t->config.share, t->config.limit, t->clients);
    }
    processes_table(&o);
    return o.len < o.cap ? o.len : 0;
}

static void admin_readable(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    int fd = accept4(admin_watch.fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    /* One request, one answer; a peer that sends nothing within 1 s is
     * dropped so that it cannot stall the loop. */
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    uint8_t req[GS_MSG_MAX];
    ssize_t n = recv(fd, req, sizeof req, MSG_TRUNC);
    struct gs_msg msg;
    if (n > 0 && (size_t)n <= sizeof req && gs_msg_decode(req, (size_t)n, &msg) == GS_DECODE_OK &&
        msg.type == GS_MSG_STATUS_REQUEST) {
        static char text[GS_MSG_MAX - GS_HEADER_SIZE];
        struct gs_msg reply = {.type = GS_MSG_STATUS_REPLY, .text = text};
        reply.text_len = msg.u.status.format == GS_STATUS_TABLE ? status_table(text, sizeof text)
                                                                : status_json(text, sizeof text);
        static uint8_t buf[GS_MSG_MAX];
        size_t len = gs_msg_encode(&reply, buf, sizeof buf);
        if (len && send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
            slog(LOG_WARN, "admin: could not send the status reply");
    } else {
        slog(LOG_WARN, "admin: malformed request; connection closed");
    }
    close(fd);
}

int admin_open(void)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int n = snprintf(admin_path, sizeof admin_path, "%s/admin.sock", options.run_dir);
    if (n < 0 || (size_t)n >= sizeof addr.sun_path) {
        slog(LOG_ERR, "admin socket path %s is too long", admin_path);
        return -1;
    }
    memcpy(addr.sun_path, admin_path, (size_t)n + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    unlink(admin_path);
    mode_t old = umask(0077); /* created 0600 from the start */
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (rc != 0 || chmod(admin_path, 0600) != 0 || listen(fd, 16) != 0) {
        slog(LOG_ERR, "cannot listen on %s: %s", admin_path, strerror(errno));
        close(fd);
        return -1;
    }
    admin_watch = (struct loop_watch){.fd = fd, .fn = admin_readable, .arg = NULL};
    return loop_add(&admin_watch, EPOLLIN);
}

void admin_close(void)
{
    if (admin_watch.fd >= 0) {
        loop_del(&admin_watch);
        close(admin_watch.fd);
        unlink(admin_path);
        admin_watch.fd = -1;
    }
}
