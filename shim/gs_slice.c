/*
 * The slice machine (see gs_slice.h): every decision about a GPU's time
 * slice. No lock, no send, no clock, no call out of this file: it is
 * compiled unchanged into the simulation of a node (test/sim).
 *
 * Bounding the overrun: a real driver lets a process queue 1024 launches,
 * which may be seconds of work. So admission is counted against a budget:
 * the time left in the slice, less the device time already queued, divided
 * by the measured device time per kernel launch. Graph launches are
 * admitted one by one against their own measured device time. Admission
 * stops at the deadline (or on REVOKE, or when the process goes idle, or
 * when nothing more fits); the drainer then waits for the admitted work to
 * finish, and RELEASE goes out at the end of that round.
 *
 * The drainer's rounds measure the device time per launch: each round
 * waits for what was handed to the driver when it began, and the estimate
 * is a ratio of sums over recent rounds (each round counts as much as it
 * lasted). While a slice is held a round is due at most every millisecond
 * while work runs, or at once while launches wait for what it will tell
 * (budget, or room under a bound); a program that synchronizes makes rounds itself
 * (SYNCED), and then the drainer sleeps until woken (by a launch short of
 * budget, or the gate thread's timer).
 *
 * Bounding what is ahead of the GPU: while a latency tenant's processes
 * name the GPU, the server's GRANT to a batch holder carries ahead_ns
 * (its preempt_ms), and admission also stops when the estimated device
 * time admitted and not finished would pass it, so that a REVOKE waits
 * for at most that much. A launch longer than the bound is admitted alone,
 * once nothing is in flight. What is in flight is what the rounds do not
 * know finished, less what the GPU has done since a moment it is known to
 * have started on the process's queue without a pause (the end of a round
 * that left work queued: the GPU goes on with it; a launch admitted onto
 * an empty queue), at most one launch of it (the "flow": the GPU may run
 * a sibling process's work first, and then the count is short by that
 * one launch at most). So the next launch is
 * admitted while the last ones still run, at the moment it fits (the gate
 * thread looks then), and the GPU is not left idle between launches; a
 * launcher short of the bound also has the drainer run a round at once
 * rather than after the usual pause.
 *
 * A latency tenant's slice (GS_GRANT_YIELD) goes back as soon as a
 * synchronization finds its work finished: its next launch asks again and
 * preempts, so holding the GPU idle would only keep it from the others.
 *
 * Idle spells: the parts of a held slice in which the process had nothing
 * on the GPU (from the grant's sending to its first launch; from the end
 * of work a synchronization found finished to the next launch). RELEASE
 * reports them; the server refunds them only in part.
 */
#include "gs_slice.h"

#include "gpuslice/protocol.h"

#define FIRST_SLICE_ALLOWANCE 4       /* launches, before any time per launch is known */
#define UNBOUNDED_ALLOWANCE (1u << 30) /* no drainer: nothing counts finished work */
#define IDLE_RELEASE_NS 2000000ull    /* nothing launched or running for 2 ms: release */
/* How much later than that the release may come, to save the gate thread
 * wake-ups: while a program keeps emptying its queue (a synchronization
 * after each kernel, say), the gate thread looks every IDLE_RELEASE_NS +
 * IDLE_LATE_NS, instead of being woken at each synchronization. */
#define IDLE_LATE_NS 3000000ull
/* The longest the gate thread sleeps while a slice is held or draining: a
 * backstop only; every moment a held slice needs is computed below. */
#define TICK_NS 50000000ull
#define MEASURE_INTERVAL_NS 1000000ull /* between drainer rounds while work runs */
#define ESTIMATE_WINDOW 64            /* kernels: older rounds weigh half as much beyond it */

const char *gs_slice_state_name(enum gs_slice_state state)
{
    switch (state) {
    case GS_SLICE_NONE: return "none";
    case GS_SLICE_WANT: return "want";
    case GS_SLICE_HOLD: return "hold";
    case GS_SLICE_DRAIN: return "drain";
    }
    return "?";
}

static void emit(struct gs_slice_actions *out, enum gs_slice_action_type type)
{
    /* Each step emits at most one action of each type but ARM_TIMER
     * (once, at the end): the array cannot fill. */
    if (out->n < GS_SLICE_MAX_ACTIONS)
        out->a[out->n++] = (struct gs_slice_action){.type = type};
}

static bool emitted(const struct gs_slice_actions *out, enum gs_slice_action_type type)
{
    for (int i = 0; i < out->n; i++)
        if (out->a[i].type == type)
            return true;
    return false;
}

static void emit_once(struct gs_slice_actions *out, enum gs_slice_action_type type)
{
    if (!emitted(out, type))
        emit(out, type);
}

/* ---- what is queued --------------------------------------------------------- */

