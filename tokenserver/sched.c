/*
 * Per-GPU time slices. Each device has at most one holder tenant at a time;
 * all of that tenant's processes that want the device run under the same
 * slice, and no other tenant's work runs until every one of them has
 * drained and released.
 *
 * Who is next: virtual-time fair queuing. A tenant's virtual time grows by
 * the device time it used divided by its share; the waiting tenant with the
 * smallest virtual time goes next. So busy tenants split the device in
 * proportion to their shares.
 *   - The time charged is what the server sees: from grant to the last
 *     release, so overrun past the deadline is charged to the tenant that
 *     caused it. The holders also report the time they left the GPU idle
 *     (they had synchronized and not launched again). That is a claim the
 *     server cannot check, so it refunds at most IDLE_REFUND_MAX of the
 *     slice: a tenant that claims every slice idle gains at most
 *     1 / (1 - IDLE_REFUND_MAX) of its weight in held time (3.2 %), and a
 *     limit is always judged on held time, refund or not.
 *     A release counts from when it was sent (gpuslice/transport.h), not
 *     from when this loop woke to read it, and a holder counts its slice
 *     idle from when the grant was sent: neither side's wake-up is the
 *     tenant's.
 *   - No banking, no debt from idle times: each GPU keeps a floor, the
 *     largest "smallest virtual time among its active tenants" seen so far
 *     (device.vtime_floor). A tenant that becomes active, newcomers
 *     included, starts at max(its own virtual time, the floor): idling
 *     earns no catch-up burst, and device time it used while nobody else
 *     wanted the GPU (alone, its virtual time was the floor) is not
 *     counted against it when it comes back. A release with
 *     GS_RELEASE_MORE keeps the tenant active.
 *   - Work-conserving: with nobody else waiting, or when the holder would
 *     be next again anyway (goes_next), the holder's slice is extended
 *     shortly before its deadline instead of being drained.
 *   - Limits: after a slice that began at s and was held for b ns, a
 *     tenant with limit L is not granted again before s + b / L, alone or
 *     not; so it never exceeds L over any window longer than a slice or
 *     two. A grant that comes less than CAP_LATE_NS after the tenant was
 *     eligible (the timer fired late, the last holder was still draining)
 *     counts s from when it was eligible: the windows s .. s + b / L then
 *     follow each other without a gap, and the lateness is not taken from
 *     the tenant's limit.
 *
 * A holder that does not release by deadline + grace (stopped, hung) loses
 * the slice and is charged for all of it; its late release is ignored.
 *
 * Gangs: a tenant whose processes use several GPUs (gang = auto, on) gets
 * its slices on all of them at once, so that ranks of a collective run
 * together instead of each spinning at a GPU the other rank has not been
 * granted. A gang waits for all its GPUs once a rank waits for any
 * (waits_for). When a gang is next on one of its GPUs, that GPU is reserved
 * (kept idle) for it, and so is each of its other GPUs as soon as the
 * slice running there ends; once all are reserved, the gang is granted
 * them together, with one deadline. When its slice ends on one GPU it is
 * ended on the others too. Only one gang gathers its GPUs at a time
 * (forming_gang), so two gangs never each hold a part of what the other
 * needs; GPUs outside the forming gang run other tenants meanwhile.
 */
#include "server.h"
#include "gpuslice/transport.h"

#include <stdlib.h>
#include <string.h>

#define EXTEND_MARGIN_NS 1000000ull /* decide on extension 1 ms before the deadline */
#define CATCHUP_NS 1000000ull       /* a catch-up grant: one launch, then drain */
#define STALL_NS 2000000ull         /* a gang's rank draining this long may wait for a peer */
#define CAP_LATE_NS 1000000ull      /* a grant this late after eligibility keeps a limit's windows joined */
/* The most of a slice refunded for idle time its holders claim. */
#define IDLE_REFUND_MAX (1.0 / 32)
/* Virtual times saturate here: never inf or nan, whatever the history. */
#define VTIME_MAX 1e300

static void device_timer(void *arg);
static void schedule(struct device *d);

/* The gang gathering its GPUs, if any (see above). Owned by the loop's
 * thread, like everything in the server. */
