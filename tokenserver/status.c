/*
 * The status report gpuslicectl prints: per device the holder and the
 * queue, per tenant its settings and, per device, achieved share over the
 * last 10 s, slices, wait time, GPU time and memory, and its processes
 * (host PID, container, pod). As JSON (the layout is stable: fields are
 * only ever added) or as a table for people.
 *
 * A report can be any size (thousands of tenants times their GPUs), so it
 * is written a piece at a time (status_next), and the admin socket sends
 * each piece as it goes: the loop never stops for long, and nothing is
 * truncated. Between pieces the cursor remembers the id of the last device
 * or tenant written; ids only grow and the lists are in id order, so
 * entries added or removed in between never make it skip or repeat one.
 *
 * The achieved share every report shows (the status, top through it, and
 * /metrics) is status_achieved_share: the share over the 10 s before the
 * last refresh (every second), so that reports read at the same moment
 * agree whenever they were answered.
 */
#include "server.h"
#include "metrics/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void text_printf(struct text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        size_t room = t->cap - t->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->data ? t->data + t->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap : 4096;
        while (cap - t->len <= (size_t)n)
            cap *= 2;
        char *grown = realloc(t->data, cap);
        if (!grown) {
            t->failed = true;
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
}

void text_free(struct text *t)
{
    free(t->data);
    *t = (struct text){0};
}

enum { PART_HEAD, PART_DEVICES, PART_MIDDLE, PART_TENANTS, PART_PROCESSES_HEAD, PART_PROCESSES, PART_TAIL, PART_DONE };

void status_begin(struct status_cursor *cur, enum gs_status_format format)
{
    *cur = (struct status_cursor){.format = format, .part = PART_HEAD};
}

static const char *state_name(enum device_state s)
{
    return s == DEV_IDLE ? "idle" : s == DEV_RUNNING ? "running" : s == DEV_RESERVED ? "reserved" : "revoking";
}

/* The device after the cursor's: the next in the list if nothing was freed
 * since, else the first with a greater id. */
static struct device *device_after(const struct status_cursor *cur)
{
    if (cur->last && cur->removals == removals)
        return ((const struct device *)cur->last)->next;
    for (struct device *d = server_sched.devices; d; d = d->next)
        if (d->id > cur->last_id)
            return d;
    return NULL;
}

/* The achieved shares as of the last refresh (once a second): one entry
 * per tenant entry of each GPU, in the order of the GPUs (by id) and of
 * their entries, with the `removals` count they were taken at; owned by
 * the loop's thread. */
struct share_entry {
    uint64_t device_id;
    const struct sched_tenant *tenant;
    double share;
};
static struct share_entry *shares;
static size_t nshares, shares_cap;
static uint64_t shares_removals = UINT64_MAX;

void status_shares_refresh(uint64_t now)
{
    size_t n = 0;
    for (const struct device *d = server_sched.devices; d; d = d->next)
        n += d->ntenants;
    if (n > shares_cap) {
        struct share_entry *grown = realloc(shares, n * sizeof *grown);
        if (!grown) {
            shares_removals = UINT64_MAX; /* read live until it fits */
            return;
        }
        shares = grown;
        shares_cap = n;
    }
    nshares = 0;
    for (const struct device *d = server_sched.devices; d; d = d->next)
        for (size_t i = 0; i < d->ntenants; i++)
            shares[nshares++] = (struct share_entry){d->id, d->tenants[i].tenant,
                                                     device_tenant_recent_share(d, &d->tenants[i], now)};
    shares_removals = removals;
}

double status_achieved_share(const struct device *d, const struct device_tenant *dt, uint64_t now)
{
    /* The share read at whatever instant a report is answered moves by up
     * to 10 points a second as slices come and go (a slice enters the
     * window as another leaves it): two reports asked for together but
     * answered 50 ms apart differed by half a point and more, and would
     * by more for long quanta. So every report reads the shares of the
     * last refresh; a GPU or tenant entry newer than that, or any after a
     * tenant or GPU was freed since, is read live. */
    if (shares_removals == removals) {
        size_t lo = 0, hi = nshares;
        while (lo < hi) { /* the first entry of d */
            size_t mid = lo + (hi - lo) / 2;
            if (shares[mid].device_id < d->id)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t i = lo; i < nshares && shares[i].device_id == d->id; i++)
            if (shares[i].tenant == dt->tenant)
                return shares[i].share;
    }
    return device_tenant_recent_share(d, dt, now);
}

static struct tenant *tenant_after(const struct status_cursor *cur)
{
    if (cur->last && cur->removals == removals)
        return ((const struct tenant *)cur->last)->next;
    for (struct tenant *t = tenants; t; t = t->next)
        if (t->id > cur->last_id)
            return t;
    return NULL;
}

