/*
 * A process's side of the protocol in the simulation: the shim's real
 * slice machine (shim/gs_slice.c), the dispatch that delivers its events
 * and carries out its actions (shim/gs_dispatch.c: the messages sent, the
 * launchers, drainers and gate thread woken, the streams forgotten) and
 * what the gate thread does with a message, a connection made or lost and
 * at each look (shim/gs_gate_messages.c), and a drainer's round as the
 * slice machine sees it (shim/gs_drain_round.c), and the ledger of its
 * leases of device memory (shim/gs_lease.c), all compiled in unchanged,
 * each process with its own gs_dispatch_state and gs_lease_state (made
 * the ones in use, gs_dispatch_use and gs_lease_use, before its shim
 * runs). What they call in the rest of
 * the shim is sim_shim_conn.c's stand-ins, onto the functions below. The
 * machines are driven the way the shim's threads drive them:
 *   - the application's launches take the machine's fast path
 *     (gs_slice_admit_fast) or, when it refuses, deliver LAUNCH and wait
 *     until the launchers are woken (gs_gate_cv), asking again;
 *   - the gate thread delivers the server's messages and, after each and
 *     at the time the machines asked for (ARM_TIMER), TIMER to every GPU;
 *     its own wake-ups are owed while it runs and given as it goes back
 *     to sleep (gs_dispatch_defer_wakeups), and it is woken to plan again
 *     for a timer before the time it sleeps until; its wake-ups come a
 *     little late, as a busy machine's do;
 *   - a drainer per GPU asks whether a round is due when woken (the
 *     drainers' condition variable: START_ROUND) or at the time it was
 *     told, reads what the round will tell as it begins, and tells it
 *     when the work handed to the driver before it has finished on the
 *     simulated GPU (gs_drain.c's loop; its events, streams and waits are
 *     the real thread's alone);
 *   - a synchronization that finds every launch finished delivers SYNCED.
 *   - an allocation takes headroom from the ledger or asks the server for
 *     what it lacks (MEM_LEASE, as gs_reserve.c does: RETRY asked again,
 *     REFUSED failing it), its answer counted by gs_gate_messages.c; a
 *     free goes back to the ledger; the gate thread's memory tick gives
 *     back idle headroom while the ledger wants one (gs_gate_thread.c).
 * Reconnection after a lost server: backoff from 50 ms to 1 s, then HELLO; once welcomed,
 * DEVICE and MEM_DECLARE for each GPU (gs_gate_messages.c).
 *
 * What it checks about the shim (besides sim_check.c's invariants):
 *   - a launch is admitted only within a slice: a grant the process holds,
 *     not revoked, before its deadline (or after it while the gate thread
 *     is late to look; then the launch is an overrun, excused), or ungated
 *     while no server answers under the `open` policy;
 *   - a RELEASE comes only once every launch admitted has finished, and as
 *     soon as it has: a drain waits for nothing the shim did not admit;
 *   - after a REVOKE, the process releases at the end of the first drain
 *     round that begins after it;
 *   - under a GRANT that bounds what is admitted ahead of the GPU (a
 *     latency tenant shares it), the process's work admitted in the slice
 *     and not finished is never more than the bound (and a quarter, for
 *     the estimate of a launch's device time) plus one launch: what a
 *     preemption waits for from this process;
 *   - a slice is not held idle: a time in it with nothing of the process
 *     on the GPU ends (a launch, the release) within IDLE_HOLD_NS, unless
 *     a launch waits or the process was stopped (its threads do not run);
 *   - the idle time a RELEASE reports is no more than the time the
 *     process had nothing on the GPU in the slice, and no less than the
 *     spells the shim was shown (from a grant found with nothing queued, or
 *     from the end of work a synchronization found finished, to the next
 *     launch or the release).
 */
#include "sim.h"

#include "gs_drain_round.h"
#include "gs_gate_messages.h"

#include <string.h>

#define LEASE_RETRY_NS (500 * US)   /* gs_reserve.c: RETRY_SLEEP_NS ... */
#define LEASE_RETRY_LIMIT 1000      /* ... and RETRY_LIMIT */
#define IDLE_TICK_NS (20 * MS)      /* gs_gate_thread.c: the memory tick */
#define IDLE_SLACK_NS 1000          /* rounding in the idle checks */
/* The longest a held slice stays idle (gs_slice.c). The shim learns of a
 * launch on the fast path (no clock there) at the gate thread's next look,
 * which is at most 5 ms away while a program keeps emptying its queue
 * (IDLE_RELEASE_NS + IDLE_LATE_NS); from that look it counts 2 ms of
 * idleness (IDLE_RELEASE_NS), seen at a look up to 3 ms later
 * (IDLE_LATE_NS): 10 ms, and each of the two looks up to GATE_LATE_NS late
 * here. A slice held idle to its deadline (5 to 50 ms here) fails it, and
 * so does a program whose last launches went unseen for one look more
 * (case idle-after-fast-launches). */
#define GATE_LATE_NS (2 * MS) /* lateness(): the most a gate thread wake-up runs late */
#define IDLE_HOLD_NS (2 * (2 * MS + 3 * MS) + 2 * GATE_LATE_NS)
/* What the estimate of a launch's device time may miss by, under a bound
 * on what is ahead: items vary by +-10 % (sim_app.c), and the estimate
 * follows the recent rounds. */
#define AHEAD_SLACK(bound) ((bound) / 4)

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