/* Nothing admitted is unfinished, as far as the rounds know. */
static bool queue_empty(const struct gs_slice *s)
{
    uint64_t submitted = atomic_load(&s->submitted);
    return s->completed >= submitted && atomic_load(&s->admitted) == submitted;
}

/* Everything not known to have finished, as counted at the last round or
 * launched since. */
static double queued_since_round_ns(const struct gs_slice *s)
{
    uint64_t admitted = atomic_load(&s->admitted);
    uint64_t submitted = atomic_load(&s->submitted);
    uint64_t graphs = atomic_load(&s->graphs_submitted) - s->graphs_completed;
    uint64_t graph_ns = atomic_load(&s->graph_ns_submitted) - s->graph_ns_completed;
    uint64_t launches = (submitted > s->completed ? submitted - s->completed : 0) + (admitted - submitted);
    uint64_t kernels = launches > graphs ? launches - graphs : 0;
    return (double)kernels * s->kernel_ns + (double)graph_ns;
}

/* Device time queued now: while the slice is held the device works
 * through what was queued at the last round, so that part counts down
 * with time between rounds. */
static double queued_ns(const struct gs_slice *s, uint64_t now)
{
    double queued = queued_since_round_ns(s);
    if (s->state == GS_SLICE_HOLD && s->last_round_end_ns > s->slice_start_ns && now > s->last_round_end_ns) {
        double ran = (double)(now - s->last_round_end_ns);
        queued -= ran < s->queued_at_round_ns ? ran : s->queued_at_round_ns;
    }
    return queued > 0 ? queued : 0;
}

/* Under a bound (ahead_ns): the device time admitted and not finished:
 * what the rounds do not know finished, less what the GPU did of the flow
 * since it began. */
static double ahead_ns(const struct gs_slice *s, uint64_t now)
{
    double ahead = queued_since_round_ns(s);
    if (s->flow_since_ns && s->flow_since_ns >= s->slice_start_ns && now > s->flow_since_ns) {
        double ran = (double)(now - s->flow_since_ns);
        ahead -= ran < s->flow_ns ? ran : s->flow_ns;
    }
    return ahead > 0 ? ahead : 0;
}

/* Under a bound, with launches waiting for room: when the flow will have
 * left room for one more launch (0: it will not; a round must tell). */
static uint64_t room_at(const struct gs_slice *s, uint64_t now)
{
    if (!s->ahead_ns || s->waiters == 0 || s->kernel_ns <= 0 || !s->flow_since_ns ||
        s->flow_since_ns < s->slice_start_ns)
        return 0;
    double need = queued_since_round_ns(s) - ((double)s->ahead_ns - s->kernel_ns); /* to run off */
    if (need <= 0 || need > s->flow_ns)
        return 0;
    uint64_t at = s->flow_since_ns + (uint64_t)need + 1;
    return at > now ? at : 0;
}

/* A round ended, or a synchronization showed what finished: the GPU goes
 * on with what is left, without a pause. Only the first launch of it
 * counts down: the GPU may be running another process's work meanwhile
 * (a tenant of several processes), and then this process's count is
 * short by that one launch at most. */
static void flow_from_round(struct gs_slice *s, uint64_t now)
{
    double queued = queued_since_round_ns(s);
    s->flow_since_ns = now;
    s->flow_ns = queued < s->kernel_ns ? queued : s->kernel_ns;
}

/* A slice is held and nothing of the process is known to be queued or
 * waiting: it may be idle. */
static bool held_idle(const struct gs_slice *s)
{
    return s->state == GS_SLICE_HOLD && queue_empty(s) && s->waiters == 0 && !s->draining;
}

/* The last moment the machine knows of activity on the held slice: a
 * launch admitted or waiting, seen by the gate thread (quiet_since_ns), or
 * work a round saw running until it finished (last_round_end_ns). An idle
 * spell, for the idle release, counts from then. */
static uint64_t last_activity_ns(const struct gs_slice *s)
{
    return s->quiet_since_ns > s->last_round_end_ns ? s->quiet_since_ns : s->last_round_end_ns;
}

/* Nothing is queued on the held slice and less time is left than one more
 * launch (or the graph waiting) takes: the slice may end now. */
static bool nothing_fits(const struct gs_slice *s, uint64_t now)
{
    return queue_empty(s) && atomic_load(&s->admitted) > s->admitted_at_grant &&
           ((s->kernel_ns > 0 && now + (uint64_t)s->kernel_ns >= s->deadline_ns) ||
            (s->waiting_graph_ns && now + s->waiting_graph_ns > s->deadline_ns));
}

/* A round made by the application's synchronization is recent enough that
 * the drainer need not make one, with no launch short of budget. */
static bool round_fresh(const struct gs_slice *s, uint64_t now)
{
    return s->round_by_sync && s->waiters == 0 && now < s->last_round_end_ns + MEASURE_INTERVAL_NS;
}