static struct tenant *forming_gang;
/* Gangs started so far; a gang's slices carry the count at their start
 * (device.gang_start), so that ending an old slice never ends a new one. */
static uint64_t gang_starts;

/* Whether the tenant's slices are granted together on all its GPUs. */
static bool is_gang(const struct tenant *t)
{
    return t->config.gang != GANG_OFF && t->devices >= 2;
}

/* Whether d is one of t's GPUs (some client of t declared it); its entry. */
static bool gang_member(const struct device *d, const struct tenant *t, struct device_tenant **entry)
{
    struct device_tenant *dt = device_tenant_find(d, t);
    if (!dt || dt->refs == 0)
        return false;
    if (entry)
        *entry = dt;
    return true;
}

/* Whether dt is in the running for its GPU: a process of it waits for
 * that GPU, or it is a gang and waits for any of its GPUs. A gang is
 * granted all its GPUs at once, so it is next on each of them as much as
 * on the one a rank asked for; a rank may not ask at all until its peers
 * run (it waits in a collective that needs them). Counting it only where a
 * rank asks let a gang that some other GPU kept choosing gather every
 * time, and a gang whose rank waited elsewhere never. */
static bool waits_for(const struct device_tenant *dt)
{
    return dt->waiting > 0 || (dt->tenant_waits && dt->refs > 0 && is_gang(dt->tenant));
}

/* Changes dt's count of waiting slots by `delta`, and its tenant's. When
 * dt starts waiting, its wait starts (waiting_since). When the tenant
 * starts or stops waiting anywhere, each of its entries learns it
 * (device_tenant.tenant_waits). */
static void add_waiting(struct device_tenant *dt, int delta)
{
    struct tenant *t = dt->tenant;
    bool before = t->waiting > 0;
    if (dt->waiting == 0 && delta > 0)
        dt->waiting_since = now_ns();
    dt->waiting = (unsigned)((int)dt->waiting + delta);
    t->waiting = (unsigned)((int)t->waiting + delta);
    if (before == (t->waiting > 0))
        return;
    for (struct device *e = devices; e; e = e->next) {
        struct device_tenant *mine = device_tenant_find(e, t);
        if (mine)
            mine->tenant_waits = t->waiting > 0;
    }
}

bool sched_in_line(const struct device_tenant *dt)
{
    return waits_for(dt);
}

int sched_device_init(struct device *d)
{
    return timer_init(&d->timer, device_timer, d);
}

/* Adds to a virtual time, saturating at VTIME_MAX. */
static double vtime_add(double vtime, double delta)
{
    double sum = vtime + delta;
    return sum < VTIME_MAX ? sum : VTIME_MAX; /* also catches nan */
}

/* ns as a double, saturated to what a uint64_t holds. */
static uint64_t saturate_ns(double ns)
{
    if (!(ns > 0))
        return 0;
    return ns < 1.8e19 ? (uint64_t)ns : UINT64_MAX;
}

/* The smallest virtual time among active tenants other than `except`;
 * -1 if there is none. */
static double min_active_vtime(const struct device *d, const struct device_tenant *except)
{
    double min = -1;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt != except && dt->active && (min < 0 || dt->vtime < min))
            min = dt->vtime;
    }
    return min;
}

/* Raises d's floor to the smallest virtual time among its active tenants. */
static void raise_floor(struct device *d)
{
    double min = min_active_vtime(d, NULL);
    if (min > d->vtime_floor)
        d->vtime_floor = min;
}

static void activate(struct device *d, struct device_tenant *dt)
{
    if (dt->active)
        return;
    raise_floor(d);
    double floor = d->vtime_floor;
    if (floor > dt->vtime) {
        if (log_level >= LOG_DEBUG)
            slog(LOG_DEBUG, "tenant %s: active again; virtual time raised by %.0f ns", dt->tenant->name,
                 floor - dt->vtime);
        dt->vtime = floor;
    }
    dt->active = true;
}

/* dt is no longer active unless it still waits for d; the floor keeps
 * what it had reached. */
static void deactivate_unless_waiting(struct device *d, struct device_tenant *dt)
{
    raise_floor(d);
    dt->active = waits_for(dt);
}