static void send(struct world *w, struct sim_proc *p, const struct gs_msg *m)
{
    if (p->conn >= 0)
        send_to_server(w, p->conn, m);
}

static uint64_t submitted(const struct shim_dev *d)
{
    return atomic_load(&d->gs->slice.submitted);
}

static bool holding(enum gs_slice_state st)
{
    return st == GS_SLICE_HOLD || st == GS_SLICE_DRAIN;
}

/* ---- held time and waits, for the figures ----------------------------------- */

/* How long tenant t's wait for GPU g has lasted, less the device time
 * that GPU spent meanwhile on work queued ungated (no server answered
 * under `open`): the server could neither know of it nor take the GPU back
 * from it, so it is not the scheduler's wait (the named case
 * waiting-behind-ungated-work). */
uint64_t wait_so_far(const struct world *w, int t, int g)
{
    uint64_t wall = w->now - w->fig.wait_since[t][g];
    uint64_t ungated = gpu_ungated_busy(w, g) - w->fig.wait_ungated_at[t][g];
    return ungated < wall ? wall - ungated : 0;
}

/* A tenant waits for a GPU while one of its processes there wants a slice
 * and none holds one; recomputed after every change of either count. */
static void wait_update(struct world *w, int t, int g)
{
    bool waiting = w->wanting[t][g] > 0 && w->holding[t][g] == 0;
    if (waiting && !w->fig.wait_since[t][g]) {
        w->fig.wait_since[t][g] = w->now;
        w->fig.wait_ungated_at[t][g] = gpu_ungated_busy(w, g);
    } else if (!waiting && w->fig.wait_since[t][g]) {
        uint64_t waited = wait_so_far(w, t, g);
        if (waited > w->fig.max_wait[t][g]) {
            w->fig.max_wait[t][g] = waited;
            uint64_t behind = w->now - w->fig.wait_since[t][g] - waited;
            trace(w, "tenant %s: waited %.3f ms for GPU %d (its longest yet)%s", w->tenant[t].name, (double)waited / 1e6,
                  g, behind ? ", not counting its time behind ungated work" : "");
        }
        w->fig.wait_since[t][g] = 0;
    }
}

static void hold_begin(struct world *w, struct sim_proc *p, int i)
{
    int t = p->tenant, g = p->dev[i].gpu;
    p->dev[i].hold_began = w->now;
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
        check_slice_held(w, t, g, held);
    }
    /* A slice is at least as long as each of its processes' holds: where
     * they overlap from slice to slice, the tenant's holds taken together
     * may never end (the named case overlapping-holds). */
    uint64_t own = w->now - p->dev[i].hold_began;
    if (own > w->fig.max_held[t][g])
        w->fig.max_held[t][g] = own;
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
        /* (a wait that began under a limit, or saw the limit change, may
         * be the limit's doing, and one with work no slice admitted on the
         * GPU may wait for that work: not counted) */
        uint64_t first = w->now - p->first_wait_start;
        if (first > p->first_wait_ns && !p->first_wait_limited && !p->first_wait_excused &&
            w->limit_changed_at[p->tenant] < p->first_wait_start) {
            p->first_wait_ns = first;
            p->longest_wait_behind = p->first_wait_behind;
        }
        p->first_wait_start = 0;
    }
}

/* The figures follow the machine's state. */
static void state_changed(struct world *w, struct sim_proc *p, int i, enum gs_slice_state before)
{
    enum gs_slice_state after = p->dev[i].gs->slice.state;
    if (after == before)
        return;
    if (before == GS_SLICE_WANT)
        want_end(w, p, i);
    if (holding(before) && !holding(after))
        hold_end(w, p, i);
    if (!holding(before) && holding(after))
        hold_begin(w, p, i);
    if (after == GS_SLICE_WANT)
        want_begin(w, p, i);
}

/* ---- delivering events ---------------------------------------------------- */

static void plan_gate(struct world *w, struct sim_proc *p);
static void memory_tick(struct world *w, struct sim_proc *p);

/* A slice held with nothing of the process on the GPU ends its spell (a
 * launch, the release): it was not held idle for long. Not while a launch
 * waited, nor while the process was stopped (its threads do not run). */
static void idle_hold_ends(struct world *w, struct sim_proc *p, int i, const char *how)
{
    struct shim_dev *d = &p->dev[i];
    if (d->busy || d->waiting || !d->held_grant)
        return;
    uint64_t from = d->empty_since > d->slice_sent ? d->empty_since : d->slice_sent;
    if (p->continued_at > from)
        from = p->continued_at;
    if (w->now > from && w->now - from > IDLE_HOLD_NS)
        fail(w, "proc %d held GPU %d idle for %.3f ms before %s (nothing of it on the GPU, no launch waiting): "
             "over %.0f ms", p->id, d->gpu, (double)(w->now - from) / 1e6, how, (double)IDLE_HOLD_NS / 1e6);
}

