/*
 * Per-GPU time slices, as a state machine (sched.h): each step takes one
 * event and the time, updates the state and leaves actions. Nothing here
 * sends, reads a clock, allocates (sched_prepare.c makes memory ready
 * beforehand; a removed tenant's entries are freed) or calls itself back:
 * a slice that ends
 * marks its GPU for scheduling (the step's worklist, `dirty`), and the step
 * schedules each marked GPU once the event is handled, until none is left.
 *
 * Each GPU has at most one holder tenant at a time; all of that tenant's
 * processes that want the GPU run under the same slice, and no other
 * tenant's work runs until every one of them has drained and released.
 *
 * Who is next: virtual-time fair queuing. A tenant's virtual time grows by
 * the device time it is charged divided by its share; the waiting tenant
 * with the smallest virtual time goes next. So busy tenants split the GPU
 * in proportion to their shares.
 *   - The time charged is what the server sees: from grant to the last
 *     release, so overrun past the deadline is charged to the tenant that
 *     caused it. The holders also report the time they left the GPU idle
 *     (they had synchronized and not launched again). That is a claim the
 *     server cannot check, so it refunds at most IDLE_REFUND_MAX of the
 *     slice: a tenant that claims every slice idle gains at most
 *     1 / (1 - IDLE_REFUND_MAX) of its weight in held time (3.2 %), and a
 *     limit is always judged on held time, refund or not. Of a slice a
 *     latency tenant's preemption cut short, up to PREEMPTED_REFUND_NS:
 *     the GRANT's way to the holders is a larger part of a short slice.
 *     A release counts from when it was sent (gpuslice/transport.h), not
 *     from when the loop woke to read it. A slice is charged at least
 *     MIN_SLICE_CHARGE_NS, for the handoffs it costs: a tenant that takes
 *     slices of microseconds (a modified shim) would otherwise fill the
 *     GPU with handoffs no one pays for. Not a slice a latency tenant's
 *     preemption cut short: the preemptor pays for that handoff.
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
 *     follow each other without a gap.
 *
 * A holder that does not release by deadline + grace (stopped, hung) loses
 * the slice and is charged for all of it. When it does release later, its
 * drain ran until then: that time is charged too, to virtual time, figures
 * and limit (charge_late_drain), for one more grace period at most, and up
 * to the tenant's next slice on that GPU. A release that never comes
 * charges nothing more: the server cannot see it.
 *
 * Gangs: a tenant whose processes use several GPUs (gang = auto, on) gets
 * its slices on all of them at once, so that ranks of a collective run
 * together instead of each spinning at a GPU the other rank has not been
 * granted. A gang waits for all its GPUs once a rank waits for any
 * (waits_for). When a gang is next on one of its GPUs, it starts
 * gathering: that GPU is reserved (kept idle) for it, and so is each of its
 * other GPUs as soon as the slice running there ends; once all are
 * reserved, the gang is granted them together, with one deadline. When its
 * slice ends on one GPU it is ended on the others too. Only one gang
 * gathers its GPUs at a time (forming_gang), so two gangs never each hold
 * a part of what the other needs. What gathering costs the others is
 * bounded:
 *   - a reserved GPU is the gang's, charged to it like a slice from the
 *     moment it is reserved, so tenants that share it with the gang keep
 *     their share whatever the gang waits for;
 *   - while one of its GPUs is held by another tenant past that slice's
 *     deadline (draining, or not yielding until its grace ends), the gang
 *     reserves nothing, and gives back what it had;
 *   - it gathers for at most the longest slice running on its GPUs when it
 *     began, plus its quantum and the grace period (forming_until); then
 *     it gives back what it reserved and waits for its turn again.
 */
#include "sched.h"

#include <stdlib.h>
#include <string.h>

#define EXTEND_MARGIN_NS 1000000ull /* decide on extension 1 ms before the deadline */
#define CATCHUP_NS 1000000ull       /* a catch-up grant: one launch, then drain */
#define STALL_NS 2000000ull         /* a gang's rank draining this long may wait for a peer */
#define CAP_LATE_NS 1000000ull      /* a grant this late after eligibility keeps a limit's windows joined */
/* A holder this long past its slice's deadline is not yielding: a gang
 * gathering its GPUs keeps none reserved while it waits for one. A drain
 * takes a few ms; this leaves room for a loaded machine's. */
#define NOT_YIELDING_NS 10000000ull
/* A GPU a gathering gang waits for runs another tenant meanwhile if the
 * gang's other GPUs are not free for at least this long (a backfill). */
#define BACKFILL_MIN_NS 2000000ull
/* The most of a slice refunded for idle time its holders claim. */
#define IDLE_REFUND_MAX (1.0 / 32)
/* ...or, of a slice a latency tenant's preemption cut short, up to this
 * (a quarter of what the preemptor pays for it, PREEMPT_COST_NS): the
 * GRANT's way to its holders, idle at the start of the slice. */
#define PREEMPTED_REFUND_NS (PREEMPT_COST_NS / 4)
/* Each slice is charged at least this: its handoffs cost the GPU time
 * nobody holds, and a shim holds a slice at least its idle time (2 ms). A
 * tenant that takes slices of microseconds pays for them. */
#define MIN_SLICE_CHARGE_NS 1000000ull
/* Virtual times saturate here: never inf or nan, whatever the history. */
#define VTIME_MAX 1e300
#define BUCKET_NS (SHARE_WINDOW_NS / SHARE_BUCKETS)

/* ---- actions and worklists ---------------------------------------------------- */

/* d is scheduled before the step ends. */
static void mark_dirty(struct sched *s, struct device *d)
{
    if (d->dirty)
        return;
    d->dirty = true;
    d->dirty_next = s->dirty;
    s->dirty = d;
}

static void mark_all_dirty(struct sched *s)
{
    for (struct device *d = s->devices; d; d = d->next)
        mark_dirty(s, d);
}

/* d's timer is wanted at `when` (0: not at all); one SET_TIMER action per
 * GPU and step, at its end, if it changed. */
static void set_timer(struct sched *s, struct device *d, uint64_t when)
{
    /* a bound held back (bound_changed) goes out then, whatever else the
     * timer is for: on_timer looks at the slice afresh */
    if (d->bound_due && d->state == DEV_RUNNING && (!when || d->bound_due < when))
        when = d->bound_due;
    d->timer_at = when;
    if (d->timer_changed)
        return;
    d->timer_changed = true;
    d->timer_next = s->timers;
    s->timers = d;
}

static bool is_gang(const struct sched_tenant *t);

/* Whether dt is a latency tenant that bounds d's batch holders: its
 * processes have named d for BOUND_SETTLE_NS, and it may preempt (one
 * that owes for its preemptions waits for the slice's end, and a bound
 * would only cost the holder). Its debt grows as it preempts and shrinks
 * as it holds d, so it changes while no batch tenant holds d but at a
 * preemption: the next slice's GRANT carries the bound as it is then. */
static bool bounds_holders(const struct device_tenant *dt, uint64_t now)
{
    return dt->refs > 0 && dt->tenant->config.class == CLASS_LATENCY && now >= dt->named_since + BOUND_SETTLE_NS &&
           sched_may_preempt(dt);
}

/* When the next latency tenant that names d starts to bound its holders;
 * 0 if none is to. */
static uint64_t bound_settles(const struct device *d, uint64_t now)
{
    uint64_t first = 0;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        uint64_t at = dt->named_since + BOUND_SETTLE_NS;
        if (dt->refs > 0 && dt->tenant->config.class == CLASS_LATENCY && at > now && (!first || at < first))
            first = at;
    }
    return first;
}

/* What a batch holder of d may admit ahead of the GPU: the least
 * preempt_ms of the latency tenants that bound it (bounds_holders: what a
 * preemption then waits for); 0, no bound, where none does or the holder
 * is a latency tenant itself. */
static uint64_t admit_ahead(const struct sched *s, const struct device *d)
{
    if (!d->holder || d->holder->tenant->config.class == CLASS_LATENCY || is_gang(d->holder->tenant))
        return 0; /* (a gang's slice is never preempted) */
    uint64_t least = 0;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct tenant_config *c = &d->tenants[i].tenant->config;
        if (!bounds_holders(&d->tenants[i], s->step_now))
            continue;
        uint64_t bound = c->preempt_ns ? c->preempt_ns : s->preempt_ns;
        if (!least || bound < least)
            least = bound;
    }
    return least;
}

/* notice: a GRANT of the slice a slot holds, sent on the scheduler's own
 * initiative for its new bound alone (bound_changed). */
static void send_grant(struct sched *s, struct sched_slot *slot, struct device *d, uint32_t flags, bool notice)
{
    /* A latency tenant gives its slice back once idle: asking again
     * preempts (GS_GRANT_YIELD). */
    if (slot->tenant->config.class == CLASS_LATENCY)
        flags |= GS_GRANT_YIELD;
    slot->wants = false;
    slot->holds = d->grant;
    d->ahead_granted = admit_ahead(s, d);
    struct sched_action a = {.type = SCHED_GRANT, .slot = slot, .grant = d->grant, .at = d->deadline, .flags = flags,
                             .ahead_ns = d->ahead_granted, .notice = notice};
    sched_emit(s, &a);
}