static void record_usage(struct device_tenant *dt, uint64_t end, uint64_t used)
{
    dt->used_ns += used;
    /* one-second buckets, for the achieved share over the last 10 s */
    uint64_t second = end / 1000000000ull;
    size_t b = second % 10;
    if (dt->window_start[b] != second) {
        dt->window_start[b] = second;
        dt->window_used[b] = 0;
    }
    dt->window_used[b] += used;
}

static void record_overrun(struct device_tenant *dt, uint64_t overrun)
{
    histogram_observe(&dt->overrun_hist, overrun);
    if (!dt->overruns && !(dt->overruns = malloc(GS_OVERRUN_SAMPLES * sizeof *dt->overruns)))
        return; /* out of memory: statistics only */
    dt->overruns[dt->noverruns++ % GS_OVERRUN_SAMPLES] = overrun;
}

static void swap_u64(uint64_t *x, uint64_t *y)
{
    uint64_t tmp = *x;
    *x = *y;
    *y = tmp;
}

/* The k-th smallest of a[0..n) (k < n), reordering a: quickselect with a
 * three-way partition (overruns are mostly equal zeros), O(n), so that a
 * status of many tenants costs no sorting. */
static uint64_t select_kth(uint64_t *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* k is in [lo, hi) */
    while (hi - lo > 1) {
        uint64_t pivot = a[lo + (hi - lo) / 2];
        size_t lt = lo, i = lo, gt = hi; /* [lo,lt) < pivot, [lt,gt) == pivot, [gt,hi) > pivot */
        while (i < gt) {
            if (a[i] < pivot)
                swap_u64(&a[lt++], &a[i++]);
            else if (a[i] > pivot)
                swap_u64(&a[i], &a[--gt]);
            else
                i++;
        }
        if (k < lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return pivot;
    }
    return a[k];
}

uint64_t device_tenant_overrun_p99(const struct device_tenant *dt)
{
    size_t n = dt->noverruns < GS_OVERRUN_SAMPLES ? dt->noverruns : GS_OVERRUN_SAMPLES;
    if (n == 0 || !dt->overruns)
        return 0;
    uint64_t copy[GS_OVERRUN_SAMPLES];
    memcpy(copy, dt->overruns, n * sizeof copy[0]);
    return select_kth(copy, n, (n * 99 + 99) / 100 - 1);
}

double device_tenant_recent_share(const struct device *d, const struct device_tenant *dt, uint64_t now)
{
    uint64_t second = now / 1000000000ull, used = 0;
    for (size_t b = 0; b < 10; b++)
        if (dt->window_start[b] + 10 > second && dt->window_start[b] <= second)
            used += dt->window_used[b];
    /* the window: 10 s, or since the device was first used if that is less */
    uint64_t span = now - d->created_ns;
    if (span > 10000000000ull || span == 0)
        span = 10000000000ull;
    double share = (double)used / (double)span;
    return share > 1.0 ? 1.0 : share;
}

static void send_grant(struct client *c, int slot, const struct device *d, uint32_t flags)
{
    struct gs_msg msg = {.type = GS_MSG_GRANT};
    msg.u.grant.slot = (uint32_t)slot;
    msg.u.grant.grant = d->grant;
    msg.u.grant.deadline_ns = gs_transport_clock_to_wire(d->deadline, options.clock_offset_ns);
    msg.u.grant.flags = flags;
    c->wants[slot] = false;
    c->holds[slot] = d->grant;
    client_send(c, &msg);
}

static bool has_competitor(const struct device *d, uint64_t now)
{
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt != d->holder && waits_for(dt) && dt->eligible_at <= now)
            return true;
    }
    return false;
}

/* Starts a slice of `best` on d at `now`: grants it to each of the
 * tenant's clients waiting for d. */