/* RELEASE: what the checks know of a slice given back. */
static void released(struct world *w, struct sim_proc *p, int i, const struct gs_msg_release *a)
{
    struct shim_dev *d = &p->dev[i];
    bool more = a->flags & GS_RELEASE_MORE;
    uint64_t left = submitted(d) - d->done;
    if (left > 0)
        fail(w, "proc %d released GPU %d (grant %llu) with %llu of its launches still on it", p->id, d->gpu,
             (unsigned long long)a->grant, (unsigned long long)left);
    idle_hold_ends(w, p, i, "its release");
    uint64_t due = d->drain_began > d->seen_done ? d->drain_began : d->seen_done;
    if (w->now > due)
        fail(w, "proc %d's drain on GPU %d released %.3f ms after the work it admitted had finished: it waited "
             "for something else", p->id, d->gpu, (double)(w->now - due) / 1e6);
    uint64_t from = d->empty_since > d->slice_sent ? d->empty_since : d->slice_sent;
    uint64_t truly = d->true_idle + (!d->busy && w->now > from ? w->now - from : 0);
    uint64_t known = d->known_idle + (d->known_since ? w->now - d->known_since : 0);
    if (a->idle_ns > truly + IDLE_SLACK_NS)
        fail(w, "proc %d's RELEASE on GPU %d claims %.3f ms idle; it had nothing on the GPU for %.3f ms of the slice",
             p->id, d->gpu, (double)a->idle_ns / 1e6, (double)truly / 1e6);
    if (a->idle_ns + IDLE_SLACK_NS < known)
        fail(w, "proc %d's RELEASE on GPU %d reports %.3f ms idle; the shim saw spells of %.3f ms", p->id, d->gpu,
             (double)a->idle_ns / 1e6, (double)known / 1e6);
    const struct gs_slice *s = &d->gs->slice;
    trace(w, "proc %d gpu %d: RELEASE grant %llu idle %.3f ms%s (launches %llu in the slice, %.3f ms each, %.3f ms left)",
          p->id, d->gpu, (unsigned long long)a->grant, (double)a->idle_ns / 1e6, more ? " more" : "",
          (unsigned long long)(atomic_load(&s->admitted) - s->admitted_at_grant), s->kernel_ns / 1e6,
          ((double)s->deadline_ns - (double)w->now) / 1e6);
    d->held_grant = 0;
    d->revoked = false;
    d->known_since = 0;
}

/* The process whose shim runs: gs_dispatch.c's and gs_lease.c's states in
 * use are its own, and the stand-ins act on it. Set by shim_enter before each step of a
 * process's shim (the simulation has one thread: no lock). */
struct sim_proc *shim_current;

static void shim_enter(struct sim_proc *p)
{
    if (shim_current != p) {
        shim_current = p;
        gs_dispatch_use(&p->shim);
        gs_lease_use(&p->lease);
    }
}

/* Around the shim's steps of p's machines (gs_dispatch.c's, and
 * gs_gate_messages.c's through it): what the checks know of each before,
 * and the figures after. */
static void steps_begin(struct world *w, struct sim_proc *p)
{
    shim_enter(p);
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        d->step_before = d->gs->slice.state;
        if (d->step_before != GS_SLICE_DRAIN)
            d->drain_began = w->now; /* a RELEASE in this step ends a drain begun in it */
    }
}

static void steps_end(struct world *w, struct sim_proc *p)
{
    for (int i = 0; i < p->ngpus; i++)
        state_changed(w, p, i, p->dev[i].step_before);
}

/* One step of GPU number i's machine, and its actions carried out by the
 * shim's dispatch (shim/gs_dispatch.c), as the thread that delivers it
 * (the gate thread's wake-ups are owed: gate_wakes). */
static struct gs_slice_actions deliver(struct world *w, struct sim_proc *p, int i, const struct gs_slice_event *ev)
{
    steps_begin(w, p);
    struct gs_slice_actions out;
    gs_dispatch_locked(p->dev[i].gs, ev, w->now, &out);
    steps_end(w, p);
    return out;
}

/* What the shim's stand-ins do (sim_shim_conn.c). */

static int dev_of(const struct sim_proc *p, const struct gs_dev *gd)
{
    for (int i = 0; i < p->ngpus; i++)
        if (p->dev[i].gs == gd)
            return i;
    return -1;
}

/* DEVICE for gd, once per connection (gs_conn_declare_locked). */
void shim_declares(struct world *w, struct sim_proc *p, struct gs_dev *gd)
{
    int i = dev_of(p, gd);
    if (i < 0 || p->conn < 0 || (p->declared & (1u << gd->slot)))
        return;
    struct gs_msg dev = {.type = GS_MSG_DEVICE};
    dev.u.device.slot = (uint32_t)gd->slot;
    dev.u.device.uuid[0] = (uint8_t)(p->dev[i].gpu + 1);
    memcpy(dev.u.device.uuid + 1, "simulated-gpu", 13);
    send(w, p, &dev);
    p->declared |= 1u << gd->slot;
}

/* A message about gd, sent once welcomed, its GPU declared first
 * (gs_conn_send_about_locked); a RELEASE is checked whether or not it
 * goes out. gd NULL: about no GPU (gs_conn_send_locked), sent while a
 * connection is open. */
int shim_sends(struct world *w, struct sim_proc *p, struct gs_dev *gd, const struct gs_msg *m)
{
    int i = gd ? dev_of(p, gd) : -1;
    if (i >= 0 && m->type == GS_MSG_RELEASE)
        released(w, p, i, &m->u.release); /* checked, then sent */
    if (gd ? !connected(p) : p->conn < 0)
        return -1;
    if (gd)
        shim_declares(w, p, gd);
    send(w, p, m);
    return 0;
}

void shim_wake_launchers(struct world *w, struct sim_proc *p)
{
    for (int i = 0; i < p->ngpus; i++)
        if (p->dev[i].waiting)
            app_admitted(w, p, i); /* it asks again */
}

void shim_wake_drainers(struct world *w, struct sim_proc *p)
{
    (void)w;
    for (int i = 0; i < p->ngpus; i++)
        p->dev[i].drainer_poked = true; /* each asks once the waking thread lets go */
}