static void json_device(struct text *o, const struct device *d, bool first, uint64_t now)
{
    char uuid[37];
    uuid_text(d->uuid, uuid);
    text_printf(o, "%s{\"uuid\":\"GPU-%s\",\"state\":\"%s\",\"holder\":", first ? "" : ",", uuid, state_name(d->state));
    if (d->holder)
        text_printf(o, "\"%s\",\"slice_remaining_ms\":%.3f", d->holder->tenant->name,
                    d->state != DEV_RESERVED && d->deadline > now ? (double)(d->deadline - now) / 1e6 : 0.0);
    else
        text_printf(o, "null");
    text_printf(o, ",\"slices\":%llu,\"preemptions\":%llu,\"processes\":%zu,\"queue\":[", (unsigned long long)d->slices,
                (unsigned long long)d->preemptions, d->nslots);
    bool first_waiting = true;
    for (size_t i = 0; i < d->ntenants; i++)
        if (sched_in_line(&d->tenants[i])) {
            text_printf(o, "%s\"%s\"", first_waiting ? "" : ",", d->tenants[i].tenant->name);
            first_waiting = false;
        }
    text_printf(o, "]}");
}

/* Three arguments for "%s%s%s": the string in quotes, or null if empty. */
#define QUOTED_OR_NULL(s) (s)[0] ? "\"" : "", (s)[0] ? (s) : "null", (s)[0] ? "\"" : ""

static void json_tenant(struct text *o, const struct tenant *t, bool first, uint64_t now)
{
    uint64_t preempt_ns = t->sched.config.preempt_ns ? t->sched.config.preempt_ns : server_sched.preempt_ns;
    text_printf(o, "%s{\"name\":\"%s\",\"share\":%g,\"limit\":%g,\"quantum_ms\":%llu,\"memory\":%llu,"
                   "\"gang\":\"%s\",\"class\":\"%s\",\"preempt_ms\":%llu,\"clients\":%u,\"listening\":%s,"
                   "\"devices\":[",
                first ? "" : ",", t->name, t->sched.config.share, t->sched.config.limit,
                (unsigned long long)(t->sched.config.quantum_ns / 1000000), (unsigned long long)t->sched.config.memory,
                config_gang_name(t->sched.config.gang), config_class_name(t->sched.config.class),
                (unsigned long long)(preempt_ns / 1000000), t->clients, t->sock.fd >= 0 ? "true" : "false");
    bool first_device = true;
    for (const struct device *d = server_sched.devices; d; d = d->next) {
        const struct device_tenant *dt = sched_entry_find(d, &t->sched);
        if (!dt)
            continue;
        char uuid[37];
        uuid_text(d->uuid, uuid);
        text_printf(o, "%s{\"uuid\":\"GPU-%s\",\"achieved_share\":%.4f,\"target_share\":%.4f,\"slices\":%llu,\"wait_ms\":%.1f,"
                       "\"gpu_ms\":%.1f,\"waiting\":%u,\"overrun_p99_ms\":%.3f,\"overruns\":%zu,"
                       "\"mem_used\":%llu,\"mem_cap\":%llu,\"mem_peak\":%llu,\"oom_refusals\":%llu}",
                    first_device ? "" : ",", uuid, status_achieved_share(d, dt, now),
                    device_tenant_target_share(d, dt, now),
                    (unsigned long long)dt->slices, (double)dt->wait_ns / 1e6, (double)dt->used_ns / 1e6,
                    dt->waiting, (double)device_tenant_overrun_p99(dt) / 1e6, dt->noverruns,
                    (unsigned long long)dt->mem_used, (unsigned long long)t->sched.config.memory,
                    (unsigned long long)dt->mem_peak, (unsigned long long)dt->oom_refusals);
        first_device = false;
    }
    /* Its connected processes: host PID, container ID, pod UID. */
    text_printf(o, "],\"processes\":[");
    for (const struct client *c = t->members; c; c = c->member_next)
        text_printf(o, "%s{\"pid\":%u,\"container_id\":%s%s%s,\"pod_uid\":%s%s%s}", c == t->members ? "" : ",",
                    c->pid, QUOTED_OR_NULL(c->peer.container_id), QUOTED_OR_NULL(c->peer.pod_uid));
    text_printf(o, "]}");
}

static void table_device(struct text *o, const struct device *d)
{
    char uuid[37], queue[256] = "-";
    uuid_text(d->uuid, uuid);
    size_t q = 0;
    for (size_t i = 0; i < d->ntenants; i++)
        if (sched_in_line(&d->tenants[i]) && q < sizeof queue - GS_NAME_MAX - 2) {
            int n = snprintf(queue + q, sizeof queue - q, "%s%s", q ? "," : "", d->tenants[i].tenant->name);
            q += n > 0 ? (size_t)n : 0;
        }
    text_printf(o, "GPU-%-36s  %-8s  %-15s  %s\n", uuid, state_name(d->state),
                d->holder ? d->holder->tenant->name : "-", queue);
}