static void grant_to(struct sched *s, struct sched_slot *slot, struct device *d, uint32_t flags)
{
    send_grant(s, slot, d, flags, false);
}

/* The bound on what d's batch holder admits ahead of the GPU changed
 * mid-slice: a latency tenant declared d or left it, or a tenant's class
 * or preempt_ms changed. The holders get the new bound now, in a GRANT of
 * the same slice with the same deadline (an extension by nothing), not
 * with their next slice: until then a holder granted without a bound kept
 * admitting its whole queue ahead of the GPU, and the latency tenant's
 * first step waited for all of it to drain (17 ms beside 1 ms kernels 16
 * deep, where the bound is 2 ms). What it admitted before still drains.
 *
 * At most one such GRANT goes out per BOUND_NOTICE_GAP_NS, with the bound
 * as it is then, and a latency tenant bounds the holder only once it has
 * named the GPU for BOUND_SETTLE_NS (admit_ahead). One that declared the
 * GPU and left it again as fast as the server read it sent the batch
 * holder a GRANT per flip, until its socket was full and it was dropped
 * for not reading (about 1 700 times in 4 s); with the GRANTs spaced, its
 * flips still kept the holder bounded half the time (3 % of its device
 * time beside a busy loop). */
static void bound_changed(struct sched *s, struct device *d, uint64_t now)
{
    if (d->state != DEV_RUNNING) {
        d->bound_due = 0;
        return;
    }
    uint64_t due = bound_settles(d, now); /* a latency tenant to bound it then */
    if (admit_ahead(s, d) != d->ahead_granted) {
        if (d->bound_sent_at && now < d->bound_sent_at + BOUND_NOTICE_GAP_NS) {
            due = d->bound_sent_at + BOUND_NOTICE_GAP_NS; /* looked at afresh then */
        } else {
            d->bound_sent_at = now;
            for (size_t i = 0; i < d->nslots; i++)
                if (d->slots[i]->holds == d->grant)
                    send_grant(s, d->slots[i], d, 0, true);
        }
    }
    d->bound_due = due;
    if (due)
        set_timer(s, d, d->timer_at);
}

/* ---- tenants on a GPU ---------------------------------------------------------- */

/* Whether the tenant's slices are granted together on all its GPUs. */
static bool is_gang(const struct sched_tenant *t)
{
    return t->config.gang != GANG_OFF && t->devices >= 2;
}

/* Whether d is one of t's GPUs (a slot of t declared it); its entry. */
static bool gang_member(const struct device *d, const struct sched_tenant *t, struct device_tenant **entry)
{
    struct device_tenant *dt = sched_entry_find(d, t);
    if (!dt || dt->refs == 0)
        return false;
    if (entry)
        *entry = dt;
    return true;
}

/* Whether dt is in the running for its GPU: a slot of it waits for that
 * GPU, or it is a gang and waits for any of its GPUs. A gang is granted
 * all its GPUs at once, so it is next on each of them as much as on the
 * one a rank asked for; a rank may not ask at all until its peers run (it
 * waits in a collective that needs them). */
static bool waits_for(const struct device_tenant *dt)
{
    return dt->waiting > 0 || (dt->tenant_waits && dt->refs > 0 && is_gang(dt->tenant));
}

bool sched_in_line(const struct device_tenant *dt)
{
    return waits_for(dt);
}

/* Changes dt's count of waiting slots by `delta`, and its tenant's. When
 * dt starts waiting, its wait starts (waiting_since). When the tenant
 * starts or stops waiting anywhere, each of its entries learns it. */
static void gang_cancel(struct sched *s, uint64_t now);

static void add_waiting(struct sched *s, struct device_tenant *dt, int delta, uint64_t now)
{
    struct sched_tenant *t = dt->tenant;
    bool before = t->waiting > 0;
    if (dt->waiting == 0 && delta > 0)
        dt->waiting_since = now;
    dt->waiting = (unsigned)((int)dt->waiting + delta);
    t->waiting = (unsigned)((int)t->waiting + delta);
    if (before == (t->waiting > 0))
        return;
    for (struct device *e = s->devices; e; e = e->next) {
        struct device_tenant *mine = sched_entry_find(e, t);
        if (!mine)
            continue;
        mine->tenant_waits = t->waiting > 0;
        /* A gang now waits for each of its GPUs: each is looked at, so
         * that one where its limit holds it back arms a timer for when
         * it lets it go (else a rank asking on another GPU, idle, waited
         * for ever: sched_fuzz's corpus, liveness-gang-limit-elsewhere) */
        if (t->waiting > 0 && is_gang(t))
            mark_dirty(s, e);
    }
    /* A gathering gang none of whose processes waits any more (the one
     * that asked exited) gathers for nobody: it gives up. */
    if (t->waiting == 0 && s->forming_gang == t)
        gang_cancel(s, now);
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

/* The smallest virtual time among d's active tenants other than `except`
 * that may be granted now (or hold it); -1 if none. One that a limit holds
 * back is left out, and so is a gang that does not hold d (its turn here
 * waits for its other GPUs): neither is in the running meanwhile. */
static double min_running_vtime(const struct device *d, const struct device_tenant *except, uint64_t now)
{
    double min = -1;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt == except || !dt->active ||
            (dt != d->holder && (dt->eligible_at > now || is_gang(dt->tenant) || !waits_for(dt))))
            continue; /* (an entry left active, not waiting, is not in the running) */
        if (min < 0 || dt->vtime < min)
            min = dt->vtime;
    }
    return min;
}

/* The longest slice of d's active tenants other than `except`, in
 * virtual time (quantum / share). */
static double longest_turn(const struct device *d, const struct device_tenant *except)
{
    double longest = 0;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        double turn = (double)dt->tenant->config.quantum_ns / dt->tenant->config.share;
        if (dt != except && dt->active && turn > longest)
            longest = turn;
    }
    return longest;
}

/* Raises d's floor to the smallest virtual time of those in the running. */
static void raise_floor(struct device *d, uint64_t now)
{
    double min = min_running_vtime(d, NULL, now);
    if (min > d->vtime_floor)
        d->vtime_floor = min;
}

static void activate(struct device *d, struct device_tenant *dt, uint64_t now)
{
    if (dt->active)
        return;
    raise_floor(d, now);
    if (d->vtime_floor > dt->vtime)
        dt->vtime = d->vtime_floor;
    dt->active = true;
}

/* A tenant that waited out its limit is back in the running: like one that
 * was idle, it starts no lower than the others in the running, nor than
 * the floor (another tenant back from its limit may be in the running, as
 * far behind as it: two such tenants raised only to each other would
 * bank what their limits kept them from, and spend it on the others once
 * a limit is lifted, as the simulation found). Device time the others used
 * while it could not have it is not held against them. */
static void back_from_limit(struct device *d, struct device_tenant *dt, uint64_t now)
{
    if (!dt->held_back || dt->eligible_at > now)
        return;
    dt->held_back = false;
    double others = min_running_vtime(d, dt, now);
    if (d->vtime_floor > others)
        others = d->vtime_floor;
    if (others > dt->vtime)
        dt->vtime = others;
}

/* dt is no longer active unless it still waits for d; the floor keeps
 * what it had reached. was_running: dt was in the running until now (it
 * held or reserved d, or waited for it, eligible and not a gang), so its
 * virtual time counts for the floor even though the caller has already
 * taken it out (a tenant alone on a GPU that releases each slice idle
 * would otherwise never raise the floor, and one that comes back after a
 * long absence would start far behind it, as the simulation found). */
static void deactivate_unless_waiting(struct device *d, struct device_tenant *dt, uint64_t now, bool was_running)
{
    raise_floor(d, now);
    if (was_running && dt->active) {
        double others = min_running_vtime(d, dt, now);
        double min = others >= 0 && others < dt->vtime ? others : dt->vtime;
        if (min > d->vtime_floor)
            d->vtime_floor = min;
    }
    dt->active = waits_for(dt);
}

/* ---- statistics ----------------------------------------------------------------- */

/* The held time counted in bucket number k (of BUCKET_NS), 0 if the ring
 * no longer (or not yet) keeps it. */
static uint64_t share_bucket(const struct device_tenant *dt, uint64_t k)
{
    if (k > dt->share_start || dt->share_start - k >= SHARE_BUCKETS)
        return 0;
    return dt->share_used[k % SHARE_BUCKETS];
}

/* Counts [from, to) as held, bucket by bucket (share_start: the newest). */
static void share_add(struct device_tenant *dt, uint64_t from, uint64_t to)
{
    while (from < to) {
        uint64_t k = from / BUCKET_NS, end = (k + 1) * BUCKET_NS;
        if (end > to)
            end = to;
        if (k > dt->share_start) {
            uint64_t clear = k - dt->share_start < SHARE_BUCKETS ? k - dt->share_start : SHARE_BUCKETS;
            for (uint64_t j = 0; j < clear; j++)
                dt->share_used[(k - j) % SHARE_BUCKETS] = 0;
            dt->share_start = k;
        }
        if (dt->share_start - k < SHARE_BUCKETS)
            dt->share_used[k % SHARE_BUCKETS] += end - from;
        from = end;
    }
}