/* Adds a round to the estimate of device time per kernel launch: a ratio
 * of sums over recent rounds, so that short rounds that happen to catch a
 * burst of completions do not drag it down (an underestimate overruns). */
static void estimate(struct gs_slice *s, double kernels, double ns)
{
    s->measured_ns += ns;
    s->measured_kernels += kernels;
    s->kernel_ns = s->measured_ns / s->measured_kernels;
    if (s->measured_kernels > ESTIMATE_WINDOW) {
        s->measured_ns /= 2;
        s->measured_kernels /= 2;
    }
}

/* ---- idle spells ------------------------------------------------------------ */

void gs_slice_end_idle(struct gs_slice *s, uint64_t now)
{
    uint64_t since = atomic_exchange(&s->idle_since, 0);
    if (since && now > since)
        atomic_fetch_add(&s->idle_ns, now - since);
}

/* The idle time to report in RELEASE, and a fresh count. */
static uint64_t take_idle(struct gs_slice *s, uint64_t now)
{
    uint64_t idle = atomic_exchange(&s->idle_ns, 0);
    uint64_t since = atomic_exchange(&s->idle_since, 0);
    if (since && now > since)
        idle += now - since;
    return idle;
}

/* ---- the budget ---------------------------------------------------------- */

/* (Re)computes a held slice's budget and opens admission; wakes launchers
 * when it admits any, and the drainer when work runs that no recent round
 * has measured. */
static void update_budget(struct gs_slice *s, uint64_t now, struct gs_slice_actions *out)
{
    if (s->state != GS_SLICE_HOLD)
        return;
    uint64_t admitted = atomic_load(&s->admitted);
    uint64_t submitted = atomic_load(&s->submitted);
    uint64_t allowance;
    if (now >= s->deadline_ns) {
        allowance = 0;
    } else if (s->catch_up) {
        allowance = admitted > s->admitted_at_grant ? 0 : 1;
    } else if (!s->drainer) {
        /* Nothing measures or counts finished work (the drainer could not
         * start): admission is open until the deadline, unbounded. */
        allowance = UNBOUNDED_ALLOWANCE;
    } else if (s->kernel_ns <= 0) {
        /* Nothing measured yet: a few launches, or, under a bound, one
         * at a time until a round has measured one. */
        allowance = s->ahead_ns ? 1 : FIRST_SLICE_ALLOWANCE;
        if (admitted - s->completed >= allowance)
            allowance = 0;
    } else {
        double left = (double)(s->deadline_ns - now);
        double room = left - queued_ns(s, now);
        bool time_fits = room >= s->kernel_ns;
        if (s->ahead_ns && (double)s->ahead_ns - ahead_ns(s, now) < room)
            room = (double)s->ahead_ns - ahead_ns(s, now);
        double fits = room / s->kernel_ns;
        allowance = fits > 0 ? (uint64_t)fits : 0;
        /* Always let one launch through at the start of a slice or of an
         * extension: a kernel longer than the slice must still run (its
         * overrun is charged); and one longer than the bound, alone. (Not
         * only at the slice's start: a process that came back to its
         * tenant's slice, which its siblings keep extended, would wait
         * for as long as they do.) */
        if (allowance == 0 && queue_empty(s) &&
            (now - s->window_start_ns < s->deadline_ns - now || (s->ahead_ns && time_fits)))
            allowance = 1;
    }
    uint64_t budget = admitted + allowance;
    /* The budget only grows within a slice (a launch admitted on an older
     * estimate stays admitted), but to what is admitted when nothing more
     * fits, and wherever a bound holds it back. */
    if (budget > atomic_load(&s->budget) || allowance == 0 || s->ahead_ns)
        atomic_store(&s->budget, budget > admitted ? budget : admitted);
    atomic_store(&s->open, 1);
    if (allowance > 0 || s->waiting_graph_ns)
        emit_once(out, GS_SLICE_WAKE_LAUNCHERS);
    if (submitted > s->completed && !round_fresh(s, now))
        emit_once(out, GS_SLICE_START_ROUND);
}

/* ---- draining and releasing ------------------------------------------------ */

/* The drain ended (every admitted launch finished, or there is no drainer
 * to wait): a drained slice goes back to the server. */