static void start_slice(struct device *d, struct device_tenant *best, uint64_t now)
{
    d->state = DEV_RUNNING;
    d->holder = best;
    d->grant++;
    d->slices++;
    d->slice_start = d->charged_until = now;
    d->deadline = d->slice_deadline = now + best->tenant->config.quantum_ns;
    best->cap_from = best->eligible_at && best->eligible_at <= now && now - best->eligible_at <= CAP_LATE_NS
                         ? best->eligible_at
                         : now;
    d->holders = 0;
    d->slice_idle = UINT64_MAX;
    d->gang_start = 0; /* gang_try_start stamps a gang's slices */
    best->slices++;
    if (best->waiting > 0)
        best->wait_ns += now - best->waiting_since;
    for (size_t i = 0; i < d->nusers; i++) {
        struct client *c = d->users[i].client;
        int slot = d->users[i].slot;
        if (c->tenant == best->tenant && c->wants[slot]) {
            send_grant(c, slot, d, 0);
            d->holders++;
        }
    }
    add_waiting(best, -(int)best->waiting);
    uint64_t margin = best->tenant->config.quantum_ns > 2 * EXTEND_MARGIN_NS ? EXTEND_MARGIN_NS : 0;
    timer_at(&d->timer, d->deadline - margin);
}

/* ---- gangs ------------------------------------------------------------------ */

static void reserve(struct device *d, struct device_tenant *dt)
{
    d->state = DEV_RESERVED;
    d->holder = dt;
    d->holders = 0;
    d->charged_until = now_ns();
    timer_at(&d->timer, 0);
}

/* Grants the forming gang all its GPUs if every one is reserved for it. */
static void gang_try_start(void)
{
    struct tenant *t = forming_gang;
    for (struct device *d = devices; d; d = d->next)
        if (gang_member(d, t, NULL) && !(d->state == DEV_RESERVED && d->holder->tenant == t))
            return;
    forming_gang = NULL;
    uint64_t now = now_ns();
    gang_starts++;
    for (struct device *d = devices; d; d = d->next)
        if (d->state == DEV_RESERVED && d->holder->tenant == t) {
            start_slice(d, d->holder, now);
            d->gang_start = gang_starts;
        }
    /* GPUs that passed over gangs while this one formed may start one now. */
    for (struct device *d = devices; d; d = d->next)
        schedule(d);
}

static void end_slice(struct device *d, uint64_t ended);
static void revoke(struct device *d);
static void holders_gone(struct device *d, uint64_t ended);

/* The gang `best`, next on d, starts gathering its GPUs. A slice of its
 * own that runs on one of them alone (granted before it used a second
 * GPU) ends now, so that its ranks start again together. */
static void gang_form(struct device_tenant *best)
{
    forming_gang = best->tenant;
    uint64_t now = now_ns();
    for (struct device *d = devices; d && forming_gang == best->tenant; d = d->next) {
        struct device_tenant *dt;
        if (!gang_member(d, best->tenant, &dt))
            continue;
        if (d->state == DEV_IDLE) {
            reserve(d, dt);
        } else if (d->state == DEV_RUNNING && d->holder == dt) {
            d->deadline = d->slice_deadline = now;
            if (d->holders == 0)
                holders_gone(d, now);
            else
                revoke(d);
        }
    }
    if (forming_gang == best->tenant)
        gang_try_start();
}

/* Stops gathering (the gang's processes changed): frees its reservations. */
static void gang_cancel(void)
{
    struct tenant *t = forming_gang;
    if (!t)
        return;
    forming_gang = NULL;
    for (struct device *d = devices; d; d = d->next)
        if (d->state == DEV_RESERVED && d->holder && d->holder->tenant == t) {
            d->state = DEV_IDLE;
            d->holder = NULL;
        }
    for (struct device *d = devices; d; d = d->next)
        schedule(d);
}

/* Whether e carries the same gang slice as d. */
static bool same_gang_slice(const struct device *e, const struct device *d)
{
    return (e->state == DEV_RUNNING || e->state == DEV_REVOKING) && e->holder &&
           e->holder->tenant == d->holder->tenant && e->gang_start == d->gang_start;
}

/* Ends t's gang slices that no process holds: those of gang start `stamp`,
 * or every one if stamp is 0. */
static void end_unheld_gang_slices(const struct tenant *t, uint64_t stamp, uint64_t ended)
{
    for (struct device *e = devices; e; e = e->next)
        if ((e->state == DEV_RUNNING || e->state == DEV_REVOKING) && e->holder && e->holder->tenant == t &&
            e->gang_start && (!stamp || e->gang_start == stamp) && e->holders == 0)
            end_slice(e, ended);
}