/* ---- the gate thread's timer ------------------------------------------------- */

static uint64_t lateness(struct world *w)
{
    /* a thread woken at its deadline runs a little later, now and then
     * milliseconds later */
    return rng_chance(&w->rng, w->late_wakes) ? rng_range(&w->rng, 100 * US, GATE_LATE_NS) : rng_range(&w->rng, 0, 80 * US);
}

/* The gate thread plans its next look: the earliest time a machine asked. */
static void plan_gate(struct world *w, struct sim_proc *p)
{
    shim_enter(p);
    uint64_t due = gs_gate_next_look_locked();
    if (due == UINT64_MAX)
        due = 0;
    if (due == p->gate_due)
        return;
    p->gate_due = due;
    p->gate_at = due ? (due > w->now ? due : w->now) + lateness(w) : 0;
    shim_schedule(w, p);
}

/* Until when the sleeping gate thread sleeps (gs_dispatch.c wakes it for
 * a timer before that): its next look, or until woken. */
static void gate_sleeps_until(struct sim_proc *p)
{
    shim_enter(p);
    gs_dispatch_gate_sleeps_until_locked(p->gate_due ? p->gate_due : UINT64_MAX);
}

/* The gate thread was woken: for a timer before the time it sleeps until,
 * it plans again (its look comes then); for the lease ledger's tick
 * armed, it wakes (shim_timer). Running, it ticks as it sleeps. */
void shim_wake_gate(struct world *w, struct sim_proc *p)
{
    if (p->gate_running)
        return;
    plan_gate(w, p);
    gate_sleeps_until(p);
    if (gs_lease_tick_wanted() && (!p->mem_tick_at || p->mem_tick_at > w->now)) {
        p->mem_tick_at = w->now + lateness(w); /* it wakes, looks and ticks if due */
        shim_schedule(w, p);
    }
}

/* The gate thread runs: until it sleeps again its wake-ups are owed, and
 * no timer wakes it. */
static void gate_wakes(struct sim_proc *p)
{
    shim_enter(p);
    p->gate_running = true;
    gs_dispatch_gate_sleeps_until_locked(0);
    gs_dispatch_defer_wakeups(true);
}

/* ... and it sleeps: until its next look (UINT64_MAX: until woken), once
 * it gave the wake-ups it owed and ticked (memory_tick). */
static void gate_sleeps(struct world *w, struct sim_proc *p)
{
    plan_gate(w, p);
    shim_enter(p);
    unsigned owed = gs_dispatch_owed_locked(GS_OWED_LAUNCHERS | GS_OWED_DRAINERS);
    gate_sleeps_until(p);
    gs_dispatch_defer_wakeups(false);
    p->gate_running = false;
    gs_dispatch_give_owed(owed);
    memory_tick(w, p);
}

/* The gate thread looks (gs_gate_look_locked: every machine hears that
 * time passed), and it plans again and sleeps. */
static void gate_looks(struct world *w, struct sim_proc *p)
{
    gate_wakes(p);
    p->gate_due = p->gate_at = 0;
    steps_begin(w, p);
    gs_gate_look_locked(w->now);
    steps_end(w, p);
    gate_sleeps(w, p);
}

/* ---- the drainers -------------------------------------------------------------- */

static void drainer_asks(struct world *w, struct sim_proc *p, int i);

/* The round of GPU number i ended: its work up to the round's target has
 * finished, and the drainer tells so (gs_drain_round.c; no idle tail: a
 * simulated drainer sees the end at once). */
static void round_ends(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    d->round = false;
    steps_begin(w, p);
    gs_drain_round_done_locked(d->gs, &d->round_reading, 0, w->now);
    steps_end(w, p);
    if (d->revoked && d->held_grant && d->round_began >= d->revoked_at && connected(p))
        fail(w, "proc %d got REVOKE of grant %llu on GPU %d at %.6f s; a drain round that began after it ended "
             "without the release", p->id, (unsigned long long)d->held_grant, d->gpu, (double)d->revoked_at / 1e9);
}

/* The drainer of GPU number i asks whether a round is due, and runs it
 * (gs_drain.c's loop, its waits simulated). */
static void drainer_asks(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    for (int guard = 0; guard < 8 && !d->round && !w->failed; guard++) {
        steps_begin(w, p);
        struct gs_drain_ask ask = gs_drain_round_ask_locked(d->gs, w->now);
        steps_end(w, p);
        if (!ask.begins) {
            d->drainer_at = ask.wait_until;
            return;
        }
        /* a simulated launch is handed to the driver as it is admitted */
        if (ask.draining && !gs_drain_round_handed(d->gs))
            fail(w, "proc %d: a drain round on GPU %d began with a launch admitted but not handed to the driver",
                 p->id, d->gpu);
        d->round = true;
        d->round_began = w->now;
        d->round_reading = gs_drain_round_reading(d->gs);
        if (d->done < d->round_reading.target)
            return; /* it ends when the GPU finishes the target (shim_item_done) */
        round_ends(w, p, i);
    }
    if (!d->round)
        d->drainer_at = w->now + 1; /* asked again at once: look again a moment later */
}

/* Drainers woken by the steps just taken ask now (their thread takes the
 * lock once the waking thread has let go of it). */