double device_tenant_recent_share(const struct device *d, const struct device_tenant *dt, uint64_t now)
{
    return device_tenant_share_over(d, dt, now, SHARE_WINDOW_NS);
}

/* The time dt held d over the `span` before now (the running slice
 * included), in ns. */
static double held_over(const struct device *d, const struct device_tenant *dt, uint64_t now, uint64_t span)
{
    if (span > now)
        span = now; /* (a clock that began less than a window ago) */
    uint64_t start = now - span, first = start / BUCKET_NS, last = now / BUCKET_NS;
    double held = 0;
    for (uint64_t k = first; k <= last; k++) {
        double part = 1.0; /* the newest bucket counts up to now, wholly */
        if (k == first && k != last)
            part = (double)((k + 1) * BUCKET_NS - start) / (double)BUCKET_NS;
        held += part * (double)share_bucket(dt, k);
    }
    /* the running slice, not charged yet */
    if (d->state != DEV_IDLE && d->holder == dt && now > d->charged_until)
        held += (double)(now - (d->charged_until > start ? d->charged_until : start));
    return held;
}

double device_tenant_share_over(const struct device *d, const struct device_tenant *dt, uint64_t now, uint64_t window)
{
    uint64_t span = now > d->created_ns ? now - d->created_ns : 0;
    if (window > SHARE_WINDOW_NS)
        window = SHARE_WINDOW_NS;
    if (span > window || span == 0)
        span = window;
    if (span > now)
        span = now;
    double share = span ? held_over(d, dt, now, span) / (double)span : 0;
    return share > 1.0 ? 1.0 : share;
}

uint64_t device_tenant_held_over(const struct device *d, const struct device_tenant *dt, uint64_t now,
                                 uint64_t window)
{
    if (window > SHARE_WINDOW_NS)
        window = SHARE_WINDOW_NS;
    double held = held_over(d, dt, now, window);
    return held < (double)window ? (uint64_t)held : window;
}

static void record_overrun(struct device_tenant *dt, uint64_t overrun)
{
    histogram_observe(&dt->overrun_hist, overrun);
    if (dt->overruns)
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

/* ---- slices -------------------------------------------------------------------- */

static bool gang_member(const struct device *d, const struct sched_tenant *t, struct device_tenant **entry);
static void gang_slice_ended(struct sched *s, const struct device *d);

/* Charges dt for holding a GPU from `from` to `to`: its virtual time and
 * its figures. */
static void charge_entry(struct device_tenant *dt, uint64_t from, uint64_t to)
{
    dt->vtime = vtime_add(dt->vtime, (double)(to - from) / dt->tenant->config.share);
    share_add(dt, from, to);
    dt->used_ns += to - from;
}

/* Charges the holder for the time since it was last charged. */
/* A latency tenant's holding pays for its preemptions (PREEMPT_COST_NS). */
static void pay_preempt_debt(struct device_tenant *dt, uint64_t held)
{
    uint64_t paid = held < dt->preempt_debt_ns ? held : dt->preempt_debt_ns;
    dt->preempt_debt_ns -= paid;
    dt->preempt_paid_ns += paid;
}

static void charge(struct device *d, uint64_t now)
{
    if (now <= d->charged_until)
        return;
    charge_entry(d->holder, d->charged_until, now);
    pay_preempt_debt(d->holder, now - d->charged_until);
    d->held_ns += now - d->charged_until;
    d->charged_until = now;
}

/* Gives back the part of a slice its processes claim they left idle (it
 * paid no preemption either). */
static void uncharge_idle(struct device *d, struct device_tenant *dt, uint64_t idle)
{
    uint64_t unpaid = idle < dt->preempt_paid_ns ? idle : dt->preempt_paid_ns;
    dt->preempt_debt_ns += unpaid;
    dt->preempt_paid_ns -= unpaid;
    dt->vtime -= (double)idle / dt->tenant->config.share;
    dt->used_ns -= idle < dt->used_ns ? idle : dt->used_ns;
    uint64_t *b = &dt->share_used[dt->share_start % SHARE_BUCKETS];
    *b -= idle < *b ? idle : *b;
    d->held_ns -= idle < d->held_ns ? idle : d->held_ns;
}

static uint64_t extend_margin(const struct device_tenant *dt)
{
    return dt->tenant->config.quantum_ns > 2 * EXTEND_MARGIN_NS ? EXTEND_MARGIN_NS : 0;
}

/* Starts a slice of `best` on d at `now`, held (and charged) from `from`
 * (now, or when d was reserved for a gang), ending at its quantum or at
 * `until` if that is sooner: grants it to each of the tenant's slots
 * waiting for d. */
static void start_slice(struct sched *s, struct device *d, struct device_tenant *best, uint64_t from, uint64_t now,
                        uint64_t until)
{
    d->state = DEV_RUNNING;
    d->holder = best;
    d->grant++;
    d->slices++;
    d->preempting = false;
    d->slice_start = d->charged_until = from;
    d->deadline = d->slice_deadline = now + best->tenant->config.quantum_ns < until ? now + best->tenant->config.quantum_ns : until;
    best->cap_from = best->eligible_at && best->eligible_at <= from && from - best->eligible_at <= CAP_LATE_NS
                         ? best->eligible_at
                         : from;
    if (best->late_grant && from < best->late_stop)
        best->late_stop = from; /* a late drain from here on is this slice's */
    d->holders = 0;
    d->slice_idle = UINT64_MAX;
    d->gang_start = 0; /* gang_try_start stamps a gang's slices */
    d->bound_due = bound_settles(d, now); /* its GRANTs carry the bound as it
                                             is, and one that settles later
                                             goes out then */
    best->preempt_paid_ns = 0;
    best->slices++;
    if (best->waiting > 0)
        best->wait_ns += now - best->waiting_since;
    for (size_t i = 0; i < d->nslots; i++) {
        struct sched_slot *slot = d->slots[i];
        if (slot->tenant == best->tenant && slot->wants) {
            grant_to(s, slot, d, 0);
            d->holders++;
        }
    }
    add_waiting(s, best, -(int)best->waiting, now);
    if (d->last_holder && d->last_holder != best)
        histogram_observe(&d->handoff_hist, now > d->last_due ? now - d->last_due : 0);
    d->last_holder = NULL;
    set_timer(s, d, d->deadline - extend_margin(best));
}

/* Ends d's slice, which ended at `ended`: when its last holder sent its
 * RELEASE (the time the loop took to read it is not the tenant's), or
 * now. d is scheduled again before the step ends. */
static void end_slice(struct sched *s, struct device *d, uint64_t ended, uint64_t now)
{
    struct device_tenant *dt = d->holder;
    uint64_t end = ended < now ? ended : now;
    if (end < d->charged_until)
        end = d->charged_until; /* charged as it went, up to then */
    uint64_t used = end - d->slice_start;
    uint64_t due = now < d->deadline ? now : d->deadline; /* when the next grant could have come */
    charge(d, end);
    /* The least a slice costs (in virtual time and the limit only: the
     * figures count what was held), unless a latency tenant's preemption
     * cut it short: that handoff is the preemptor's, paid from its
     * preemption debt (case batch-preempted-early). */
    if (used < MIN_SLICE_CHARGE_NS && !d->preempting) {
        dt->vtime = vtime_add(dt->vtime, (double)(MIN_SLICE_CHARGE_NS - used) / dt->tenant->config.share);
        used = MIN_SLICE_CHARGE_NS;
    }
    /* The part of the slice every holder claims it left idle (the least
     * any reported: their idle spells may not overlap), bounded: a part of
     * what was held or, for a slice a preemption cut short, up to
     * PREEMPTED_REFUND_NS of it. The GRANT's way to the holders is idle
     * time at the start of every slice, a larger part of a short one, and
     * the preemptor chose its length (case batch-preempted-early). */
    uint64_t idle = d->slice_idle == UINT64_MAX ? 0 : d->slice_idle;
    uint64_t refund_max = saturate_ns((double)used * IDLE_REFUND_MAX);
    if (d->preempting) {
        uint64_t handoff = used < PREEMPTED_REFUND_NS ? used : PREEMPTED_REFUND_NS;
        if (handoff > refund_max)
            refund_max = handoff;
    }
    if (idle > refund_max)
        idle = refund_max;
    if (idle)
        uncharge_idle(d, dt, idle);
    record_overrun(dt, end > d->slice_deadline ? end - d->slice_deadline : 0);
    /* A limit L: no grant until the time the GPU was held is at most L of
     * the time since the slice began. */
    double limit = dt->tenant->config.limit;
    if (limit < 1.0) {
        /* A limit set while the slice ran judges it from then on
         * (limit_changed moved cap_from past the slice's start). */
        uint64_t held = dt->cap_from <= d->slice_start ? used : end > dt->cap_from ? end - dt->cap_from : 0;
        uint64_t until = dt->cap_from + saturate_ns((double)(held + dt->cap_debt_ns) / limit);
        dt->cap_debt_ns = 0;
        dt->cap_until = until;
        dt->eligible_at = until > now ? until : now;
        dt->held_back = until > now;
    }
    /* Forget grants still held (a holder revoked after its grace). */
    for (size_t i = 0; i < d->nslots; i++)
        if (d->slots[i]->holds == d->grant)
            d->slots[i]->holds = 0;
    d->state = DEV_IDLE;
    d->holder = NULL;
    d->holders = 0;
    d->gang_start = 0;
    deactivate_unless_waiting(d, dt, now, true);
    d->handoffs++;
    d->last_due = due;
    d->last_holder = dt;
    set_timer(s, d, 0);
    mark_dirty(s, d);
    gang_slice_ended(s, d);
}

static void revoke(struct sched *s, struct device *d, uint64_t now)
{
    d->state = DEV_REVOKING;
    for (size_t i = 0; i < d->nslots; i++) {
        struct sched_slot *slot = d->slots[i];
        if (slot->holds == d->grant) {
            struct sched_action a = {.type = SCHED_REVOKE, .slot = slot, .grant = d->grant};
            sched_emit(s, &a);
        }
    }
    uint64_t grace_end = d->slice_deadline + s->grace_ns;
    /* A gang's drain may wait for a peer's launch: look again soon. */
    uint64_t check = d->gang_start ? now + STALL_NS : grace_end;
    set_timer(s, d, check < grace_end ? check : grace_end);
}

/* A latency tenant's entry dt waits for d, which a batch tenant holds. It
 * is due when it is next by virtual time among those waiting there: then
 * the batch slice is revoked now (its holders stop admitting and drain
 * what they admitted, at most its admit_ahead of device time), or, if
 * the holder is still behind dt in virtual time, when the holder passes
 * it. A latency tenant that has used more than its share waits as anyone
 * else does: preemption changes when it runs, not how much; and one that
 * has not paid for its preemptions by holding the GPU (sched_may_preempt)
 * waits its turn too. A gang's
 * slice is not preempted (its GPUs end together). */
static void preempt_for(struct sched *s, struct device *d, struct device_tenant *dt, uint64_t now)
{
    if (d->state != DEV_RUNNING || !d->holder || d->holder == dt || d->gang_start || is_gang(d->holder->tenant) ||
        d->holder->tenant->config.class == CLASS_LATENCY || now >= d->deadline || !sched_may_preempt(dt))
        return;
    if (dt->eligible_at > now) {
        /* Its limit holds it back for now: looked at again when it lets
         * it go, if that is before the slice's next moment (on_timer).
         * Else it waited the rest of the slice (the simulation's plant
         * sched-eligible-unlooked). */
        if (dt->eligible_at < d->deadline && (!d->timer_at || dt->eligible_at < d->timer_at))
            set_timer(s, d, dt->eligible_at);
        return;
    }
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *other = &d->tenants[i];
        if (other != dt && other != d->holder && waits_for(other) && other->eligible_at <= now &&
            other->vtime < dt->vtime)
            return; /* another is next: the slice ends for it as usual */
    }
    charge(d, now);
    struct device_tenant *holder = d->holder;
    double behind = dt->vtime - holder->vtime; /* the holder's due, in virtual time */
    uint64_t wait = behind <= 0 ? 0 : saturate_ns(behind * holder->tenant->config.share);
    if (wait >= d->deadline - now)
        return;
    /* The deadline moves, not slice_deadline: the holder's drain after a
     * preemption it did not cause is not its overrun, and its grace still
     * counts from its own deadline. */
    d->deadline = now + wait;
    if (!d->preempting) {
        d->preemptions++;
        dt->preempt_debt_ns += PREEMPT_COST_NS;
    }
    d->preempting = true; /* not extended at that deadline */
    if (wait == 0)
        revoke(s, d, now);
    else if (!d->timer_at || d->deadline < d->timer_at)
        set_timer(s, d, d->deadline); /* (an earlier look stays: another latency tenant's limit) */
}