/* The last holder of d's slice is gone. A plain slice ends. A gang's slice
 * ends on all its GPUs together once no process holds it on any of them:
 * until then the GPU stays the gang's, and a rank that comes back joins
 * (its peers may be waiting in a collective for its next launch). A gang
 * slice whose tenant is no longer a gang (a rank exited) ends where nobody
 * holds it, each GPU on its own, so that none is left running for nobody.
 * ended: when the last of them released (sent its RELEASE), or now. */
static void holders_gone(struct device *d, uint64_t ended)
{
    if (d->gang_start == 0) {
        end_slice(d, ended);
        return;
    }
    const struct tenant *t = d->holder->tenant;
    if (is_gang(t))
        for (const struct device *e = devices; e; e = e->next)
            if (same_gang_slice(e, d) && e->holders > 0)
                return;
    end_unheld_gang_slices(t, d->gang_start, ended); /* d among them: its holders are gone */
}

/* Whether a process of d's holder may join its slice now: not once a
 * gang's slice is past its grace (it is being taken back; catch-up grants
 * must not keep it). */
static bool can_join(const struct device *d, uint64_t now)
{
    return !d->gang_start || now < d->slice_deadline + options.grace_ns;
}

/* A process of the holder asks for d while its slice runs: it joins. Past
 * the deadline of a gang's slice (its ranks are draining), it gets one
 * launch to catch up with its peers, then drains again. */
static void join(struct client *c, int slot, struct device *d, uint64_t now)
{
    uint32_t flags = GS_GRANT_JOIN;
    if (d->gang_start && now >= d->deadline) {
        flags |= GS_GRANT_CATCHUP;
        d->deadline = now + CATCHUP_NS;
        d->state = DEV_RUNNING;
        timer_at(&d->timer, d->deadline);
    }
    send_grant(c, slot, d, flags);
    d->holders++;
}

/* Whether a tenant other than the holder may have any of the holder's
 * GPUs, or a gang waits to gather its GPUs, d among them. */
static bool has_competitor_anywhere(const struct device *d, uint64_t now)
{
    const struct tenant *t = d->holder->tenant;
    if (forming_gang && gang_member(d, forming_gang, NULL))
        return true;
    if (!is_gang(t))
        return has_competitor(d, now);
    for (const struct device *e = devices; e; e = e->next)
        if (e->state == DEV_RUNNING && e->holder && e->holder->tenant == t && has_competitor(e, now))
            return true;
    return false;
}

/* Whether the holder of d, charged to its deadline, would still be ahead
 * of every tenant that waits for d and may be granted by then: then the
 * next slice is its own, and draining it only to grant it again would
 * leave the GPU idle for a handoff. Where a gang is involved (the holder,
 * or one waiting for d), the scheduler decides: a gang's turn depends on
 * its other GPUs too. */
static bool goes_next(const struct device *d)
{
    const struct device_tenant *h = d->holder;
    if (is_gang(h->tenant) || (forming_gang && gang_member(d, forming_gang, NULL)))
        return false;
    uint64_t left = d->deadline > d->charged_until ? d->deadline - d->charged_until : 0;
    double projected = vtime_add(h->vtime, (double)left / h->tenant->config.share);
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt != h && waits_for(dt) && (is_gang(dt->tenant) || (dt->eligible_at <= d->deadline && dt->vtime <= projected)))
            return false;
    }
    return true;
}

/* ---- granting ------------------------------------------------------------------ */

/* Grants the device to the best waiting tenant, or arms the timer for the
 * first one a limit holds back. A gang that is next starts gathering its
 * GPUs instead; while one gathers, other gangs are passed over. */