static void run_drainers(struct world *w, struct sim_proc *p)
{
    for (int pass = 0; pass < 4; pass++) {
        bool any = false;
        for (int i = 0; i < p->ngpus && !w->failed; i++) {
            struct shim_dev *d = &p->dev[i];
            if (!d->drainer_poked)
                continue;
            d->drainer_poked = false;
            if (!d->round) {
                d->drainer_at = 0;
                drainer_asks(w, p, i);
                any = true;
            }
        }
        if (!any)
            return;
    }
}

/* ---- the application's side --------------------------------------------------- */

/* A launch admitted on GPU number i: whether it was within a slice. */
static enum shim_admit launched(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    const struct gs_slice *s = &d->gs->slice;
    if (!d->busy) {
        uint64_t from = d->empty_since > d->slice_sent ? d->empty_since : d->slice_sent;
        if (w->now > from)
            d->true_idle += w->now - from;
        d->busy = true;
    }
    if (d->known_since) {
        d->known_idle += w->now - d->known_since;
        d->known_since = 0;
    }
    if (!s->connected) {
        if (!s->policy_open)
            fail(w, "proc %d: a launch on GPU %d admitted with no server under the wait policy", p->id, d->gpu);
        return SHIM_UNGATED;
    }
    if (!d->held_grant) {
        fail(w, "proc %d: a launch on GPU %d admitted outside any slice (the shim is in %s)", p->id, d->gpu,
             gs_slice_state_name(s->state));
        return SHIM_GATED;
    }
    if (d->revoked) {
        fail(w, "proc %d: a launch on GPU %d admitted %.3f ms after the REVOKE of its slice", p->id, d->gpu,
             (double)(w->now - d->revoked_at) / 1e6);
        return SHIM_GATED;
    }
    if (d->slice_ahead) {
        /* FIFO: what went to the driver before the slice finishes first. */
        uint64_t first = d->submitted_at_grant > d->done ? d->submitted_at_grant : d->done;
        uint64_t unfinished = submitted(d) - first;
        uint64_t longest = p->item_len + p->item_len / 10; /* sim_app.c's spread */
        uint64_t bound = d->slice_ahead + AHEAD_SLACK(d->slice_ahead) + longest;
        if (unfinished * longest > bound && unfinished > 1)
            fail(w, "proc %d: a launch on GPU %d admitted with %llu of its launches of the slice unfinished (%.3f ms "
                 "of device time at most), over its GRANT's bound of %.3f ms ahead (and a quarter, and one launch): a "
                 "preemption would wait for them",
                 p->id, d->gpu, (unsigned long long)unfinished, (double)(unfinished * longest) / 1e6,
                 (double)d->slice_ahead / 1e6);
    }
    if (w->now > d->held_deadline) {
        /* No clock on the fast path: until the gate thread looks, a launch
         * within the budget goes through. An overrun, not the slice's. */
        if (p->gate_due && p->gate_due <= d->held_deadline)
            return SHIM_OVERRUN;
        fail(w, "proc %d: a launch on GPU %d admitted %.3f ms past its slice's deadline, the gate thread not due "
             "to look until %.3f ms past it", p->id, d->gpu, (double)(w->now - d->held_deadline) / 1e6,
             p->gate_due ? ((double)p->gate_due - (double)d->held_deadline) / 1e6 : -1.0);
    }
    return SHIM_GATED;
}

enum shim_admit shim_launch(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    struct gs_slice *s = &d->gs->slice;
    bool admitted;
    if (!d->waiting && gs_slice_admit_fast(s)) {
        if (atomic_load(&s->idle_since) != 0)
            gs_slice_end_idle(s, w->now);
        admitted = true;
    } else {
        struct gs_slice_event ev = {.type = GS_SLICE_LAUNCH, .retry = d->waiting};
        admitted = deliver(w, p, i, &ev).admitted;
    }
    enum shim_admit kind = SHIM_WAIT;
    if (!d->waiting) /* (the time a launch waits is not idle) */
        idle_hold_ends(w, p, i, admitted ? "its next launch" : "a launch that waits");
    if (admitted) {
        d->waiting = false;
        atomic_fetch_add(&s->submitted, 1); /* handed to the driver */
        kind = launched(w, p, i);
    } else {
        d->waiting = true;
    }
    run_drainers(w, p);
    shim_schedule(w, p);
    return kind;
}

void shim_item_done(struct world *w, struct sim_proc *p, int i, uint64_t submitted_at)
{
    (void)submitted_at;
    struct shim_dev *d = &p->dev[i];
    d->done++;
    d->last_done = w->now;
    if (d->done == submitted(d)) {
        d->busy = false;
        d->empty_since = w->now;
    }
    if (p->stopped) {
        /* its drainer sees it when the process runs again (shim_timer) */
        p->shim_at = 0;
        post(w, w->now, EV_SHIM, p->id, ++p->shim_gen);
        return;
    }
    d->seen_done = w->now;
    if (d->round && d->done >= d->round_reading.target) {
        round_ends(w, p, i);
        drainer_asks(w, p, i);
    }
    run_drainers(w, p);
    shim_schedule(w, p);
}

/* The application synchronized and found its work finished (cuCtxSynchronize
 * or cuStreamSynchronize returning): what gs_idle.c tells the machine. */
void shim_synced(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    struct gs_slice *s = &d->gs->slice;
    uint64_t admitted = atomic_load(&s->admitted);
    if (!atomic_load(&s->open) || atomic_load(&s->idle_since) != 0 || submitted(d) != admitted ||
        s->state != GS_SLICE_HOLD)
        return; /* not a spell gs_idle.c can be sure of */
    if (!d->known_since)
        d->known_since = w->now;
    struct gs_slice_event ev = {.type = GS_SLICE_SYNCED, .finished = admitted, .idle_from = w->now,
                                .as_round = admitted > s->admitted_at_grant};
    deliver(w, p, i, &ev);
    run_drainers(w, p);
    shim_schedule(w, p);
}