/* Whether a latency tenant waits for d and may have it (its limit). */
static bool latency_waits(const struct device *d, uint64_t now)
{
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt != d->holder && dt->tenant->config.class == CLASS_LATENCY && dt->waiting > 0 && dt->eligible_at <= now)
            return true;
    }
    return false;
}

/* A batch slice starts on d, or a latency tenant asks again: each latency
 * tenant waiting there may preempt it. */
static void preempt_check(struct sched *s, struct device *d, uint64_t now)
{
    for (size_t i = 0; i < d->ntenants && d->state == DEV_RUNNING; i++) {
        struct device_tenant *dt = &d->tenants[i];
        if (dt->tenant->config.class == CLASS_LATENCY && dt->waiting > 0)
            preempt_for(s, d, dt, now);
    }
}

/* ---- gangs ------------------------------------------------------------------ */

/* When the forming gang must look at its reservations again: when it
 * gives up gathering, or when a GPU it waits for would count as not
 * yielding (unless it insists). */
static uint64_t gang_next_look(const struct sched *s)
{
    uint64_t when = s->forming_until;
    if (s->forming_gang->gang_insists)
        return when; /* it waits for the drains (gang_blocked) */
    for (const struct device *d = s->devices; d; d = d->next)
        if ((d->state == DEV_RUNNING || d->state == DEV_REVOKING) && d->holder->tenant != s->forming_gang &&
            gang_member(d, s->forming_gang, NULL) && d->slice_deadline + NOT_YIELDING_NS < when)
            when = d->slice_deadline + NOT_YIELDING_NS;
    return when;
}

/* Keeps d free for the gang entry dt, charged to it from now. */
static void reserve(struct sched *s, struct device *d, struct device_tenant *dt, uint64_t now)
{
    d->state = DEV_RESERVED;
    d->holder = dt;
    d->holders = 0;
    d->slice_start = d->charged_until = now;
    activate(d, dt, now);
    set_timer(s, d, gang_next_look(s));
}

/* Gives back a GPU reserved for the forming gang: charged to it. */
static void unreserve(struct sched *s, struct device *d, uint64_t now)
{
    struct device_tenant *dt = d->holder;
    charge(d, now);
    d->state = DEV_IDLE;
    d->holder = NULL;
    deactivate_unless_waiting(d, dt, now, true);
    set_timer(s, d, 0);
    mark_dirty(s, d);
}

static void unreserve_all(struct sched *s, const struct sched_tenant *t, uint64_t now)
{
    for (struct device *d = s->devices; d; d = d->next)
        if (d->state == DEV_RESERVED && d->holder && d->holder->tenant == t)
            unreserve(s, d, now);
}

/* Whether the forming gang must not reserve now: one of its GPUs is held
 * by another tenant more than NOT_YIELDING_NS past that slice's deadline
 * (stopped, or hung, until its grace is over). Not once a gathering of the
 * gang gave up (gang_insists): tenants whose drains outlast
 * NOT_YIELDING_NS on two of its GPUs, each draining while the other's slice
 * ends, would keep it from ever gathering, as the simulation found. The
 * next gathering keeps what it reserves until the drains end, grace at
 * most: the reserved GPUs are charged to the gang, and it waits no longer
 * than two gatherings. */
static bool gang_blocked(const struct sched *s, uint64_t now)
{
    const struct sched_tenant *t = s->forming_gang;
    if (t->gang_insists)
        return false;
    for (const struct device *d = s->devices; d; d = d->next)
        if ((d->state == DEV_RUNNING || d->state == DEV_REVOKING) && d->holder->tenant != t &&
            now >= d->slice_deadline + NOT_YIELDING_NS && gang_member(d, t, NULL))
            return true;
    return false;
}

/* A slice ended on d: a gathering gang that needs d looks at all its GPUs
 * again (one may have been left unreserved while d's holder did not
 * yield). */
static void gang_slice_ended(struct sched *s, const struct device *d)
{
    if (!s->forming_gang || !gang_member(d, s->forming_gang, NULL))
        return;
    for (struct device *e = s->devices; e; e = e->next)
        if (gang_member(e, s->forming_gang, NULL))
            mark_dirty(s, e);
}

/* When the forming gang's GPUs other than d will all be free: the latest
 * deadline of the slices other tenants run there (now if past). */
static uint64_t gang_free_at(const struct sched *s, const struct device *d, uint64_t now)
{
    uint64_t at = now;
    for (const struct device *e = s->devices; e; e = e->next)
        if (e != d && (e->state == DEV_RUNNING || e->state == DEV_REVOKING) &&
            e->holder->tenant != s->forming_gang && gang_member(e, s->forming_gang, NULL) && e->slice_deadline > at)
            at = e->slice_deadline;
    return at;
}

