/*
 * A process's side of the protocol in the simulation: a model of the shim
 * (shim/gs_client.c, gs_gate.c, gs_drain.c, gs_idle.c, gs_lease.c) as the
 * server sees it, per GPU:
 *   - NONE -> WANT on the first launch that finds no slice (ACQUIRE);
 *   - WANT -> HOLD on GRANT; launches are admitted while the estimated
 *     device time queued fits before the deadline (any one at the start of
 *     a slice); a launch that does not fit closes admission;
 *   - HOLD -> DRAIN at the deadline, on REVOKE, when nothing fits, or after
 *     2 ms without a launch or running work (an idle release);
 *   - DRAIN -> RELEASE once its queued work has finished, asking for more
 *     unless it drained for idleness; the idle spells of the slice (its
 *     work finished after a synchronize, until the next launch) go in it.
 * A GRANT with the id of the slice it holds extends it; one it gave back
 * is ignored unless it is a JOIN. Device memory is counted in leases of
 * headroom, as gs_lease.c does. Reconnection after a lost server: backoff
 * from 50 ms to 1 s, then HELLO, DEVICE, MEM_DECLARE, ACQUIRE.
 */
#include "sim.h"

#include <string.h>

#define IDLE_RELEASE_NS (2 * MS)
#define FIRST_SLICE_ALLOWANCE 4     /* launches before the first measurement */
#define LEASE_RETRY_NS (500 * US)
#define LEASE_IDLE_NS (40 * MS)     /* headroom goes back after this without allocations */

bool shim_policy_open(struct world *w, const struct sim_proc *p)
{
    enum on_server_down policy = w->tenant[p->tenant].config.on_server_down;
    if (policy == ON_DOWN_DEFAULT)
        policy = w->policy;
    return policy == ON_DOWN_OPEN;
}

static bool connected(const struct sim_proc *p)
{
    return p->conn >= 0 && p->welcomed;
}

static uint64_t chunk(uint64_t bytes)
{
    uint64_t c = 2 * bytes;
    return c < 8 * MIB ? 8 * MIB : c > 1024 * MIB ? 1024 * MIB : c;
}

uint64_t shim_count(const struct sim_proc *p, int i)
{
    return p->dev[i].held + p->dev[i].headroom;
}

static void send(struct world *w, struct sim_proc *p, const struct gs_msg *m)
{
    if (p->conn >= 0)
        send_to_server(w, p->conn, m);
}

static void send_slot(struct world *w, struct sim_proc *p, enum gs_msg_type type, const struct shim_dev *d)
{
    struct gs_msg m = {.type = type};
    m.u.acquire.slot = (uint32_t)d->slot;
    send(w, p, &m);
}

static void send_mem(struct world *w, struct sim_proc *p, enum gs_msg_type type, const struct shim_dev *d,
                     uint64_t bytes)
{
    struct gs_msg m = {.type = type};
    m.u.mem.slot = (uint32_t)d->slot;
    m.u.mem.bytes = bytes;
    send(w, p, &m);
}

/* ---- held time, for the figures ------------------------------------------------- */

/* A tenant waits for a GPU while one of its processes there wants a slice
 * and none holds one; recomputed after every change of either count. */
static void wait_update(struct world *w, int t, int g)
{
    bool waiting = w->wanting[t][g] > 0 && w->holding[t][g] == 0;
    if (waiting && !w->fig.wait_since[t][g]) {
        w->fig.wait_since[t][g] = w->now;
    } else if (!waiting && w->fig.wait_since[t][g]) {
        uint64_t waited = w->now - w->fig.wait_since[t][g];
        if (waited > w->fig.max_wait[t][g]) {
            w->fig.max_wait[t][g] = waited;
            trace(w, "tenant %s: waited %.3f ms for GPU %d (its longest yet)", w->tenant[t].name, (double)waited / 1e6, g);
        }
        w->fig.wait_since[t][g] = 0;
    }
}

static void hold_begin(struct world *w, struct sim_proc *p, int i)
{
    int t = p->tenant, g = p->dev[i].gpu;
    if (w->holding[t][g]++ == 0)
        w->holding_since[t][g] = w->now;
    wait_update(w, t, g);
}