static void table_tenant(struct text *o, const struct tenant *t, uint64_t now)
{
    bool any = false;
    for (const struct device *d = server_sched.devices; d; d = d->next) {
        const struct device_tenant *dt = sched_entry_find(d, &t->sched);
        if (!dt)
            continue;
        char uuid[37];
        uuid_text(d->uuid, uuid);
        char cap[32] = "-";
        if (t->sched.config.memory)
            snprintf(cap, sizeof cap, "%.1f", (double)t->sched.config.memory / 1048576.0);
        text_printf(o, "%-15s  %5g  %5g  %7u  GPU-%.8s...  %12.1f%%  %6llu  %10.1f  %9.1f  %9.1f  %9s  %9.1f  %3llu  %s\n",
                    t->name, t->sched.config.share, t->sched.config.limit, t->clients, uuid,
                    100.0 * status_achieved_share(d, dt, now), (unsigned long long)dt->slices,
                    (double)dt->wait_ns / 1e6, (double)dt->used_ns / 1e6, (double)dt->mem_used / 1048576.0, cap,
                    (double)dt->mem_peak / 1048576.0, (unsigned long long)dt->oom_refusals,
                    config_class_name(t->sched.config.class));
        any = true;
    }
    if (!any)
        text_printf(o, "%-15s  %5g  %5g  %7u  -%s\n", t->name, t->sched.config.share, t->sched.config.limit, t->clients,
                    t->sock.fd >= 0 ? "" : "  (no socket)");
}

/* The table's line for each of the tenant's processes. */
static void table_processes(struct text *o, const struct tenant *t)
{
    for (const struct client *c = t->members; c; c = c->member_next)
        text_printf(o, "%-15s  %-8u  %-12.12s  %s\n", t->name, c->pid,
                    c->peer.container_id[0] ? c->peer.container_id : "-", c->peer.pod_uid[0] ? c->peer.pod_uid : "-");
}

/* Writes one piece: a header, one device, one tenant (in JSON with its
 * processes; tables list the processes in a table of their own after the
 * tenants', one tenant a piece) or a tail. */
static void next_piece(struct status_cursor *cur, struct text *o, uint64_t now)
{
    bool json = cur->format == GS_STATUS_JSON;
    switch (cur->part) {
    case PART_HEAD:
        if (json)
            text_printf(o, "{\"version\":1,\"connections\":%u,\"connection_limit\":%lu,\"devices\":[", nclients,
                        accept_client_budget());
        else
            text_printf(o, "DEVICE                                    STATE     HOLDER           QUEUE\n");
        cur->part = PART_DEVICES;
        break;
    case PART_DEVICES: {
        struct device *d = device_after(cur);
        if (!d) {
            cur->part = PART_MIDDLE;
            break;
        }
        if (json)
            json_device(o, d, cur->count == 0, now);
        else
            table_device(o, d);
        cur->count++;
        cur->last_id = d->id;
        cur->last = d;
        cur->removals = removals;
        break;
    }
    case PART_MIDDLE:
        if (json)
            text_printf(o, "],\"tenants\":[");
        else
            text_printf(o, "%s\nTENANT           SHARE  LIMIT  CLIENTS  DEVICE         ACHIEVED(10s)  SLICES    WAIT(ms)"
                           "    GPU(ms)   MEM(MiB)   CAP(MiB)  PEAK(MiB)  OOM  CLASS\n",
                        cur->count ? "" : "(no GPU in use yet)\n");
        cur->part = PART_TENANTS;
        cur->last_id = 0;
        cur->last = NULL;
        cur->count = 0;
        break;
    case PART_TENANTS: {
        struct tenant *t = tenant_after(cur);
        if (!t) {
            cur->part = json ? PART_TAIL : PART_PROCESSES_HEAD;
            break;
        }
        if (json)
            json_tenant(o, t, cur->count == 0, now);
        else
            table_tenant(o, t, now);
        cur->count++;
        cur->last_id = t->id;
        cur->last = t;
        cur->removals = removals;
        break;
    }
    case PART_PROCESSES_HEAD:
        text_printf(o, "\nTENANT           PID       CONTAINER     POD\n%s",
                    nclients ? "" : "(no process connected)\n");
        cur->part = PART_PROCESSES;
        cur->last_id = 0;
        cur->last = NULL;
        cur->count = 0;
        break;
    case PART_PROCESSES: {
        struct tenant *t = tenant_after(cur);
        if (!t) {
            cur->part = PART_TAIL;
            break;
        }
        table_processes(o, t);
        cur->count++;
        cur->last_id = t->id;
        cur->last = t;
        cur->removals = removals;
        break;
    }
    case PART_TAIL:
        if (json)
            text_printf(o, "]}\n");
        cur->part = PART_DONE;
        break;
    default:
        break;
    }
}

bool status_next(struct status_cursor *cur, struct text *out, size_t budget)
{
    uint64_t now = now_ns();
    size_t start = out->len;
    while (cur->part != PART_DONE && out->len - start < budget && !out->failed)
        next_piece(cur, out, now);
    return cur->part == PART_DONE;
}