/* Grants the forming gang all its GPUs if every one is reserved for it. */
static void gang_try_start(struct sched *s, uint64_t now)
{
    struct sched_tenant *t = s->forming_gang;
    for (struct device *d = s->devices; d; d = d->next)
        if (gang_member(d, t, NULL) && !(d->state == DEV_RESERVED && d->holder->tenant == t))
            return;
    s->forming_gang = NULL;
    s->gang_starts++;
    t->gang_insists = false;
    for (struct device *d = s->devices; d; d = d->next)
        if (d->state == DEV_RESERVED && d->holder->tenant == t) {
            /* Like a tenant back from its limit, a gang back from waiting
             * for its other GPUs banks nothing here for the time others
             * used this one meanwhile, beyond the one slice by which the
             * tenant ahead of it here passed it (which is its due): it
             * starts no lower than the others in the running nor than the
             * floor, which other gangs that ran here meanwhile raised (the
             * named case gangs-one-held-elsewhere). */
            double others = min_running_vtime(d, d->holder, now);
            if (d->vtime_floor > others)
                others = d->vtime_floor;
            others -= longest_turn(d, d->holder);
            if (others > d->holder->vtime)
                d->holder->vtime = others;
            start_slice(s, d, d->holder, d->slice_start, now, UINT64_MAX);
            d->gang_start = s->gang_starts;
        }
    /* GPUs that passed over gangs while this one formed may start one now. */
    mark_all_dirty(s);
}

/* Whether no limit holds the gang t back on any of its GPUs. */
static bool gang_eligible(const struct sched *s, const struct sched_tenant *t, uint64_t now)
{
    for (const struct device *d = s->devices; d; d = d->next) {
        struct device_tenant *dt;
        if (gang_member(d, t, &dt) && dt->eligible_at > now)
            return false;
    }
    return true;
}

/* A gang's place among gangs: its smallest virtual time on its GPUs. */
static double gang_key(const struct sched *s, const struct sched_tenant *t)
{
    double key = -1;
    for (const struct device *d = s->devices; d; d = d->next) {
        struct device_tenant *dt;
        if (gang_member(d, t, &dt) && (key < 0 || dt->vtime < key))
            key = dt->vtime;
    }
    return key;
}

/* Which gang gathers when the gang t is next on one of its GPUs: t, unless
 * another gang that waits on one of t's GPUs comes first by gang_key (ties
 * by index). One order for all gangs, so that two gangs that each come
 * first on a GPU of the other never wait for each other, and none is
 * passed over for good: a gang alone on one of its GPUs is always next
 * there, and would otherwise gather again each time its slice ended. */
static struct sched_tenant *gang_to_form(const struct sched *s, struct sched_tenant *t, uint64_t now)
{
    struct sched_tenant *first = t;
    double first_key = gang_key(s, t);
    for (const struct device *d = s->devices; d; d = d->next) {
        if (!gang_member(d, t, NULL))
            continue;
        for (size_t i = 0; i < d->ntenants; i++) {
            const struct device_tenant *dt = &d->tenants[i];
            struct sched_tenant *u = dt->tenant;
            if (u == first || !is_gang(u) || !waits_for(dt) || !gang_eligible(s, u, now))
                continue;
            double key = gang_key(s, u);
            if (key < first_key || (key == first_key && u->index < first->index)) {
                first = u;
                first_key = key;
            }
        }
    }
    return first;
}

/* Whether the gang t is next on every one of its GPUs: no tenant that is
 * not a gang waits there, may have a slice, and is behind it in virtual
 * time, and none holds one there that would still be behind it charged
 * for the rest of its slice (it comes first again when the slice ends, if
 * it asks again: the named case gang-behind-holder). Only then does it
 * gather: a gang that gathered while another tenant came first on one of
 * its GPUs would keep the others reserved for nothing, be charged for
 * them, and so fall behind there in turn (each gathering giving up, for
 * good); or, reserving each GPU as its slice ended, take the GPU from a
 * tenant behind it at every turn. Those ahead of it run meanwhile, and
 * their virtual times pass its own, which stand still while it waits. */
static bool gang_next_everywhere(const struct sched *s, const struct sched_tenant *t, uint64_t now)
{
    for (const struct device *d = s->devices; d; d = d->next) {
        struct device_tenant *mine;
        if (!gang_member(d, t, &mine))
            continue;
        if (mine->eligible_at > now)
            return false; /* its limit holds it back there */
        for (size_t i = 0; i < d->ntenants; i++) {
            const struct device_tenant *dt = &d->tenants[i];
            if (dt != mine && !is_gang(dt->tenant) && waits_for(dt) && dt->eligible_at <= now &&
                dt->vtime < mine->vtime)
                return false;
        }
        const struct device_tenant *h = d->holder;
        if ((d->state == DEV_RUNNING || d->state == DEV_REVOKING) && h != mine && !is_gang(h->tenant)) {
            uint64_t left = d->deadline > d->charged_until ? d->deadline - d->charged_until : 0;
            if (vtime_add(h->vtime, (double)left / h->tenant->config.share) < mine->vtime)
                return false;
        }
    }
    return true;
}

/* The gang t starts gathering its GPUs. A slice of its own that runs on
 * one of them alone (granted before it used a second GPU) ends now, so
 * that its ranks start again together. */
static void gang_form(struct sched *s, struct sched_tenant *t, uint64_t now)
{
    uint64_t longest = t->config.quantum_ns;
    s->forming_gang = t;
    for (struct device *d = s->devices; d; d = d->next) {
        struct device_tenant *dt;
        d->backfilled = false;
        if (!gang_member(d, t, &dt))
            continue;
        if (d->state == DEV_RUNNING && d->holder == dt) {
            d->deadline = d->slice_deadline = now;
            if (d->holders == 0)
                end_slice(s, d, now, now); /* scheduled again: reserved there */
            else
                revoke(s, d, now);
        }
        if ((d->state == DEV_RUNNING || d->state == DEV_REVOKING) && d->slice_deadline > now &&
            d->slice_deadline - now > longest)
            longest = d->slice_deadline - now;
        mark_dirty(s, d);
    }
    s->forming_until = now + longest + s->grace_ns;
}

/* Stops gathering: frees the gang's reservations (charged to it). Its
 * next gathering starts afresh (gang_give_up says otherwise). */
static void gang_cancel(struct sched *s, uint64_t now)
{
    struct sched_tenant *t = s->forming_gang;
    if (!t)
        return;
    s->forming_gang = NULL;
    t->gang_insists = false;
    unreserve_all(s, t, now);
    mark_all_dirty(s);
}

/* The forming gang gathered until forming_until without all its GPUs:
 * it lets go, and gathers more firmly next time (gang_insists). */
static void gang_give_up(struct sched *s, uint64_t now)
{
    struct sched_tenant *t = s->forming_gang;
    gang_cancel(s, now);
    t->gang_insists = true;
}

/* Whether e carries the same gang slice as d. */
static bool same_gang_slice(const struct device *e, const struct device *d)
{
    return (e->state == DEV_RUNNING || e->state == DEV_REVOKING) && e->holder &&
           e->holder->tenant == d->holder->tenant && e->gang_start == d->gang_start;
}

/* Ends t's gang slices that no process holds: those of gang start `stamp`,
 * or every one if stamp is 0. */
static void end_unheld_gang_slices(struct sched *s, const struct sched_tenant *t, uint64_t stamp, uint64_t ended,
                                   uint64_t now)
{
    for (struct device *e = s->devices; e; e = e->next)
        if ((e->state == DEV_RUNNING || e->state == DEV_REVOKING) && e->holder && e->holder->tenant == t &&
            e->gang_start && (!stamp || e->gang_start == stamp) && e->holders == 0)
            end_slice(s, e, ended, now);
}

/* The last holder of d's slice is gone. A plain slice ends. A gang's slice
 * ends on all its GPUs together once no process holds it on any of them:
 * until then the GPU stays the gang's, and a rank that comes back joins
 * (its peers may be waiting in a collective for its next launch). A gang
 * slice whose tenant is no longer a gang (a rank exited) ends where nobody
 * holds it, each GPU on its own, so that none is left running for nobody.
 * ended: when the last of them released (sent its RELEASE), or now. */
static void holders_gone(struct sched *s, struct device *d, uint64_t ended, uint64_t now)
{
    if (d->gang_start == 0) {
        end_slice(s, d, ended, now);
        return;
    }
    const struct sched_tenant *t = d->holder->tenant;
    if (is_gang(t))
        for (const struct device *e = s->devices; e; e = e->next)
            if (same_gang_slice(e, d) && e->holders > 0)
                return;
    end_unheld_gang_slices(s, t, d->gang_start, ended, now); /* d among them: its holders are gone */
}

/* Whether a process of d's holder may join its slice now: not once a
 * gang's slice is past its grace (it is being taken back; catch-up grants
 * must not keep it). */
static bool can_join(const struct sched *s, const struct device *d, uint64_t now)
{
    return !d->gang_start || now < d->slice_deadline + s->grace_ns;
}

/* A process of the holder asks for d while its slice runs: it joins. Past
 * the deadline of a gang's slice (its ranks are draining), it gets one
 * launch to catch up with its peers, then drains again. */