static void schedule(struct device *d)
{
    if (d->state != DEV_IDLE)
        return;
    struct device_tenant *mine = NULL;
    bool needed = forming_gang && gang_member(d, forming_gang, &mine);
    uint64_t now = now_ns(), next_eligible = 0;
    struct device_tenant *best = NULL;
    for (size_t i = 0; i < d->ntenants; i++) {
        struct device_tenant *dt = &d->tenants[i];
        if (!waits_for(dt) || (forming_gang && is_gang(dt->tenant)))
            continue;
        activate(d, dt); /* a gang that waits elsewhere may not be yet */
        if (dt->eligible_at > now) {
            if (!next_eligible || dt->eligible_at < next_eligible)
                next_eligible = dt->eligible_at;
            continue;
        }
        if (!best || dt->vtime < best->vtime)
            best = dt;
    }
    /* A GPU the gathering gang needs is kept for it once it is the gang's
     * turn there; a tenant ahead of it on this GPU goes first. */
    if (needed && (!best || mine->vtime <= best->vtime)) {
        reserve(d, mine);
        gang_try_start();
        return;
    }
    if (!best) {
        timer_at(&d->timer, next_eligible);
        return;
    }
    if (is_gang(best->tenant)) {
        gang_form(best);
        return;
    }
    start_slice(d, best, now);
}

/* Charges the holder for the device time since it was last charged. */
static void charge(struct device *d, uint64_t now)
{
    struct device_tenant *dt = d->holder;
    uint64_t used = now - d->charged_until;
    dt->vtime = vtime_add(dt->vtime, (double)used / dt->tenant->config.share);
    record_usage(dt, now, used);
    d->held_ns += used;
    d->charged_until = now;
}

/* Gives back the part of a slice its processes all left idle: charged as
 * it went, it was not device time used. */
static void uncharge_idle(struct device *d, struct device_tenant *dt, uint64_t idle, uint64_t now)
{
    dt->vtime -= (double)idle / dt->tenant->config.share;
    dt->used_ns -= idle < dt->used_ns ? idle : dt->used_ns;
    size_t b = (now / 1000000000ull) % 10;
    if (dt->window_start[b] == now / 1000000000ull)
        dt->window_used[b] -= idle < dt->window_used[b] ? idle : dt->window_used[b];
    d->held_ns -= idle < d->held_ns ? idle : d->held_ns;
}

/* Ends d's slice, which ended at `ended`: when its last holder sent its
 * RELEASE (the time this loop took to read it is not the tenant's), or
 * now. */
static void end_slice(struct device *d, uint64_t ended)
{
    uint64_t now = now_ns();
    struct device_tenant *dt = d->holder;
    uint64_t end = ended < now ? ended : now;
    if (end < d->charged_until)
        end = d->charged_until; /* charged as it went, up to then */
    uint64_t used = end - d->slice_start;
    uint64_t due = now < d->deadline ? now : d->deadline; /* when the next grant could have come */
    charge(d, end);
    /* Device time used: the slice less what every one of its holders left
     * idle (the least any reported: their idle spells may not overlap). */
    uint64_t idle = d->slice_idle == UINT64_MAX ? 0 : d->slice_idle;
    uint64_t refund_max = saturate_ns((double)used * IDLE_REFUND_MAX);
    if (idle > refund_max)
        idle = refund_max; /* a claim: bounded (see the top of this file) */
    if (idle)
        uncharge_idle(d, dt, idle, now);
    record_overrun(dt, end > d->slice_deadline ? end - d->slice_deadline : 0);
    /* A limit L: no grant until the time the GPU was held is at most L of
     * the time since the slice began. */
    double limit = dt->tenant->config.limit;
    if (limit < 1.0) {
        uint64_t until = dt->cap_from + saturate_ns((double)used / limit);
        dt->eligible_at = until > now ? until : now;
    }
    /* Forget grants still held (a holder revoked after its grace). */
    for (size_t i = 0; i < d->nusers; i++)
        if (d->users[i].client->holds[d->users[i].slot] == d->grant)
            d->users[i].client->holds[d->users[i].slot] = 0;
    d->state = DEV_IDLE;
    d->holder = NULL;
    d->holders = 0;
    deactivate_unless_waiting(d, dt);
    d->handoffs++;
    schedule(d); /* it grants first and sets the timer after: handoffs are the hot path */
    if (d->state == DEV_RUNNING && d->holder != dt)
        histogram_observe(&d->handoff_hist, d->slice_start - due);
}