static void drained(struct gs_slice *s, uint64_t now, struct gs_slice_actions *out)
{
    s->draining = false;
    emit_once(out, GS_SLICE_WAKE_LAUNCHERS); /* a waiting launch asks again */
    emit_once(out, GS_SLICE_FORGET_STREAMS);
    if (s->state != GS_SLICE_DRAIN)
        return; /* extended while draining: held again */
    /* More: launches wait, or the slice ended while the process was busy
     * (not for idleness), so it is only between a synchronization and its
     * next launch. Staying queued keeps its place: a tenant that
     * synchronizes must not count as newly arrived after each slice. If
     * it does not launch after all, it gives the next grant back once
     * idle. */
    bool more = s->waiters > 0 || !s->drain_for_idle;
    if (s->connected) {
        emit(out, GS_SLICE_SEND_RELEASE);
        struct gs_slice_action *a = &out->a[out->n - 1];
        a->grant = s->grant;
        a->idle_ns = take_idle(s, now);
        a->more = more;
    }
    s->last_released = s->grant;
    s->state = s->connected && more ? GS_SLICE_WANT : GS_SLICE_NONE;
}

/* Closes admission and has the drainer empty the queue before RELEASE. */
static void begin_drain(struct gs_slice *s, uint64_t now, struct gs_slice_actions *out)
{
    atomic_store(&s->open, 0);
    s->round_owed_at = 0; /* the drain's rounds see everything */
    s->state = GS_SLICE_DRAIN;
    s->draining = true;
    if (!s->drainer) {
        /* Nobody can wait for the work: the slice ends now, so that
         * launches go on (in later slices) instead of waiting for good. */
        drained(s, now, out);
        return;
    }
    emit_once(out, GS_SLICE_START_ROUND);
}

/* ---- events ------------------------------------------------------------------ */

/* Whether a graph of graph_ns fits in what is left of the held slice. A
 * graph not measured yet, or one that does not fit, asks for the slice to
 * end as soon as its queue is empty, so that it starts the next one (a
 * tenant alone has its slice extended and would never see a start). */
static bool graph_fits(struct gs_slice *s, uint64_t graph_ns, uint64_t now)
{
    if (s->state != GS_SLICE_HOLD)
        return true; /* open without a slice: the server is down, policy open */
    bool empty = queue_empty(s);
    bool fresh = now < s->deadline_ns && now - s->slice_start_ns < s->deadline_ns - now;
    if (empty && fresh)
        return true;
    if (graph_ns == 0) {
        uint64_t whole = s->deadline_ns > s->slice_start_ns ? s->deadline_ns - s->slice_start_ns : 1;
        if (whole > s->waiting_graph_ns)
            s->waiting_graph_ns = whole;
        return false;
    }
    bool fits = now + (uint64_t)queued_ns(s, now) + graph_ns <= s->deadline_ns;
    if (!fits && graph_ns > s->waiting_graph_ns)
        s->waiting_graph_ns = graph_ns;
    /* Under a bound, it waits (for a round) until what is ahead of it
     * leaves room, or, longer than the bound, until nothing is. */
    if (fits && s->ahead_ns && !empty && ahead_ns(s, now) + (double)graph_ns > (double)s->ahead_ns)
        return false;
    return fits;
}

static void launch(struct gs_slice *s, const struct gs_slice_event *ev, uint64_t now, struct gs_slice_actions *out)
{
    /* Under a bound, the GPU may have made room since the budget was
     * last counted: count it again. */
    if (s->ahead_ns && s->state == GS_SLICE_HOLD && !ev->graph && atomic_load(&s->open) &&
        atomic_load(&s->admitted) >= atomic_load(&s->budget))
        update_budget(s, now, out);
    if (atomic_load(&s->open) && atomic_load(&s->admitted) < atomic_load(&s->budget) &&
        (!ev->graph || graph_fits(s, ev->graph_ns, now))) {
        if (s->ahead_ns && s->state == GS_SLICE_HOLD && queue_empty(s)) {
            /* onto an empty queue: the GPU starts on it now */
            s->flow_since_ns = now;
            s->flow_ns = ev->graph ? (double)ev->graph_ns : s->kernel_ns;
        }
        atomic_fetch_add(&s->admitted, 1);
        if (atomic_load(&s->idle_since) != 0)
            gs_slice_end_idle(s, now);
        if (ev->retry)
            s->waiters--;
        /* The drainer sleeps while nothing is known to be queued: a round
         * is owed for this launch (on the slow path only: a launch waited,
         * or the budget was short), or nothing would tell the slice that
         * the work finished until the gate thread's next look, which may
         * be the deadline (the simulation saw slices held 30 ms idle).
         * The gate thread starts it a round's interval later: woken now,
         * the drainer would take a CPU from this launch on its way to the
         * driver (20 to 60 us more on the handoff, on 2 CPUs). */
        if (s->state == GS_SLICE_HOLD && !s->round_running && atomic_load(&s->submitted) == s->completed &&
            !s->round_owed_at)
            s->round_owed_at = now + MEASURE_INTERVAL_NS;
        /* Admitted: its request to end the slice early is void (others
         * still waiting ask again when they are woken). */
        if (ev->graph && (ev->graph_ns == 0 || ev->graph_ns >= s->waiting_graph_ns))
            s->waiting_graph_ns = 0;
        out->admitted = true;
        return;
    }
    if (!ev->retry)
        s->waiters++;
    /* Short of budget while work runs: a round, which counts what
     * finished, may give more. */
    if (s->state == GS_SLICE_HOLD && atomic_load(&s->submitted) > s->completed)
        emit_once(out, GS_SLICE_START_ROUND);
    if (s->state == GS_SLICE_NONE && s->connected) {
        emit(out, GS_SLICE_SEND_ACQUIRE);
        s->state = GS_SLICE_WANT;
    }
}