static void hold_end(struct world *w, struct sim_proc *p, int i)
{
    int t = p->tenant, g = p->dev[i].gpu;
    if (w->holding[t][g] > 0 && --w->holding[t][g] == 0) {
        uint64_t held = w->now - w->holding_since[t][g];
        w->fig.held[t][g] += held;
        if (held > w->fig.max_held[t][g])
            w->fig.max_held[t][g] = held;
    }
    wait_update(w, t, g);
}

static void want_begin(struct world *w, struct sim_proc *p, int i)
{
    int t = p->tenant, g = p->dev[i].gpu;
    w->wanting[t][g]++;
    wait_update(w, t, g);
}

static void want_end(struct world *w, struct sim_proc *p, int i)
{
    int t = p->tenant, g = p->dev[i].gpu;
    if (w->wanting[t][g] > 0)
        w->wanting[t][g]--;
    wait_update(w, t, g);
    if (p->returning && p->first_wait_start) {
        uint64_t first = w->now - p->first_wait_start;
        if (first > p->first_wait_ns)
            p->first_wait_ns = first;
        p->first_wait_start = 0;
    }
}

/* ---- slices ------------------------------------------------------------------ */

static void release(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    bool more = d->waiters > 0 || !d->drain_for_idle;
    uint64_t idle = d->idle_acc + (d->idle_from ? w->now - d->idle_from : 0);
    struct gs_msg m = {.type = GS_MSG_RELEASE};
    m.u.release.slot = (uint32_t)d->slot;
    m.u.release.grant = d->grant;
    m.u.release.idle_ns = idle;
    m.u.release.flags = more ? GS_RELEASE_MORE : 0;
    trace(w, "proc %d gpu %d: RELEASE grant %llu idle %.3f ms%s", p->id, d->gpu, (unsigned long long)d->grant,
          (double)idle / 1e6, more ? " more" : "");
    send(w, p, &m);
    d->last_released = d->grant;
    d->idle_acc = 0;
    d->idle_from = 0;
    hold_end(w, p, i);
    d->st = more ? SH_WANT : SH_NONE;
    if (more)
        want_begin(w, p, i);
}

static void begin_drain(struct world *w, struct sim_proc *p, int i, bool for_idle)
{
    struct shim_dev *d = &p->dev[i];
    d->st = SH_DRAIN;
    d->drain_for_idle = for_idle;
    if (d->queued == 0)
        release(w, p, i);
}

/* Whether one more item fits in the slice held (gs_gate_update_budget_locked). */
static bool fits(const struct world *w, const struct shim_dev *d)
{
    if (w->now >= d->deadline)
        return false;
    if (d->est == 0) /* not measured yet: a fixed allowance */
        return d->queued < FIRST_SLICE_ALLOWANCE;
    if (w->now + d->queued_est + d->est <= d->deadline)
        return true;
    /* one launch at the start of a slice, whatever its length */
    return d->queued == 0 && w->now - d->slice_start < d->deadline - w->now;
}

static void admit(struct world *w, struct shim_dev *d)
{
    d->launched = true;
    d->queued++;
    d->queued_est += d->est;
    d->quiet_since = w->now;
    if (d->idle_from) {
        d->idle_acc += w->now - d->idle_from;
        d->idle_from = 0;
    }
}

bool shim_launch(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    if (p->conn < 0 && shim_policy_open(w, p)) {
        d->queued++;
        d->waiters = 0;
        return true; /* ungated while the server is gone: the caller excuses it */
    }
    switch (d->st) {
    case SH_HOLD:
        if (fits(w, d)) {
            admit(w, d);
            d->waiters = 0;
            if (d->catch_up) { /* one launch, then drain */
                d->catch_up = false;
                begin_drain(w, p, i, false);
            }
            return true;
        }
        d->waiters = 1;
        begin_drain(w, p, i, false); /* nothing more fits */
        return false;
    case SH_NONE:
        d->waiters = 1;
        if (connected(p)) {
            send_slot(w, p, GS_MSG_ACQUIRE, d);
            d->st = SH_WANT;
            want_begin(w, p, i);
        }
        return false;
    default:
        d->waiters = 1;
        return false;
    }
}