/* ---- memory (shim/gs_lease.c's ledger, as gs_reserve.c asks it) --------------- */

/* The gate thread's memory tick (gs_gate_thread.c, memory_tick), as it
 * goes to sleep: at most every IDLE_TICK_NS, the headroom of a GPU that
 * saw no allocation or free since the last tick goes back; while the
 * ledger wants another, the thread wakes for it (and looks, as at every
 * wake: shim_timer). */
static void memory_tick(struct world *w, struct sim_proc *p)
{
    shim_enter(p);
    uint64_t planned = p->mem_tick_at;
    if (w->now >= p->mem_tick_after) {
        p->mem_tick_after = w->now + IDLE_TICK_NS;
        gs_lease_tick_disarm();
        if (gs_lease_give_idle())
            gs_lease_tick_arm();
    }
    p->mem_tick_at = gs_lease_tick_wanted() ? p->mem_tick_after + lateness(w) : 0;
    if (p->mem_tick_at != planned)
        shim_schedule(w, p);
}

/* The allocation waiting on GPU number i is done (ok) or refused. */
static void reserved(struct world *w, struct sim_proc *p, int i, bool ok)
{
    p->dev[i].lease_wait = false;
    app_alloc_done(w, p, -1, ok);
}

/* One pass of gs_reserve.c's loop for the allocation waiting on GPU
 * number i: the ledger's headroom, or with no server under `open` the
 * bytes counted without it, or a MEM_LEASE for what the ledger lacks
 * (answered in leased). Without a connection it waits for the next
 * WELCOME, as gs_rpc.c's request does. */
static void reserve(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    shim_enter(p);
    uint64_t need = 0, want = 0;
    for (;;) {
        d->lease_tries++;
        if (gs_lease_take_headroom(d->gs, d->lease_need, &need, &want)) {
            reserved(w, p, i, true);
            return;
        }
        if (p->conn >= 0 || !shim_policy_open(w, p))
            break;
        /* uncounted; declared on reconnecting */
        if (!gs_lease_granted_uncounted(d->gs, need))
            break;
        w->over_cap_excused[p->tenant] = true;
    }
    if (!connected(p))
        return;
    struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
    m.u.lease.slot = (uint32_t)d->slot;
    m.u.lease.id = ++d->lease_id;
    m.u.lease.need = need;
    m.u.lease.want = want;
    d->lease_out = true;
    d->lease_asked = need;
    d->lease_sent = w->now;
    send(w, p, &m);
}

void shim_alloc(struct world *w, struct sim_proc *p, int i, uint64_t bytes, int which)
{
    (void)which; /* the application knows which allocation waits */
    struct shim_dev *d = &p->dev[i];
    d->lease_wait = true;
    d->lease_need = bytes;
    d->lease_tries = 0;
    reserve(w, p, i);
}

void shim_free(struct world *w, struct sim_proc *p, int i, int which)
{
    shim_enter(p);
    gs_lease_give_at(p->dev[i].gs, p->allocs[which], w->now);
}

/* MEM_LEASED for GPU number i's lease arrived (gs_conn_answer_arrived_locked),
 * and the gate thread counted a grant (gs_gate_messages.c): what
 * gs_reserve.c does with it. A grant of what was needed is taken from the
 * headroom at once (a recall may have taken it meanwhile: then it asks
 * again); RETRY, or less than needed, asks again in LEASE_RETRY_NS, up to
 * LEASE_RETRY_LIMIT leases; REFUSED, or past that, fails the
 * allocation. */
static void leased(struct world *w, struct sim_proc *p, int i)
{
    struct shim_dev *d = &p->dev[i];
    const struct gs_msg_mem_leased *r = &d->lease_answer.msg.u.leased;
    d->lease_answer.done = false;
    uint64_t from = d->lease_sent > p->continued_at ? d->lease_sent : p->continued_at;
    if (w->now - from > LEASE_ANSWER_NS)
        fail(w, "proc %d's MEM_LEASE on GPU %d was answered %.1f ms after it went out (over %.0f ms)", p->id, d->gpu,
             (double)(w->now - from) / 1e6, (double)LEASE_ANSWER_NS / 1e6);
    if (!d->lease_wait)
        return;
    if (r->status == GS_LEASE_GRANTED && r->granted >= d->lease_asked)
        reserve(w, p, i);
    else if ((r->status == GS_LEASE_RETRY || r->status == GS_LEASE_GRANTED) && d->lease_tries < LEASE_RETRY_LIMIT)
        d->lease_retry_at = w->now + LEASE_RETRY_NS; /* asked again then (shim_timer) */
    else
        reserved(w, p, i, false);
}

/* An answer arrived (gs_conn_answer_arrived_locked): the entry of the
 * lease of p's it answers, done, or NULL. */
struct gs_answer *shim_answer_arrived(struct sim_proc *p, uint64_t id, const struct gs_msg *m)
{
    if (m->type != GS_MSG_MEM_LEASED)
        return NULL;
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        if (!d->lease_out || id != d->lease_id)
            continue;
        d->lease_out = false;
        d->lease_answer = (struct gs_answer){.id = id, .done = true, .dev = d->gs, .msg = *m};
        return &d->lease_answer;
    }
    return NULL;
}