static void revoke(struct device *d)
{
    d->state = DEV_REVOKING;
    for (size_t i = 0; i < d->nusers; i++) {
        struct client *c = d->users[i].client;
        int slot = d->users[i].slot;
        if (c->holds[slot] == d->grant) {
            struct gs_msg msg = {.type = GS_MSG_REVOKE};
            msg.u.grant.slot = (uint32_t)slot;
            msg.u.grant.grant = d->grant;
            client_send(c, &msg);
        }
    }
    uint64_t grace_end = d->slice_deadline + options.grace_ns;
    /* A gang's drain may wait for a peer's launch: look again soon. */
    uint64_t check = d->gang_start ? now_ns() + STALL_NS : grace_end;
    timer_at(&d->timer, check < grace_end ? check : grace_end);
}

/* d, a GPU of a gang past its deadline, is still draining: its ranks may
 * wait in a collective for a peer that drained already and waits for the
 * next slice. Each such peer gets one launch (a catch-up grant). */
static void gang_catch_up(struct device *d, uint64_t now)
{
    for (struct device *e = devices; e; e = e->next) {
        if (e == d || !same_gang_slice(e, d) || e->holders > 0)
            continue;
        for (size_t i = 0; i < e->nusers; i++) {
            struct client *c = e->users[i].client;
            int slot = e->users[i].slot;
            if (c->tenant != e->holder->tenant || !c->wants[slot])
                continue;
            c->wants[slot] = false;
            if (e->holder->waiting > 0)
                add_waiting(e->holder, -1);
            join(c, slot, e, now);
        }
    }
}

static void device_timer(void *arg)
{
    struct device *d = arg;
    uint64_t now = now_ns();
    switch (d->state) {
    case DEV_IDLE:
        schedule(d);
        break;
    case DEV_RESERVED:
        break;
    case DEV_RUNNING:
        if (d->holder->tenant->config.limit >= 1.0 && (!has_competitor_anywhere(d, now) || goes_next(d))) {
            /* Nobody else may have it, or the holder would be chosen
             * again anyway: extend rather than drain. Charge as it goes,
             * so that a long run is never billed at once. */
            charge(d, now);
            d->deadline += d->holder->tenant->config.quantum_ns;
            d->slice_deadline = d->deadline;
            for (size_t i = 0; i < d->nusers; i++) {
                struct client *c = d->users[i].client;
                int slot = d->users[i].slot;
                if (c->holds[slot] != d->grant)
                    continue;
                /* A holder that asked again (a RELEASE of a stale grant
                 * with MORE) is answered by the extension. */
                if (c->wants[slot] && d->holder->waiting > 0)
                    add_waiting(d->holder, -1);
                send_grant(c, slot, d, 0);
            }
            uint64_t margin = d->holder->tenant->config.quantum_ns > 2 * EXTEND_MARGIN_NS ? EXTEND_MARGIN_NS : 0;
            timer_at(&d->timer, d->deadline - margin);
        } else if (now < d->deadline) {
            timer_at(&d->timer, d->deadline); /* revoke at the deadline itself */
        } else if (d->holders == 0) {
            holders_gone(d, now); /* a gang's GPU nobody holds now */
        } else {
            revoke(d);
        }
        break;
    case DEV_REVOKING:
        if (d->gang_start && now < d->slice_deadline + options.grace_ns) {
            gang_catch_up(d, now);
            uint64_t check = now + STALL_NS, grace_end = d->slice_deadline + options.grace_ns;
            timer_at(&d->timer, check < grace_end ? check : grace_end);
            break;
        }
        /* Grace is over: take the slice back from whoever still holds it. */
        if (d->holders > 0)
            d->slice_idle = 0;
        for (size_t i = 0; i < d->nusers; i++) {
            struct client *c = d->users[i].client;
            if (c->holds[d->users[i].slot] == d->grant)
                slog_limited(c->tenant, LOG_WARN, "tenant %s pid %u: did not release within %llu ms of its deadline; slice revoked",
                     c->tenant->name, c->pid, (unsigned long long)(options.grace_ns / 1000000));
        }
        if (d->gang_start) {
            /* Its late holders count as gone; the gang's other GPUs may
             * still be draining. */
            for (size_t i = 0; i < d->nusers; i++)
                if (d->users[i].client->holds[d->users[i].slot] == d->grant)
                    d->users[i].client->holds[d->users[i].slot] = 0;
            d->holders = 0;
            d->state = DEV_RUNNING;
            holders_gone(d, now);
        } else {
            end_slice(d, now);
        }
        break;
    }
}