void shim_item_done(struct world *w, struct sim_proc *p, int i, uint64_t submitted)
{
    struct shim_dev *d = &p->dev[i];
    uint64_t from = submitted > d->last_done ? submitted : d->last_done;
    uint64_t took = w->now - from;
    d->last_done = w->now;
    if (d->queued > 0)
        d->queued--;
    d->queued_est = d->queued_est > d->est ? d->queued_est - d->est : 0;
    d->est = d->est ? (7 * d->est + took) / 8 : took;
    if (d->queued == 0)
        d->queued_est = 0;
    if (d->st == SH_HOLD)
        d->quiet_since = w->now; /* work seen running counts as activity */
    if (d->st == SH_DRAIN && d->queued == 0)
        release(w, p, i);
    shim_schedule(w, p);
}

void shim_synced(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    d->last_sync_end = w->now;
    if (d->queued == 0 && d->st == SH_HOLD && !d->idle_from)
        d->idle_from = w->now;
    shim_schedule(w, p);
}

/* ---- memory ------------------------------------------------------------------ */

static void send_lease(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    uint64_t need = d->lease_need > d->headroom ? d->lease_need - d->headroom : 0;
    struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
    m.u.lease.slot = (uint32_t)d->slot;
    m.u.lease.id = ++d->lease_id;
    m.u.lease.need = need;
    m.u.lease.want = need + chunk(d->lease_need);
    d->lease_out = true;
    send(w, p, &m);
}

void shim_alloc(struct world *w, struct sim_proc *p, int i, uint64_t bytes, int which)
{
    struct shim_dev *d = &p->dev[i];
    d->last_mem = w->now;
    if (d->headroom >= bytes) {
        d->headroom -= bytes;
        d->held += bytes;
        app_alloc_done(w, p, which, true);
        return;
    }
    if (p->conn < 0 && shim_policy_open(w, p)) {
        d->held += bytes; /* uncounted; declared on reconnecting */
        w->over_cap_excused[p->tenant] = true;
        app_alloc_done(w, p, which, true);
        return;
    }
    d->lease_wait = true;
    d->lease_need = bytes;
    if (connected(p))
        send_lease(w, p, i);
}

void shim_free(struct world *w, struct sim_proc *p, int i, int which)
{
    struct shim_dev *d = &p->dev[i];
    uint64_t bytes = p->allocs[which];
    d->last_mem = w->now;
    d->held -= bytes < d->held ? bytes : d->held;
    d->headroom += bytes;
    uint64_t keep = 4 * chunk(p->alloc_size);
    if (d->headroom > keep && connected(p)) {
        send_mem(w, p, GS_MSG_MEM_FREE, d, d->headroom - keep);
        d->headroom = keep;
    }
}

static void leased(struct world *w, struct sim_proc *p, const struct gs_msg *m)
{
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        if (!d->lease_out || m->u.leased.id != d->lease_id)
            continue;
        d->lease_out = false;
        if (m->u.leased.status == GS_LEASE_GRANTED) {
            d->headroom += m->u.leased.granted;
            if (d->headroom < d->lease_need) {
                /* a recall took headroom back meanwhile: ask for the rest */
                d->lease_retry_at = w->now;
                continue;
            }
            d->headroom -= d->lease_need;
            d->held += d->lease_need;
            d->lease_wait = false;
            d->last_mem = w->now;
            app_alloc_done(w, p, -1, true);
        } else if (m->u.leased.status == GS_LEASE_REFUSED) {
            d->lease_wait = false;
            app_alloc_done(w, p, -1, false);
        } else {
            d->lease_retry_at = w->now + LEASE_RETRY_NS; /* asked again shortly (shim_timer) */
        }
    }
}

/* ---- messages ------------------------------------------------------------------ */

static int dev_of_slot(const struct sim_proc *p, uint32_t slot)
{
    for (int i = 0; i < p->ngpus; i++)
        if ((uint32_t)p->dev[i].slot == slot)
            return i;
    return -1;
}