uint64_t shim_count(const struct sim_proc *p, int i)
{
    if (p->app == APP_SCRIPT)
        return p->dev[i].script_counted;
    return gs_lease_counted_in(&p->lease, p->dev[i].slot);
}

uint64_t shim_held(const struct sim_proc *p, int i)
{
    return gs_lease_held_in(&p->lease, p->dev[i].slot);
}

void shim_connection_ends(struct sim_proc *p)
{
    if (p->end_noted)
        return;
    p->end_noted = true;
    for (int i = 0; i < p->ngpus; i++)
        p->dev[i].counted_at_close = shim_count(p, i);
}

/* ---- messages ------------------------------------------------------------------ */

static int dev_of_slot(const struct sim_proc *p, uint32_t slot)
{
    for (int i = 0; i < p->ngpus; i++)
        if ((uint32_t)p->dev[i].slot == slot)
            return i;
    return -1;
}

/* A GRANT the shim handled (held_before: it held that slice before):
 * what the checks know of the slice. */
static void granted(struct world *w, struct sim_proc *p, const struct gs_msg *m, uint64_t sent, bool held_before)
{
    int i = dev_of_slot(p, m->u.grant.slot);
    if (i < 0)
        return;
    struct shim_dev *d = &p->dev[i];
    struct gs_slice *s = &d->gs->slice;
    if (s->state != GS_SLICE_HOLD || s->grant != m->u.grant.grant)
        return; /* not taken: given back already, or not asked for */
    if (!held_before) {
        d->slice_ahead = m->u.grant.ahead_ns;
        d->submitted_at_grant = submitted(d);
        d->held_grant = s->grant;
        d->revoked = false;
        d->slice_sent = sent;
        d->true_idle = d->known_idle = 0;
        check_grant_arrived(w, p, d->gpu, s->grant, sent);
        /* a spell from the grant's sending, if the shim knows nothing of
         * this process is on the GPU, and not before the round that
         * showed it so (work run unthrottled may finish after the send) */
        bool known_empty = d->done == submitted(d) && s->completed >= submitted(d) &&
                           atomic_load(&s->admitted) == submitted(d);
        uint64_t shown = sent > s->last_round_end_ns ? sent : s->last_round_end_ns;
        d->known_since = known_empty ? shown : 0;
    }
    else if (!m->u.grant.ahead_ns || m->u.grant.ahead_ns > d->slice_ahead)
        d->slice_ahead = d->slice_ahead ? m->u.grant.ahead_ns : 0; /* the most it was bounded to; unbounded
                                                                      for a while: unchecked until the next */
    d->held_deadline = s->deadline_ns;
    trace(w, "proc %d gpu %d: %s grant %llu until +%.3f ms%s", p->id, d->gpu, held_before ? "extended" : "holds",
          (unsigned long long)s->grant, ((double)s->deadline_ns - (double)w->now) / 1e6,
          m->u.grant.ahead_ns ? ", bounded ahead" : "");
}

/* The gate thread reads a message: the shim's own handling
 * (gs_gate_messages.c), and around it what the checks know and what the
 * allocations waiting for a lease do. */
void shim_receive(struct world *w, struct sim_proc *p, const struct gs_msg *m, uint64_t sent)
{
    gate_wakes(p);
    bool held_before = false;
    int i = m->type == GS_MSG_GRANT || m->type == GS_MSG_REVOKE ? dev_of_slot(p, m->u.grant.slot) : -1;
    if (i >= 0 && m->type == GS_MSG_GRANT) {
        const struct gs_slice *s = &p->dev[i].gs->slice;
        held_before = holding(s->state) && s->grant == m->u.grant.grant;
    }
    if (i >= 0 && m->type == GS_MSG_REVOKE) {
        struct shim_dev *d = &p->dev[i];
        if (d->held_grant && d->held_grant == m->u.grant.grant && !d->revoked) {
            d->revoked = true;
            d->revoked_at = w->now;
            trace(w, "proc %d gpu %d: REVOKE of grant %llu (in %s)", p->id, d->gpu, (unsigned long long)d->held_grant,
                  gs_slice_state_name(d->gs->slice.state));
        }
    }
    steps_begin(w, p);
    gs_gate_handle_locked(m, w->now, sent);
    steps_end(w, p);
    for (int k = 0; k < p->ngpus; k++)
        if (p->dev[k].lease_answer.done)
            leased(w, p, k); /* its requester wakes */
    switch (m->type) {
    case GS_MSG_WELCOME:
        p->backoff = 50 * MS;
        for (int k = 0; k < p->ngpus; k++) {
            struct shim_dev *d = &p->dev[k];
            if (d->lease_wait && !d->lease_out)
                reserve(w, p, k);
        }
        break;
    case GS_MSG_GRANT:
        granted(w, p, m, sent, held_before);
        break;
    case GS_MSG_ERROR:
        trace(w, "proc %d: connection closed: %s", p->id, m->u.error.reason);
        shim_disconnected(w, p);
        break;
    default:
        break;
    }
    /* the gate thread read it, and looks at every GPU before it sleeps */
    if (p->conn >= 0)
        gate_looks(w, p);
    else if (p->gate_running)
        gate_sleeps(w, p);
    run_drainers(w, p);
    shim_schedule(w, p);
}

/* ---- the connection ------------------------------------------------------------ */

/* The connection is lost (gs_conn_lost_locked): the requests waiting
 * for an answer are lost with it. */