static void grant(struct gs_slice *s, const struct gs_slice_event *ev, uint64_t now, struct gs_slice_actions *out)
{
    bool join = (ev->flags & GS_GRANT_JOIN) && s->state == GS_SLICE_WANT;
    bool extension = ev->grant == s->grant && (s->state == GS_SLICE_HOLD || s->state == GS_SLICE_DRAIN);
    /* An extension of a slice already given back, sent before the RELEASE
     * reached the server. Not one of a slice given back and joined again:
     * that is held, and its extensions (a new deadline, a new bound on
     * work ahead) count (a holder that had joined again ignored its
     * bound for the rest of its slice: the plant shim-rejoined-unextended). */
    if (ev->grant == s->last_released && !join && !extension)
        return;
    if (!extension && s->state != GS_SLICE_WANT)
        return;
    if (!extension) {
        uint64_t admitted = atomic_load(&s->admitted);
        /* A new slice's budget starts from nothing: what the last one left
         * unused (an unbounded one, without a drainer) is not carried. */
        atomic_store(&s->budget, admitted);
        /* The slice is charged from when the server sent the grant, and
         * nothing of this process ran on the GPU since; nothing is queued
         * between slices unless the process ran unthrottled (server down,
         * open policy): then no spell is claimed while any of it is
         * queued, and none before the round that saw it finish (it may
         * have run after the grant was sent, as the simulation found). */
        uint64_t idle_from = ev->sent_ns > s->last_round_end_ns ? ev->sent_ns : s->last_round_end_ns;
        atomic_store(&s->idle_ns, 0);
        atomic_store(&s->idle_since, queue_empty(s) && idle_from <= now ? idle_from : 0);
        s->slice_start_ns = now;
        s->flow_since_ns = 0;
        s->admitted_at_grant = admitted;
        s->submitted_at_grant = atomic_load(&s->submitted);
        s->seen_admitted = admitted;
        s->quiet_since_ns = now;
        s->round_owed_at = 0; /* one owed in a slice that ended without a drain */
    }
    s->grant = ev->grant;
    s->deadline_ns = ev->deadline_ns;
    s->window_start_ns = now;
    s->catch_up = !extension && (ev->flags & GS_GRANT_CATCHUP);
    s->ahead_ns = ev->ahead_ns; /* an extension may bound a slice that was not, or lift it */
    s->yield_idle = (ev->flags & GS_GRANT_YIELD) != 0;
    s->state = GS_SLICE_HOLD; /* extended while draining: the drain goes on, then it holds again */
    update_budget(s, now, out);
}

static void revoke(struct gs_slice *s, const struct gs_slice_event *ev, uint64_t now, struct gs_slice_actions *out)
{
    if (s->state != GS_SLICE_HOLD || ev->grant != s->grant)
        return;
    s->deadline_ns = now;
    s->drain_for_idle = false;
    begin_drain(s, now, out);
}

/* No server answers: under the `open` policy, admission opens wide. */
static void open_wide(struct gs_slice *s, struct gs_slice_actions *out)
{
    atomic_store(&s->budget, UINT64_MAX);
    atomic_store(&s->open, 1);
    emit_once(out, GS_SLICE_WAKE_LAUNCHERS);
}

/* A connection is being made: launches wait for its WELCOME, for a while
 * even under the `open` policy (a server that is up is not down). */
static void connecting(struct gs_slice *s, uint64_t now)
{
    s->connecting_since = now ? now : 1;
    atomic_store(&s->open, 0);
    atomic_store(&s->budget, atomic_load(&s->admitted));
}

static void welcome(struct gs_slice *s, struct gs_slice_actions *out)
{
    /* A new server numbers its grants afresh, and holds nothing of the
     * last one's: throttled from here on (the open policy's wide-open
     * admission ends). */
    s->connected = true;
    s->connecting_since = 0;
    atomic_store(&s->open, 0);
    atomic_store(&s->budget, atomic_load(&s->admitted));
    s->state = GS_SLICE_NONE;
    s->last_released = 0;
    if (s->waiters > 0) {
        emit(out, GS_SLICE_SEND_ACQUIRE);
        s->state = GS_SLICE_WANT;
    }
}