static void granted(struct world *w, struct sim_proc *p, const struct gs_msg *m, uint64_t sent)
{
    int i = dev_of_slot(p, m->u.grant.slot);
    if (i < 0)
        return;
    struct shim_dev *d = &p->dev[i];
    bool join = (m->u.grant.flags & GS_GRANT_JOIN) && d->st == SH_WANT;
    if (m->u.grant.grant == d->last_released && !join)
        return; /* an extension of a slice already given back */
    bool extension = m->u.grant.grant == d->grant && (d->st == SH_HOLD || d->st == SH_DRAIN);
    if (!extension && d->st != SH_WANT)
        return;
    if (!extension) {
        want_end(w, p, i);
        hold_begin(w, p, i);
        d->launched = false;
        d->slice_start = w->now;
        d->quiet_since = w->now;
        d->idle_acc = 0;
        /* nothing of it has run since the grant was sent */
        d->idle_from = d->queued == 0 && d->waiters == 0 ? sent : 0;
    }
    d->grant = m->u.grant.grant;
    d->deadline = m->u.grant.deadline_ns;
    d->catch_up = !extension && (m->u.grant.flags & GS_GRANT_CATCHUP);
    d->st = SH_HOLD;
    trace(w, "proc %d gpu %d: %s grant %llu until +%.3f ms", p->id, d->gpu, extension ? "extended" : "holds",
          (unsigned long long)d->grant, (double)(d->deadline - w->now) / 1e6);
    if (d->waiters)
        app_admitted(w, p, i);
    shim_schedule(w, p);
}

void shim_receive(struct world *w, struct sim_proc *p, const struct gs_msg *m, uint64_t sent)
{
    switch (m->type) {
    case GS_MSG_WELCOME:
        p->welcomed = true;
        p->backoff = 50 * MS;
        for (int i = 0; i < p->ngpus; i++) {
            struct shim_dev *d = &p->dev[i];
            if (d->lease_wait && !d->lease_out)
                send_lease(w, p, i);
            if (d->waiters && d->st == SH_NONE) {
                send_slot(w, p, GS_MSG_ACQUIRE, d);
                d->st = SH_WANT;
                want_begin(w, p, i);
            }
        }
        break;
    case GS_MSG_GRANT:
        granted(w, p, m, sent);
        break;
    case GS_MSG_REVOKE: {
        int i = dev_of_slot(p, m->u.grant.slot);
        if (i >= 0 && p->dev[i].st == SH_HOLD && m->u.grant.grant == p->dev[i].grant) {
            p->dev[i].deadline = w->now;
            begin_drain(w, p, i, false);
        }
        break;
    }
    case GS_MSG_MEM_LEASED:
        leased(w, p, m);
        break;
    case GS_MSG_MEM_RECALL: {
        int i = dev_of_slot(p, m->u.recall.slot);
        if (i >= 0) {
            send_mem(w, p, GS_MSG_MEM_FREE, &p->dev[i], p->dev[i].headroom);
            p->dev[i].headroom = 0;
        }
        break;
    }
    case GS_MSG_ERROR:
        trace(w, "proc %d: connection closed: %s", p->id, m->u.error.reason);
        shim_disconnected(w, p);
        break;
    default:
        break;
    }
    shim_schedule(w, p);
}

/* ---- the connection ------------------------------------------------------------ */

static void connect_now(struct world *w, struct sim_proc *p)
{
    p->conn = server_connect(w, p->id);
    p->welcomed = false;
    if (p->conn < 0) {
        p->next_try = w->now + p->backoff;
        p->backoff = p->backoff * 2 > 1000 * MS ? 1000 * MS : p->backoff * 2;
        return;
    }
    p->conn_gen++;
    trace(w, "proc %d: connected (conn %d), counting %llu (held %llu)", p->id, p->conn,
          (unsigned long long)shim_count(p, 0), (unsigned long long)p->dev[0].held);
    struct gs_msg hello = {.type = GS_MSG_HELLO};
    hello.u.hello.pid = (uint32_t)(1000 + p->id);
    send(w, p, &hello);
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        struct gs_msg dev = {.type = GS_MSG_DEVICE};
        dev.u.device.slot = (uint32_t)d->slot;
        dev.u.device.uuid[0] = (uint8_t)(d->gpu + 1);
        memcpy(dev.u.device.uuid + 1, "simulated-gpu", 13);
        send(w, p, &dev);
        send_mem(w, p, GS_MSG_MEM_DECLARE, d, shim_count(p, i)); /* even nothing: a ghost of it goes */
    }
}