void shim_conn_lost(struct sim_proc *p)
{
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        if (d->lease_out)
            p->lease_lost = true; /* the server may have granted it */
        d->lease_out = false; /* lost with the connection: asked again */
    }
}

/* Connects and sends HELLO (gs_conn_connect_locked): false if no server
 * answers. */
bool shim_connects(struct world *w, struct sim_proc *p)
{
    p->conn = server_connect(w, p->id);
    p->welcomed = false;
    p->declared = 0;
    if (p->conn < 0) {
        shim_conn_lost(p);
        return false;
    }
    p->conn_gen++;
    trace(w, "proc %d: connected (conn %d), counting %llu (held %llu)", p->id, p->conn,
          (unsigned long long)shim_count(p, 0), (unsigned long long)shim_held(p, 0));
    struct gs_msg hello = {.type = GS_MSG_HELLO};
    hello.u.hello.pid = (uint32_t)(1000 + p->id);
    send(w, p, &hello);
    return true;
}

/* The gate thread finds the connection lost (gs_gate_lost_locked): what
 * the checks know of the slices ends with it. */
static void lost(struct world *w, struct sim_proc *p, const char *why)
{
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        d->held_grant = 0;
        d->revoked = false;
        d->known_since = 0;
    }
    steps_begin(w, p);
    gs_gate_lost_locked(why, w->now);
    steps_end(w, p);
}

/* The gate thread connects (gs_gate_connect_locked), with backoff. */
static void connect_now(struct world *w, struct sim_proc *p)
{
    steps_begin(w, p);
    bool connected = gs_gate_connect_locked(w->now);
    steps_end(w, p);
    if (!connected) {
        p->next_try = w->now + p->backoff;
        p->backoff = p->backoff * 2 > 1000 * MS ? 1000 * MS : p->backoff * 2;
    }
}

void shim_start(struct world *w, struct sim_proc *p)
{
    p->conn = -1;
    p->backoff = 50 * MS;
    struct gs_slice_event added = {.type = GS_SLICE_ADDED, .connected = false, .connecting = true,
                                   .policy_open = shim_policy_open(w, p)};
    struct gs_slice_event drainer = {.type = GS_SLICE_DRAINER_STARTED};
    for (int i = 0; i < p->ngpus; i++) {
        /* the GPU's first use (gs_lookup.c), then its drainer's start */
        struct shim_dev *d = &p->dev[i];
        d->gs->used = true;
        d->gs->slot = d->slot;
        d->empty_since = w->now;
        deliver(w, p, i, &added);
        deliver(w, p, i, &drainer);
    }
    gate_wakes(p);
    connect_now(w, p);
    gate_looks(w, p);
    shim_schedule(w, p);
}

void shim_disconnected(struct world *w, struct sim_proc *p)
{
    if (p->conn < 0)
        return;
    shim_connection_ends(p);
    p->conn = -1;
    p->welcomed = false;
    /* what it has on the GPUs is no slice's the next server knows */
    gpu_excuse(w, p->id);
    gate_wakes(p); /* the gate thread finds the connection closed */
    lost(w, p, "the server closed the connection");
    p->next_try = w->now + p->backoff;
    gate_looks(w, p);
    run_drainers(w, p);
}

void shim_gone(struct world *w, struct sim_proc *p)
{
    for (int i = 0; i < p->ngpus; i++) {
        enum gs_slice_state st = p->dev[i].gs->slice.state;
        if (holding(st))
            hold_end(w, p, i);
        if (st == GS_SLICE_WANT)
            want_end(w, p, i);
    }
}

void shim_schedule(struct world *w, struct sim_proc *p)
{
    uint64_t at = UINT64_MAX;
    if (p->conn < 0)
        at = p->next_try;
    if (p->gate_at && p->gate_at < at)
        at = p->gate_at;
    for (int i = 0; i < p->ngpus; i++) {
        const struct shim_dev *d = &p->dev[i];
        if (d->seen_done < d->last_done) /* finished while the process was stopped: its drainer sees it */
            at = w->now;
        if (!d->round && d->drainer_at && d->drainer_at < at)
            at = d->drainer_at;
        if (d->lease_wait && !d->lease_out && connected(p) && d->lease_retry_at < at)
            at = d->lease_retry_at;
    }
    if (p->mem_tick_at && p->mem_tick_at < at)
        at = p->mem_tick_at;
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
    if (p->conn < 0 && w->now >= p->next_try) {
        gate_wakes(p);
        connect_now(w, p);
        gate_looks(w, p);
    }
    if (p->gate_at && w->now >= p->gate_at)
        gate_looks(w, p);
    for (int i = 0; i < p->ngpus; i++) {
        struct shim_dev *d = &p->dev[i];
        if (d->seen_done < d->last_done) { /* finished while the process was stopped */
            d->seen_done = w->now;
            if (d->round && d->done >= d->round_reading.target) {
                round_ends(w, p, i);
                drainer_asks(w, p, i);
            }
        }
        if (!d->round && d->drainer_at && w->now >= d->drainer_at) {
            d->drainer_at = 0;
            drainer_asks(w, p, i);
        }
        if (d->lease_wait && !d->lease_out && connected(p) && w->now >= d->lease_retry_at)
            reserve(w, p, i);
    }
    if (p->mem_tick_at && w->now >= p->mem_tick_at) {
        p->mem_tick_at = 0;
        gate_looks(w, p); /* it ticks as it sleeps again */
    }
    run_drainers(w, p);
    shim_schedule(w, p);
}