static void join(struct sched *s, struct sched_slot *slot, struct device *d, uint64_t now)
{
    uint32_t flags = GS_GRANT_JOIN;
    if (d->gang_start && now >= d->deadline) {
        flags |= GS_GRANT_CATCHUP;
        d->deadline = now + CATCHUP_NS;
        d->state = DEV_RUNNING;
        set_timer(s, d, d->deadline);
    }
    uint64_t told = d->ahead_granted;
    grant_to(s, slot, d, flags);
    d->holders++;
    if (d->ahead_granted != told) {
        /* The joiner's GRANT carries a bound the holders were not told of
         * (a latency tenant's BOUND_SETTLE_NS just over, its timer not yet
         * fired): they get it too, or the timer would find the bound
         * granted and tell nobody (the simulation found a holder left
         * unbounded so). */
        d->ahead_granted = told;
        bound_changed(s, d, now);
    }
}

/* d, a GPU of a gang past its deadline, is still draining: its ranks may
 * wait in a collective for a peer that drained already and waits for the
 * next slice. Each such peer gets one launch (a catch-up grant). */
static void gang_catch_up(struct sched *s, struct device *d, uint64_t now)
{
    for (struct device *e = s->devices; e; e = e->next) {
        if (e == d || !same_gang_slice(e, d) || e->holders > 0)
            continue;
        for (size_t i = 0; i < e->nslots; i++) {
            struct sched_slot *slot = e->slots[i];
            if (slot->tenant != e->holder->tenant || !slot->wants)
                continue;
            slot->wants = false;
            if (e->holder->waiting > 0)
                add_waiting(s, e->holder, -1, now);
            join(s, slot, e, now);
        }
    }
}

/* ---- who is next -------------------------------------------------------------- */

static bool has_competitor(const struct device *d, uint64_t now)
{
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt != d->holder && waits_for(dt) && dt->eligible_at <= now)
            return true;
    }
    return false;
}

/* Whether a tenant other than the holder may have any of the holder's
 * GPUs, or a gang waits to gather its GPUs, d among them. */
static bool has_competitor_anywhere(const struct sched *s, const struct device *d, uint64_t now)
{
    const struct sched_tenant *t = d->holder->tenant;
    if (s->forming_gang && gang_member(d, s->forming_gang, NULL))
        return true;
    if (!is_gang(t) || !d->gang_start)
        return has_competitor(d, now);
    /* A gang's slice ends on all its GPUs together: once one of them is
     * being revoked, none is extended (it would keep the others, nobody
     * holding them, from ending). */
    for (const struct device *e = s->devices; e; e = e->next)
        if (same_gang_slice(e, d) && (e->state == DEV_REVOKING || has_competitor(e, now)))
            return true;
    return false;
}

/* Whether the holder of d, charged to its deadline, would still be ahead
 * of every tenant that waits for d and may be granted by then: then the
 * next slice is its own, and draining it only to grant it again would
 * leave the GPU idle for a handoff. Where a gang is involved (the holder,
 * or one waiting for d), the scheduler decides: a gang's turn depends on
 * its other GPUs too. */
static bool goes_next(const struct sched *s, const struct device *d)
{
    const struct device_tenant *h = d->holder;
    if (is_gang(h->tenant) || (s->forming_gang && gang_member(d, s->forming_gang, NULL)))
        return false;
    uint64_t left = d->deadline > d->charged_until ? d->deadline - d->charged_until : 0;
    double projected = vtime_add(h->vtime, (double)left / h->tenant->config.share);
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt != h && waits_for(dt) &&
            (is_gang(dt->tenant) || (dt->eligible_at <= d->deadline && dt->vtime <= projected)))
            return false;
    }
    return true;
}

/* Grants the GPU to the best waiting tenant, or arms the timer for the
 * first one a limit holds back. A gang that is next starts gathering its
 * GPUs instead; while one gathers, other gangs are passed over. */
static void schedule(struct sched *s, struct device *d, uint64_t now)
{
    if (d->state != DEV_IDLE)
        return;
    struct device_tenant *mine = NULL;
    bool needed = s->forming_gang && gang_member(d, s->forming_gang, &mine);
    uint64_t next_eligible = 0;
    struct device_tenant *best = NULL;
    for (size_t i = 0; i < d->ntenants; i++) {
        struct device_tenant *dt = &d->tenants[i];
        if (!waits_for(dt) || (s->forming_gang && is_gang(dt->tenant)))
            continue;
        activate(d, dt, now); /* a gang that waits elsewhere may not be yet */
        back_from_limit(d, dt, now);
        if (dt->eligible_at > now) {
            if (!next_eligible || dt->eligible_at < next_eligible)
                next_eligible = dt->eligible_at;
            continue;
        }
        /* ties go to a latency tenant (else the batch tenant would be
         * granted and preempted for it at once) */
        if (!best || dt->vtime < best->vtime ||
            (dt->vtime == best->vtime && dt->tenant->config.class == CLASS_LATENCY &&
             best->tenant->config.class != CLASS_LATENCY))
            best = dt;
    }
    /* A GPU the gathering gang needs is kept for it: it gathers once it
     * is next on all of them (gang_next_everywhere), so none waiting was
     * ahead of it then, and one that held a GPU then, ahead of it by less
     * than its slice, is next after the gang's slice. While the gang's
     * other GPUs run slices that end later, the tenant next here gets a
     * slice that ends then (a backfill), rather than the GPU idling for
     * the gang: it is charged for what it holds, and the gang loses
     * nothing it could have used. */
    if (needed && !gang_blocked(s, now)) {
        uint64_t free_at = gang_free_at(s, d, now);
        if (best && !d->backfilled && free_at > now + BACKFILL_MIN_NS) {
            /* once per gathering: a backfill that overran must not meet
             * the others' next ones, and so on */
            d->backfilled = true;
            start_slice(s, d, best, now, now, free_at);
            return;
        }
        reserve(s, d, mine, now);
        gang_try_start(s, now);
        return;
    }
    if (!best) {
        d->last_holder = NULL;
        if (needed) /* look again when the gathering gives up */
            next_eligible = next_eligible && next_eligible < s->forming_until ? next_eligible : s->forming_until;
        set_timer(s, d, next_eligible);
        return;
    }
    if (is_gang(best->tenant)) {
        struct sched_tenant *gang = gang_to_form(s, best->tenant, now);
        if (!gang_next_everywhere(s, gang, now)) {
            /* not yet its turn on another of its GPUs: another gang here
             * whose turn it is everywhere, by gang_key, may gather */
            const struct sched_tenant *tried = gang;
            gang = NULL;
            double key = 0;
            for (size_t i = 0; i < d->ntenants; i++) {
                struct sched_tenant *u = d->tenants[i].tenant;
                if (u != tried && is_gang(u) && waits_for(&d->tenants[i]) && gang_next_everywhere(s, u, now) &&
                    (!gang || gang_key(s, u) < key)) {
                    gang = u;
                    key = gang_key(s, u);
                }
            }
        }
        if (gang) {
            gang_form(s, gang, now);
            /* the gang may not need d: d is looked at again with the
             * gathering under way (it serves the tenants that are not
             * gangs meanwhile) */
            mark_dirty(s, d);
            return;
        }
        /* no gang's turn everywhere: the next tenant here that is not a
         * gang goes meanwhile */
        best = NULL;
        for (size_t i = 0; i < d->ntenants; i++) {
            struct device_tenant *dt = &d->tenants[i];
            if (waits_for(dt) && !is_gang(dt->tenant) && dt->eligible_at <= now && (!best || dt->vtime < best->vtime))
                best = dt;
        }
        if (!best) {
            d->last_holder = NULL;
            set_timer(s, d, next_eligible);
            return;
        }
    }
    /* best is the least in the running now (those a limit holds back are
     * not): the floor is at least its virtual time, so that a tenant back
     * from its limit starts no lower than where the GPU's virtual time
     * went while it could not have it */
    raise_floor(d, now);
    start_slice(s, d, best, now, now, UINT64_MAX);
    preempt_check(s, d, now); /* a latency tenant behind it may cut it short */
}

/* The gang's processes changed, or whether it is a gang: a gathering gang
 * gathers afresh, and slices of a tenant that is no longer a gang end
 * where nobody holds them (they waited for peers that are gone). */
static void gang_changed(struct sched *s, struct sched_tenant *t, uint64_t now)
{
    if (s->forming_gang == t)
        gang_cancel(s, now);
    if (!is_gang(t))
        end_unheld_gang_slices(s, t, 0, now, now);
    /* where it waits, it is in line in another way now */
    for (struct device *d = s->devices; d; d = d->next)
        if (sched_entry_find(d, t))
            mark_dirty(s, d);
}

/* ---- events ----------------------------------------------------------------------- */