void sched_acquire(struct client *c, int slot)
{
    struct device *d = c->devices[slot];
    if (c->wants[slot] || (c->holds[slot] && c->holds[slot] == d->grant))
        return; /* already waiting or holding */
    struct device_tenant *dt = device_tenant_find(d, c->tenant);
    if (!dt)
        return; /* declared devices always have their tenant's entry */
    c->wants[slot] = true;
    /* Join the running slice of its own tenant. */
    if (d->state == DEV_RUNNING && d->holder == dt && can_join(d, now_ns())) {
        join(c, slot, d, now_ns());
        return;
    }
    add_waiting(dt, +1);
    activate(d, dt);
    if (d->state == DEV_IDLE)
        schedule(d);
}

void sched_release(struct client *c, int slot, uint64_t grant, bool more, uint64_t idle_ns, uint64_t sent_ns)
{
    struct device *d = c->devices[slot];
    if (more && !c->wants[slot]) {
        /* Queue again before the slice ends, so that ending it does not
         * count the tenant as idle. */
        struct device_tenant *dt = device_tenant_find(d, c->tenant);
        if (dt) {
            c->wants[slot] = true;
            add_waiting(dt, +1);
            activate(d, dt);
        }
    }
    if (grant == 0 || c->holds[slot] != grant) {
        /* stale: revoked already, or never held */
        if (more && d->state == DEV_IDLE)
            schedule(d);
    } else {
        c->holds[slot] = 0;
        if (d->state == DEV_IDLE || grant != d->grant)
            return;
        if (idle_ns < d->slice_idle)
            d->slice_idle = idle_ns;
        if (d->holders > 0)
            d->holders--;
        if (d->holders == 0)
            holders_gone(d, sent_ns);
    }
    /* A gang's rank that wants more while its gang holds the GPU joins
     * (past the deadline, for one launch): its peers may be waiting in a
     * collective for it. Once the slice is being revoked it waits: a peer
     * whose drain stalls gets it a catch-up grant (gang_catch_up). */
    if (more && d->gang_start && c->wants[slot] && d->state == DEV_RUNNING && d->holder &&
        d->holder->tenant == c->tenant && can_join(d, now_ns())) {
        struct device_tenant *dt = d->holder;
        c->wants[slot] = false;
        if (dt->waiting > 0)
            add_waiting(dt, -1);
        if (c->holds[slot] != d->grant) /* a stale RELEASE: it holds the slice still */
            join(c, slot, d, now_ns());
    }
}

void sched_slot_gone(struct client *c, int slot)
{
    struct device *d = c->devices[slot];
    if (!d)
        return;
    if (c->wants[slot]) {
        c->wants[slot] = false;
        struct device_tenant *dt = device_tenant_find(d, c->tenant);
        if (dt && dt->waiting > 0) {
            add_waiting(dt, -1);
            if (dt->waiting == 0) {
                dt->wait_ns += now_ns() - dt->waiting_since; /* waited, then left */
                if (dt != d->holder)
                    deactivate_unless_waiting(d, dt);
            }
        }
    }
    if (c->holds[slot] && c->holds[slot] == d->grant && d->state != DEV_IDLE) {
        c->holds[slot] = 0;
        d->slice_idle = 0; /* it said nothing of its idle time: none */
        if (d->holders > 0)
            d->holders--;
        if (d->holders == 0)
            holders_gone(d, now_ns());
    }
    c->holds[slot] = 0;
}

void sched_gang_changed(struct tenant *t)
{
    if (forming_gang == t)
        gang_cancel();
    if (is_gang(t))
        return;
    /* No longer a gang: its gang slices' GPUs that nobody holds end now
     * (they waited for their peers; there are none any more). */
    end_unheld_gang_slices(t, 0, now_ns());
}

void sched_tenant_gone(struct tenant *t)
{
    if (forming_gang == t)
        gang_cancel();
    devices_forget_tenant(t);
    for (struct device *d = devices; d; d = d->next)
        schedule(d);
}