static void disconnected(struct gs_slice *s, const struct gs_slice_event *ev, struct gs_slice_actions *out)
{
    /* Slices held are gone with the server; a drain goes on (its RELEASE
     * has nobody to go to). Admission closes (wait) or opens wide (open). */
    s->connected = false;
    s->connecting_since = 0;
    s->policy_open = ev->policy_open;
    if (s->state == GS_SLICE_WANT || s->state == GS_SLICE_HOLD)
        s->state = GS_SLICE_NONE;
    if (s->policy_open)
        open_wide(s, out);
    else
        atomic_store(&s->open, 0);
    emit_once(out, GS_SLICE_WAKE_LAUNCHERS);
}

/* The gate thread looks: ask, close at the deadline, notice idleness. */
static void timer(struct gs_slice *s, uint64_t now, struct gs_slice_actions *out)
{
    if (s->connecting_since && s->policy_open && now >= s->connecting_since + GS_SLICE_WELCOME_WAIT_NS) {
        s->connecting_since = 0; /* no WELCOME in time: the server does not answer */
        open_wide(s, out);
    }
    switch (s->state) {
    case GS_SLICE_NONE:
        if (s->connected && s->waiters > 0) {
            emit(out, GS_SLICE_SEND_ACQUIRE);
            s->state = GS_SLICE_WANT;
        }
        break;
    case GS_SLICE_WANT:
    case GS_SLICE_DRAIN:
        break;
    case GS_SLICE_HOLD: {
        uint64_t admitted = atomic_load(&s->admitted);
        if (admitted != s->seen_admitted || s->waiters > 0) {
            s->seen_admitted = admitted;
            s->quiet_since_ns = now;
        }
        /* A program that emptied its queue since the last look may do it
         * again and then stop: looked at again in a while (see next_look). */
        s->poll_at = s->seen_empty ? now + IDLE_RELEASE_NS + IDLE_LATE_NS : 0;
        s->seen_empty = false;
        /* Less time left than one launch takes, and nothing queued:
         * nothing more fits, so give the GPU back now (a drainer round
         * that finds this does the same). */
        bool no_fit = nothing_fits(s, now);
        /* Idle: nothing launched, and nothing running, for the whole
         * spell. Work that ran until a round saw it finish counts as
         * activity: a program that waits for a long kernel and then
         * launches the next is busy, not idle. */
        bool idle = queue_empty(s) && s->waiters == 0 && now - last_activity_ns(s) >= IDLE_RELEASE_NS;
        if (now >= s->deadline_ns || no_fit || idle) {
            s->drain_for_idle = idle && now < s->deadline_ns && !no_fit;
            begin_drain(s, now, out);
        } else {
            update_budget(s, now, out);
            /* The round owed for a launch admitted onto an empty queue,
             * unless one has run since or the work is seen finished. */
            if (s->round_owed_at && now >= s->round_owed_at) {
                if (!s->round_running && atomic_load(&s->admitted) > s->completed)
                    emit_once(out, GS_SLICE_START_ROUND);
                s->round_owed_at = 0;
            }
        }
        break;
    }
    }
}

static void drainer_ready(struct gs_slice *s, uint64_t now, struct gs_slice_actions *out)
{
    /* (admitted, not submitted: a launch woke it on its way to the driver) */
    bool work = s->state == GS_SLICE_HOLD && atomic_load(&s->admitted) > s->completed;
    if (!s->draining && !work)
        return; /* sleep until woken */
    /* While the slice runs, a round only refreshes the estimates: one
     * every MEASURE_INTERVAL_NS is plenty. A drain cuts the pause short.
     * After a round made by an application's synchronization, sleep until
     * woken (a launch short of budget, the gate thread): a program that
     * synchronizes often makes the rounds itself. */
    /* Under a bound, launches wait for the room a round gives again: the
     * next round at once. Without one they wait for the budget, and rounds
     * keep their pause (a wake-up a millisecond at most) until the slice's
     * last interval; in the last one a queue seen empty late would leave
     * the slice's end idle. */
    bool launches_wait = s->waiters > 0 && (s->ahead_ns || now + MEASURE_INTERVAL_NS >= s->deadline_ns);
    if (!s->draining && !launches_wait && s->last_round_end_ns + MEASURE_INTERVAL_NS > now &&
        s->last_round_end_ns > s->slice_start_ns) {
        if (!round_fresh(s, now))
            out->round_wait_until = s->last_round_end_ns + MEASURE_INTERVAL_NS;
        return;
    }
    s->round_running = true;
    s->round_owed_at = 0;
    s->round_draining = s->draining;
    s->round_since = s->last_round_end_ns > s->slice_start_ns ? s->last_round_end_ns : s->slice_start_ns;
    s->round_rounds = s->rounds;
    out->round_begins = true;
    out->round_draining = s->draining;
}