static void on_timer(struct sched *s, struct device *d, uint64_t now)
{
    if (!d->timer_at || now < d->timer_at) {
        /* early, or no longer wanted: the loop's timer is spent, so ask
         * for it again */
        d->timer_sent = 0;
        set_timer(s, d, d->timer_at);
        return;
    }
    d->timer_at = d->timer_sent = 0;
    switch (d->state) {
    case DEV_IDLE:
        mark_dirty(s, d);
        break;
    case DEV_RESERVED:
        if (s->forming_gang == d->holder->tenant && now >= s->forming_until)
            gang_give_up(s, now);
        else if (s->forming_gang == d->holder->tenant)
            set_timer(s, d, gang_next_look(s)); /* a GPU not yielding: the step's end lets go */
        break;
    case DEV_RUNNING: {
        if (d->bound_due && now >= d->bound_due)
            bound_changed(s, d, now);
        /* The slice's own moment: its deadline when preempted, else a
         * margin before it (extend or drain). A look before it is for a
         * latency tenant whose limit lets it go now (preempt_for). */
        uint64_t planned = d->preempting ? d->deadline : d->deadline - extend_margin(d->holder);
        if (now < planned) {
            preempt_check(s, d, now);
            if (d->state == DEV_RUNNING && !d->timer_at)
                set_timer(s, d, planned);
            break;
        }
        if (d->preempting && !latency_waits(d, now))
            d->preempting = false; /* the latency tenant asks no more */
        if (d->holder->tenant->config.limit >= 1.0 && !d->preempting &&
            (!has_competitor_anywhere(s, d, now) || goes_next(s, d))) {
            /* Nobody else may have it, or the holder would be chosen
             * again anyway: extend rather than drain. Charge as it goes,
             * so that a long run is never billed at once. */
            charge(d, now);
            d->deadline += d->holder->tenant->config.quantum_ns;
            d->slice_deadline = d->deadline;
            for (size_t i = 0; i < d->nslots; i++) {
                struct sched_slot *slot = d->slots[i];
                if (slot->tenant != d->holder->tenant || (slot->holds != d->grant && !slot->wants))
                    continue;
                /* A holder that asked again (a RELEASE of a stale grant
                 * with MORE) is answered by the extension; a process of
                 * the tenant that gave the slice back and asks for more
                 * (nothing fitted before the old deadline) joins it. */
                if (slot->wants && d->holder->waiting > 0)
                    add_waiting(s, d->holder, -1, now);
                if (slot->holds == d->grant) {
                    grant_to(s, slot, d, 0);
                } else {
                    grant_to(s, slot, d, GS_GRANT_JOIN);
                    d->holders++;
                }
            }
            set_timer(s, d, d->deadline - extend_margin(d->holder));
            /* Extended for being behind: a latency tenant waiting cuts it
             * short when the holder passes it (else it waited the whole
             * extension: the plant sched-extension-unpreempted). */
            preempt_check(s, d, now);
        } else if (now < d->deadline) {
            set_timer(s, d, d->deadline); /* revoke at the deadline itself */
        } else if (d->holders == 0) {
            holders_gone(s, d, now, now); /* a gang's GPU nobody holds now */
        } else {
            revoke(s, d, now);
        }
        break;
    }
    case DEV_REVOKING:
        if (d->gang_start && now < d->slice_deadline + s->grace_ns) {
            gang_catch_up(s, d, now);
            uint64_t check = now + STALL_NS, grace_end = d->slice_deadline + s->grace_ns;
            set_timer(s, d, check < grace_end ? check : grace_end);
            break;
        }
        /* Grace is over: take the slice back from whoever still holds it.
         * Their late releases charge their drain (charge_late_drain); not
         * a gang's, whose ranks past the grace wait in a collective for a
         * peer: charged on one of its GPUs and not the others, that wait
         * would put its GPUs' virtual times apart, and the smallest
         * (gang_key) would keep it first among gangs for good
         * (the simulation found it). */
        if (d->holders > 0) {
            d->slice_idle = 0;
            if (!d->gang_start) {
                d->holder->late_grant = d->grant;
                d->holder->late_charged = now;
                d->holder->late_stop = now + s->grace_ns;
            }
        }
        for (size_t i = 0; i < d->nslots; i++)
            if (d->slots[i]->holds == d->grant) {
                struct sched_action a = {.type = SCHED_LATE, .slot = d->slots[i], .device = d};
                sched_emit(s, &a);
            }
        if (d->gang_start) {
            /* Its late holders count as gone; the gang's other GPUs may
             * still be draining. */
            for (size_t i = 0; i < d->nslots; i++)
                if (d->slots[i]->holds == d->grant)
                    d->slots[i]->holds = 0;
            d->holders = 0;
            d->state = DEV_RUNNING;
            holders_gone(s, d, now, now);
        } else {
            end_slice(s, d, now, now);
        }
        break;
    }
}

static void on_acquire(struct sched *s, struct sched_slot *slot, uint64_t now)
{
    struct device *d = slot->device;
    if (!d || slot->wants || (slot->holds && slot->holds == d->grant))
        return; /* already waiting or holding */
    struct device_tenant *dt = sched_entry_find(d, slot->tenant);
    if (!dt)
        return; /* declared GPUs always have their tenant's entry */
    slot->wants = true;
    /* Join the running slice of its own tenant. */
    if (d->state == DEV_RUNNING && d->holder == dt && can_join(s, d, now)) {
        join(s, slot, d, now);
        return;
    }
    add_waiting(s, dt, +1, now);
    activate(d, dt, now);
    if (d->state == DEV_IDLE)
        mark_dirty(s, d);
    else if (slot->tenant->config.class == CLASS_LATENCY)
        preempt_for(s, d, dt, now);
}

/* A holder of dt's slice on d that was taken back after its grace
 * (late_grant) released it at `sent`: its drain ran on the GPU until then.
 * The tenant is charged for it as for a slice: virtual time, figures and
 * limit; once for the time its late holders drained together. Up to
 * late_stop at most: one more grace period (a process stopped while it
 * drained releases when it runs again, its work long done; the server
 * cannot tell that from a long drain, and bounds what it charges), or the
 * start of the tenant's next slice here (charged for its own time). d's
 * own held time is not charged: another tenant held d meanwhile. */
static void charge_late_drain(struct sched *s, struct device *d, struct device_tenant *dt, uint64_t sent, uint64_t now)
{
    uint64_t end = sent < now ? sent : now;
    if (end > dt->late_stop)
        end = dt->late_stop;
    if (end <= dt->late_charged)
        return;
    uint64_t extra = end - dt->late_charged;
    charge_entry(dt, dt->late_charged, end);
    dt->late_charged = end;
    double limit = dt->tenant->config.limit;
    if (limit >= 1.0)
        return;
    if (d->holder == dt) {
        dt->cap_debt_ns += extra; /* counted when the slice it holds now ends */
        return;
    }
    dt->cap_until += saturate_ns((double)extra / limit);
    if (dt->cap_until > dt->eligible_at) {
        dt->eligible_at = dt->cap_until;
        dt->held_back = dt->cap_until > now;
        mark_dirty(s, d);
    }
}

static void on_release(struct sched *s, const struct sched_event *ev, uint64_t now)
{
    struct sched_slot *slot = ev->slot;
    struct device *d = slot->device;
    if (!d)
        return;
    if (ev->more && !slot->wants) {
        /* Queue again before the slice ends, so that ending it does not
         * count the tenant as idle. */
        struct device_tenant *dt = sched_entry_find(d, slot->tenant);
        if (dt) {
            slot->wants = true;
            add_waiting(s, dt, +1, now);
            activate(d, dt, now);
        }
    }
    if (ev->grant == 0 || slot->holds != ev->grant) {
        /* stale: revoked already, or never held; or late */
        struct device_tenant *dt = ev->grant ? sched_entry_find(d, slot->tenant) : NULL;
        if (dt && dt->late_grant == ev->grant)
            charge_late_drain(s, d, dt, ev->sent_ns, now);
        if (ev->more && d->state == DEV_IDLE)
            mark_dirty(s, d);
        else if (ev->more && slot->tenant->config.class == CLASS_LATENCY)
            preempt_check(s, d, now);
    } else {
        slot->holds = 0;
        if (d->state == DEV_IDLE || ev->grant != d->grant)
            return;
        if (ev->idle_ns < d->slice_idle)
            d->slice_idle = ev->idle_ns;
        if (d->holders > 0)
            d->holders--;
        if (d->holders == 0)
            holders_gone(s, d, ev->sent_ns, now);
    }
    /* A gang's rank that wants more while its gang holds the GPU joins
     * (past the deadline, for one launch): its peers may be waiting in a
     * collective for it. Once the slice is being revoked it waits: a peer
     * whose drain stalls gets it a catch-up grant (gang_catch_up). */
    if (ev->more && d->gang_start && slot->wants && d->state == DEV_RUNNING && d->holder &&
        d->holder->tenant == slot->tenant && can_join(s, d, now)) {
        struct device_tenant *dt = d->holder;
        slot->wants = false;
        if (dt->waiting > 0)
            add_waiting(s, dt, -1, now);
        if (slot->holds != d->grant) /* a stale RELEASE: it holds the slice still */
            join(s, slot, d, now);
    }
}

/* The slot's wait on its GPU ends (it names it no more). */
static void slot_stops_waiting(struct sched *s, struct sched_slot *slot, uint64_t now)
{
    struct device *d = slot->device;
    if (slot->wants) {
        slot->wants = false;
        struct device_tenant *dt = sched_entry_find(d, slot->tenant);
        if (dt && dt->waiting > 0) {
            add_waiting(s, dt, -1, now);
            if (dt->waiting == 0) {
                dt->wait_ns += now - dt->waiting_since; /* waited, then left */
                if (dt != d->holder)
                    deactivate_unless_waiting(d, dt, now, dt->eligible_at <= now && !is_gang(dt->tenant));
                /* It may have been ahead of a latency tenant, which is
                 * next now (its process was killed, and the latency tenant
                 * waited out the batch slice: the plant
                 * sched-leaver-unlooked). */
                if (dt != d->holder && d->state == DEV_RUNNING)
                    preempt_check(s, d, now);
            }
        }
    }
}