void shim_start(struct world *w, struct sim_proc *p)
{
    p->conn = -1;
    p->backoff = 50 * MS;
    connect_now(w, p);
    shim_schedule(w, p);
}

void shim_disconnected(struct world *w, struct sim_proc *p)
{
    if (p->conn < 0)
        return;
    p->conn = -1;
    p->welcomed = false;
    /* what it has on the GPUs is no slice's the next server knows */
    gpu_excuse(w, p->id);
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        if (d->st == SH_HOLD || d->st == SH_DRAIN)
            hold_end(w, p, i);
        if (d->st == SH_WANT)
            want_end(w, p, i);
        d->st = SH_NONE;
        d->grant = d->last_released = 0;
        d->catch_up = false;
        d->idle_acc = d->idle_from = 0;
        d->lease_out = false; /* lost with the connection: asked again */
    }
    p->next_try = w->now + p->backoff;
    if (shim_policy_open(w, p)) /* launches go ahead, ungated */
        for (int i = 0; i < p->ngpus; i++)
            if (p->dev[i].waiters)
                app_admitted(w, p, i);
}

void shim_gone(struct world *w, struct sim_proc *p)
{
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        if (d->st == SH_HOLD || d->st == SH_DRAIN)
            hold_end(w, p, i);
        if (d->st == SH_WANT)
            want_end(w, p, i);
        d->st = SH_NONE;
    }
}

void shim_schedule(struct world *w, struct sim_proc *p)
{
    uint64_t at = UINT64_MAX;
    if (p->conn < 0)
        at = p->next_try;
    for (int i = 0; i < p->ngpus; i++) {
        const struct shim_dev *d = &p->dev[i];
        if (d->st == SH_HOLD) {
            if (d->deadline < at)
                at = d->deadline;
            uint64_t active = d->quiet_since > d->last_sync_end ? d->quiet_since : d->last_sync_end;
            if (d->queued == 0 && d->waiters == 0 && active + IDLE_RELEASE_NS < at)
                at = active + IDLE_RELEASE_NS;
        }
        if (d->lease_wait && !d->lease_out && connected(p) && d->lease_retry_at < at)
            at = d->lease_retry_at;
        if (!d->lease_wait && d->headroom && connected(p) && d->last_mem + LEASE_IDLE_NS < at)
            at = d->last_mem + LEASE_IDLE_NS;
    }
    if (at == UINT64_MAX || at == p->shim_at)
        return;
    if (at < w->now)
        at = w->now;
    p->shim_at = at;
    post(w, at, EV_SHIM, p->id, ++p->shim_gen);
}

void shim_timer(struct world *w, struct sim_proc *p)
{
    p->shim_at = 0;
    if (p->conn < 0 && w->now >= p->next_try)
        connect_now(w, p);
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        if (d->st == SH_HOLD) {
            uint64_t active = d->quiet_since > d->last_sync_end ? d->quiet_since : d->last_sync_end;
            if (w->now >= d->deadline)
                begin_drain(w, p, i, false);
            else if (d->queued == 0 && d->waiters == 0 && w->now >= active + IDLE_RELEASE_NS)
                begin_drain(w, p, i, true);
        }
        if (d->lease_wait && !d->lease_out && connected(p) && w->now >= d->lease_retry_at)
            send_lease(w, p, i);
        if (!d->lease_wait && d->headroom && connected(p) && w->now >= d->last_mem + LEASE_IDLE_NS) {
            send_mem(w, p, GS_MSG_MEM_FREE, d, d->headroom);
            d->headroom = 0;
        }
    }
    shim_schedule(w, p);
}