/* A round ended at now: the launches up to target have finished. */
static void round_done(struct gs_slice *s, const struct gs_slice_event *ev, uint64_t now, struct gs_slice_actions *out)
{
    uint64_t finished = ev->target > s->completed ? ev->target - s->completed : 0;
    uint64_t graphs_finished = ev->graphs - s->graphs_completed;
    double graph_time = (double)(ev->graph_ns_done - s->graph_ns_completed);
    /* A synchronization's round in the meantime took some of these
     * completions and part of the time, or some ran before the slice
     * (handed to the driver before it and not seen finish: after a lost
     * connection, say): leave the estimate alone. */
    if (s->rounds == s->round_rounds && s->completed >= s->submitted_at_grant && finished > graphs_finished &&
        now > s->round_since &&
        (double)(now - s->round_since) > graph_time)
        estimate(s, (double)(finished - graphs_finished), (double)(now - s->round_since) - graph_time);
    if (ev->target > s->completed)
        s->completed = ev->target;
    s->graphs_completed = ev->graphs;
    s->graph_ns_completed = ev->graph_ns_done;
    s->last_round_end_ns = now;
    s->rounds++;
    s->round_by_sync = false;
    s->queued_at_round_ns = queued_since_round_ns(s);
    flow_from_round(s, now);
    s->round_running = false;
    /* A round that found nothing more handed to the driver since it began
     * (nor admitted), once a drain is under way: every admitted launch has
     * finished. (A drain begun while a round runs, on a REVOKE say, ends
     * with it when that round covered everything.) */
    if ((s->round_draining || s->draining) && atomic_load(&s->submitted) == ev->target &&
        atomic_load(&s->admitted) == ev->target) {
        if (ev->tail_ns && s->state == GS_SLICE_DRAIN && atomic_load(&s->idle_since) == 0)
            atomic_fetch_add(&s->idle_ns, ev->tail_ns);
        drained(s, now, out);
    }
    if (s->state == GS_SLICE_HOLD && nothing_fits(s, now)) {
        /* The slice is over: drain now, in this drainer's next round. */
        s->drain_for_idle = false;
        begin_drain(s, now, out);
    } else if (s->state == GS_SLICE_HOLD) {
        update_budget(s, now, out);
        s->seen_empty |= held_idle(s);
    }
}

static void synced(struct gs_slice *s, const struct gs_slice_event *ev, uint64_t now, struct gs_slice_actions *out)
{
    /* The spell: the launcher adds to admitted and then reads idle_since;
     * this sets idle_since and then reads admitted, all sequentially
     * consistent. So either the launcher sees the spell and ends it, or
     * this sees the launch and takes the spell back. */
    bool spell = false;
    if (ev->idle_from && s->state == GS_SLICE_HOLD && atomic_load(&s->open) && s->captures == 0) {
        uint64_t none = 0;
        spell = atomic_compare_exchange_strong(&s->idle_since, &none, ev->idle_from);
        if (spell && atomic_load(&s->admitted) != ev->finished) {
            uint64_t mine = ev->idle_from;
            atomic_compare_exchange_strong(&s->idle_since, &mine, 0);
            spell = false;
        }
    }
    /* Graph launches are the drainer's to settle (it reads their timing),
     * and a drain is its to end. */
    if (ev->as_round && s->state == GS_SLICE_HOLD && !s->draining && ev->finished > s->completed &&
        atomic_load(&s->graphs_submitted) == s->graphs_completed) {
        uint64_t since = s->last_round_end_ns > s->slice_start_ns ? s->last_round_end_ns : s->slice_start_ns;
        if (now > since && s->completed >= s->submitted_at_grant)
            estimate(s, (double)(ev->finished - s->completed), (double)(now - since));
        s->completed = ev->finished;
        s->last_round_end_ns = now;
        s->rounds++;
        s->round_by_sync = true;
        s->queued_at_round_ns = queued_since_round_ns(s);
        flow_from_round(s, now);
        update_budget(s, now, out);
    }
    s->seen_empty |= held_idle(s);
    /* A latency tenant's slice goes back as soon as it is idle: its next
     * launch asks again, and preempts. */
    if (spell && s->yield_idle && s->state == GS_SLICE_HOLD && s->waiters == 0 && !s->draining) {
        s->drain_for_idle = true;
        begin_drain(s, now, out);
    }
}

/* When an idle spell of a held slice ends (nothing launched or running
 * for IDLE_RELEASE_NS since the last activity the machine knows of): the
 * gate thread gives the slice back then. 0 while work is queued or a
 * launch waits. */
static uint64_t idle_look_at(const struct gs_slice *s, uint64_t now)
{
    if (!held_idle(s))
        return 0;
    uint64_t idle_end = last_activity_ns(s) + IDLE_RELEASE_NS;
    return idle_end > now ? idle_end : 0;
}