/* The slot's wait and hold on its GPU end (it names it no more). */
static void slot_leaves(struct sched *s, struct sched_slot *slot, uint64_t now)
{
    struct device *d = slot->device;
    slot_stops_waiting(s, slot, now);
    if (slot->holds && slot->holds == d->grant && d->state != DEV_IDLE && d->state != DEV_RESERVED) {
        slot->holds = 0;
        d->slice_idle = 0; /* it said nothing of its idle time: none */
        if (d->holders > 0)
            d->holders--;
        if (d->holders == 0)
            holders_gone(s, d, now, now);
    }
    slot->holds = 0;
}

static void on_declare(struct sched *s, struct sched_slot *slot, struct device *d, uint64_t now)
{
    struct device_tenant *dt = sched_entry_find(d, slot->tenant);
    if (slot->device || !dt || d->nslots >= d->slots_cap)
        return; /* the caller prepares all three (sched.h) */
    slot->device = d;
    slot->index = d->nslots;
    d->slots[d->nslots++] = slot;
    if (dt->refs++ == 0) {
        dt->named_since = now;
        slot->tenant->devices++;
        gang_changed(s, slot->tenant, now);
        bound_changed(s, d, now);
    }
}

static void on_undeclare(struct sched *s, struct sched_slot *slot, bool lives_on, uint64_t now)
{
    struct device *d = slot->device;
    if (!d)
        return;
    mem_slot_gone(s, slot, lives_on);
    slot_leaves(s, slot, now);
    struct device_tenant *dt = sched_entry_find(d, slot->tenant);
    /* O(1): the last slot takes this one's place in the list. */
    size_t i = slot->index;
    if (i < d->nslots && d->slots[i] == slot) {
        d->slots[i] = d->slots[--d->nslots];
        d->slots[i]->index = i;
    }
    if (d->nslots == 0)
        d->unused_since = now;
    slot->device = NULL;
    if (dt && dt->refs > 0 && --dt->refs == 0) {
        slot->tenant->devices--;
        /* The tenant uses d no more: what it kept of d for nobody ends (a
         * gang's slice that no rank held here, a reservation). */
        if (d->holder == dt && d->state == DEV_RESERVED)
            unreserve(s, d, now);
        else if (d->holder == dt && d->state != DEV_IDLE && d->holders == 0)
            end_slice(s, d, now, now);
        gang_changed(s, slot->tenant, now);
        bound_changed(s, d, now);
    }
}

/* A client is gone: none of its slots waits any more before any of them
 * lets go of a GPU, so that what a GPU does next (a slice for a sibling
 * slot, an extension) is never granted to the client that is going. */
static void on_client_gone(struct sched *s, struct sched_slot *slots, size_t nslots, bool lives_on, uint64_t now)
{
    for (size_t i = 0; i < nslots; i++)
        if (slots[i].device)
            slot_stops_waiting(s, &slots[i], now);
    for (size_t i = 0; i < nslots; i++)
        if (slots[i].device && slots[i].holds)
            slot_leaves(s, &slots[i], now);
    for (size_t i = 0; i < nslots; i++)
        on_undeclare(s, &slots[i], lives_on, now);
}

/* Removes entry i of d (its tenant is gone, with its slots). */
static void remove_entry(struct device *d, size_t i, uint64_t now)
{
    struct device_tenant *holder = d->holder;
    if (holder == &d->tenants[i]) {
        /* its slots are gone already; this ends the slice or reservation */
        charge(d, now);
        d->state = DEV_IDLE;
        holder = d->holder = NULL;
        d->holders = 0;
        d->gang_start = 0;
    }
    d->last_holder = NULL;
    d->entry_of[d->tenants[i].tenant->index] = 0;
    free(d->tenants[i].overruns);
    memmove(&d->tenants[i], &d->tenants[i + 1], (d->ntenants - i - 1) * sizeof d->tenants[0]);
    d->ntenants--;
    for (size_t j = i; j < d->ntenants; j++)
        d->entry_of[d->tenants[j].tenant->index] = (uint32_t)j + 1;
    if (holder && holder > &d->tenants[i])
        d->holder = holder - 1;
}

/* The tenant of dt has a new limit: it holds from now on, and judges
 * nothing held before. Its slice running on d, if any, is judged from now
 * (before, a tenant alone under limit 1 whose slice had been extended for
 * seconds was held back for four times that once a limit of 0.25 came:
 * 25 s after 8.4 s held, its next grant still not due after 20 s of the
 * GPU idle, sched_fuzz's liveness check). A window it waits out now is
 * recomputed with the new limit: as long as the old limit would have had
 * it wait for the same held time (a limit raised lets it go sooner, one
 * lowered holds it longer). */
static void limit_changed(struct sched *s, struct device *d, struct device_tenant *dt, uint64_t now)
{
    double old = dt->cap_limit, limit = dt->tenant->config.limit;
    dt->cap_limit = limit;
    if (old == limit)
        return;
    if (d->holder == dt && (d->state == DEV_RUNNING || d->state == DEV_REVOKING)) {
        dt->cap_from = now > d->slice_start ? now : d->slice_start;
        return;
    }
    if (dt->eligible_at <= now || old >= 1.0 || dt->cap_until <= dt->cap_from)
        return;
    double held = (double)(dt->cap_until - dt->cap_from) * old;
    dt->cap_until = dt->cap_from + saturate_ns(limit < 1.0 ? held / limit : held);
    dt->eligible_at = dt->cap_until > now ? dt->cap_until : now;
    mark_dirty(s, d);
}

static void on_tenant_gone(struct sched *s, struct sched_tenant *t, uint64_t now)
{
    if (s->forming_gang == t)
        gang_cancel(s, now);
    for (struct device *d = s->devices; d; d = d->next) {
        struct device_tenant *dt = sched_entry_find(d, t);
        if (dt) {
            remove_entry(d, (size_t)(dt - d->tenants), now);
            set_timer(s, d, d->state == DEV_IDLE ? 0 : d->timer_at);
            mark_dirty(s, d);
        }
    }
}

void sched_step(struct sched *s, const struct sched_event *ev, uint64_t now)
{
    s->nactions = 0;
    s->step_now = now;
    switch (ev->type) {
    case SCHED_TENANT_CHANGED:
        for (struct device *d = s->devices; d; d = d->next) {
            struct device_tenant *dt = sched_entry_find(d, ev->tenant);
            if (dt)
                limit_changed(s, d, dt, now);
        }
        gang_changed(s, ev->tenant, now);
        mark_all_dirty(s);
        /* A new share, limit or class may make a latency tenant due
         * sooner, or now (the holder's share changed and the preemption
         * planned with the old one came late: the scripted case
         * latency-waits-holder-share-halved). */
        for (struct device *d = s->devices; d; d = d->next)
            if (d->state == DEV_RUNNING) {
                bound_changed(s, d, now);
                preempt_check(s, d, now);
            }
        break;
    case SCHED_TENANT_GONE:
        on_tenant_gone(s, ev->tenant, now);
        break;
    case SCHED_DECLARE:
        on_declare(s, ev->slot, ev->device, now);
        break;
    case SCHED_UNDECLARE:
        on_undeclare(s, ev->slot, ev->lives_on, now);
        break;
    case SCHED_CLIENT_GONE:
        on_client_gone(s, ev->slot, ev->nslots, ev->lives_on, now);
        break;
    case SCHED_ACQUIRE:
        on_acquire(s, ev->slot, now);
        break;
    case SCHED_RELEASE:
        on_release(s, ev, now);
        break;
    case SCHED_TIMER:
        on_timer(s, ev->device, now);
        break;
    case SCHED_MEM_LEASE:
    case SCHED_MEM_FREE:
    case SCHED_MEM_DECLARE:
    case SCHED_MEM_QUERY:
    case SCHED_WAKE:
    case SCHED_PROCESS_GONE:
        mem_event(s, ev, now);
        break;
    }
    /* A gathering gang gives up after forming_until; one that waits for a
     * tenant past its deadline keeps nothing idle meanwhile. */
    if (s->forming_gang && now >= s->forming_until)
        gang_give_up(s, now);
    else if (s->forming_gang && gang_blocked(s, now))
        unreserve_all(s, s->forming_gang, now);
    while (s->dirty) {
        struct device *d = s->dirty;
        s->dirty = d->dirty_next;
        d->dirty = false;
        schedule(s, d, now);
    }
    while (s->timers) {
        struct device *d = s->timers;
        s->timers = d->timer_next;
        d->timer_changed = false;
        if (d->timer_at != d->timer_sent) {
            d->timer_sent = d->timer_at;
            struct sched_action a = {.type = SCHED_SET_TIMER, .device = d, .at = d->timer_at};
            sched_emit(s, &a);
        }
    }
}