/* When the gate thread must look at this GPU next: the deadline; the last
 * moment a launch still fits, when admission closes if work is still
 * queued (a budget computed earlier assumed the device keeps its pace:
 * when it slows down, this is what bounds the overrun), or the slice ends
 * if nothing is; the end of an idle spell; at most TICK_NS while a slice
 * is held or draining. */
static uint64_t next_look(const struct gs_slice *s, uint64_t now)
{
    uint64_t welcome_due = s->connecting_since && s->policy_open ? s->connecting_since + GS_SLICE_WELCOME_WAIT_NS : 0;
    if (s->state == GS_SLICE_NONE)
        return s->connected && s->waiters > 0 ? now : welcome_due;
    if (s->state == GS_SLICE_WANT)
        return welcome_due;
    uint64_t at = now + TICK_NS;
    if (s->state == GS_SLICE_HOLD) {
        uint64_t last_fit = s->kernel_ns > 0 ? s->deadline_ns - (uint64_t)s->kernel_ns : s->deadline_ns;
        uint64_t idle_end = idle_look_at(s, now);
        if (s->deadline_ns < at)
            at = s->deadline_ns > now ? s->deadline_ns : now;
        if (last_fit > now && last_fit < at)
            at = last_fit;
        if (idle_end && idle_end < at)
            at = idle_end;
        if (s->poll_at > now && s->poll_at < at)
            at = s->poll_at;
        if (s->round_owed_at && s->round_owed_at < at)
            at = s->round_owed_at > now ? s->round_owed_at : now;
        uint64_t room = room_at(s, now);
        if (room && room < at)
            at = room;
    }
    return at;
}

void gs_slice_step(struct gs_slice *s, const struct gs_slice_event *ev, uint64_t now, struct gs_slice_actions *out)
{
    out->n = 0;
    out->admitted = out->round_begins = out->round_draining = false;
    out->round_wait_until = 0;
    switch (ev->type) {
    case GS_SLICE_ADDED:
        s->connected = ev->connected;
        s->policy_open = ev->policy_open;
        s->state = GS_SLICE_NONE;
        if (!s->connected && ev->connecting)
            connecting(s, now);
        else if (!s->connected && s->policy_open)
            open_wide(s, out);
        break;
    case GS_SLICE_CONNECTING:
        if (!s->connected)
            connecting(s, now);
        break;
    case GS_SLICE_DRAINER_STARTED:
        s->drainer = true;
        break;
    case GS_SLICE_LAUNCH:
        launch(s, ev, now, out);
        break;
    case GS_SLICE_GRANT:
        grant(s, ev, now, out);
        break;
    case GS_SLICE_REVOKE:
        revoke(s, ev, now, out);
        break;
    case GS_SLICE_WELCOME:
        welcome(s, out);
        break;
    case GS_SLICE_DISCONNECTED:
        disconnected(s, ev, out);
        break;
    case GS_SLICE_TIMER:
        timer(s, now, out);
        break;
    case GS_SLICE_DRAINER_READY:
        drainer_ready(s, now, out);
        break;
    case GS_SLICE_ROUND_DONE:
        round_done(s, ev, now, out);
        break;
    case GS_SLICE_SYNCED:
        synced(s, ev, now, out);
        break;
    case GS_SLICE_CAPTURE_BEGAN:
        s->captures++;
        break;
    case GS_SLICE_CAPTURE_ENDED:
        if (s->captures > 0)
            s->captures--;
        break;
    }
    uint64_t at = next_look(s, now);
    /* The gate thread sleeps until what it planned at its last look (or
     * until a message), whatever this machine asks for meanwhile. It is
     * woken to plan again when it must look sooner: for room for a waiting
     * launch under a bound; or, by more than IDLE_LATE_NS, because the
     * held slice may be idle (a synchronization or a round found
     * everything finished: the idle release, or the moment nothing more
     * fits) or a round is owed (a launch admitted onto an empty queue,
     * whose end nothing else would see). Not for anything else (a
     * deadline with work queued: admission stops by the budget): few
     * wake-ups. Without this a program that
     * synchronized and then slept held its slice idle to the deadline,
     * when the gate thread had planned to look next. */
    if (ev->type == GS_SLICE_TIMER)
        s->gate_plan_ns = at;
    if (at && (!s->gate_plan_ns || at < s->gate_plan_ns) &&
        (at == room_at(s, now) ||
         ((held_idle(s) || s->round_owed_at) && (!s->gate_plan_ns || at + IDLE_LATE_NS < s->gate_plan_ns))))
        s->wake_gate = true;
    if (at != s->timer_at || s->wake_gate) {
        s->timer_at = at;
        emit(out, GS_SLICE_ARM_TIMER);
        out->a[out->n - 1].at = at;
        out->a[out->n - 1].wake = s->wake_gate;
        if (s->wake_gate)
            s->gate_plan_ns = at;
        s->wake_gate = false;
    }
}
