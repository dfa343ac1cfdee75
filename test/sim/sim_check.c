/*
 * The invariants of a run, checked as it goes, and its figures at the end.
 *
 * After every event:
 *   - never two tenants' work on one GPU at once (work the server cannot
 *     know of is excused: queued while no server answered under `open`,
 *     or in flight when a connection or an overdue slice was lost);
 *   - no GRANT to a client that is gone or for a slot that names no GPU
 *     or does not hold that grant at the server, and no GPU held or
 *     reserved for a tenant none of whose processes names it;
 *   - a lease granted bytes leaves its tenant within its cap;
 *   - an honest tenant's memory count never above its cap (unless a
 *     configuration change lowered the cap, or it allocated uncounted
 *     under `open`), and equal to what its processes count whenever no
 *     message that changes counts is on its way;
 *   - virtual times finite, no action lost for want of room;
 *   - a latency tenant that is due on a GPU a batch tenant holds (it waits
 *     there, its limit lets it, the holder has passed it in virtual time
 *     and nothing waiting there is ahead of it) holds the GPU within what
 *     the preemption waits for: each of the holder's processes' bound on
 *     work ahead (a quarter more for the estimate) and one item, one
 *     after another, and the messages and looks of a handoff
 *     (LATENCY_SLACK_NS). Not where the holder is hostile or stopped, a
 *     GRANT of its slice gave no bound, or the run stalls (a SIGSTOP, a
 *     server restart, a hung holder);
 *   - while a latency tenant names a GPU, each process holding a batch
 *     slice there has a bound on work ahead in its slice machine within
 *     BOUND_NOTICE_NS, also when the slice began before the latency tenant
 *     named the GPU (not a hostile or stopped holder, not where the run
 *     stalls).
 *   - a MEM_LEASE is answered within LEASE_ANSWER_NS (the recovery after a
 *     restart, and the messages around it) while its process runs and its
 *     connection lasts (checked at the answer, sim_shim.c, and at the
 *     end for one still unanswered);
 *   - a lease is refused only where the tenant's processes on the GPU
 *     hold, with what the asker needs, more than the cap (checked as the
 *     server refuses: check_lease_refused).
 * At the end:
 *   - clean runs: busy tenants' shares of device time within 0.5 points
 *     (or the case's share_tolerance) of their weights (or, where the end cuts a round short, within the
 *     lag a fair queue allows: 1 - its weight's part of one of its
 *     slices, and its weight's part of one slice of each other tenant),
 *     counting as a tenant's the idle its slices' GRANTs left on their
 *     way that the scheduler charged it for (check_slice_held);
 *   - hostile runs: the two honest tenants' ratio within 1.5 points (the
 *     hostile ones take slices between theirs, so each gets fewer), or
 *     within one slice of the exact split where they get few slices;
 *   - limits hold in held time (one slice of slack at the window's ends);
 *   - no honest tenant waited for its GPU longer than the bound of its
 *     GPU (below), where nothing stopped the world meanwhile (a wait less
 *     the device time spent meanwhile on work queued ungated: wait_so_far);
 *   - every gang progressed;
 *   - a tenant coming back after a pause waited no longer for its first
 *     slice than the bound.
 */
#include "sim.h"

#include <math.h>
#include <stdio.h>

#define SHARE_TOLERANCE 0.005
/* What the scheduler refunds of the idle a slice's holders claim
 * (tokenserver/sched.c, end_slice): 1/32 of what was held, and of a slice
 * a preemption cut short up to PREEMPTED_REFUND_NS. The check takes the
 * larger for every slice, so that what it credits (check_slice_held) is
 * never more than what was charged. */
#define REFUND_PART (1.0 / 32)
#define REFUND_LEAST_NS (125 * US)
#define PAIR_TOLERANCE 0.015
#define DRAIN_SLACK_NS (10 * MS)   /* a drain, the handoff, the messages */
/* A preemption's messages and looks, over the drain itself: the REVOKE, the
 * RELEASE and the GRANT (each up to 3 ms late in the simulated transport),
 * the server's timer when the holder passes the latency tenant (up to
 * 2 ms late), and the holder's gate thread and drainer rounds (a round
 * every millisecond, each look up to 2 ms late). */
#define LATENCY_SLACK_NS (15 * MS)
/* A batch holder is bounded this soon after a latency tenant names its
 * GPU: the server's GRANT on its way (up to 3 ms late in the simulated
 * transport), and room for a DECLARE and a GRANT crossing. */
#define BOUND_NOTICE_NS (8 * MS)
/* A gang pays for its gathering (the GPUs kept for it), so its turns come
 * later the more its GPUs are shared: what is checked is that it always
 * comes, within this. */
#define GANG_PROGRESS_NS (5000 * MS)

void check_submit(struct world *w, int g, const struct sim_proc *p, bool excused)
{
    if (excused)
        return;
    int other = gpu_tenant_in_flight(w, g, p->tenant);
    if (other >= 0)
        fail(w, "GPU %d: tenant %s's process %d submits while tenant %s's work is still on the GPU", g,
             w->tenant[p->tenant].name, p->id, w->tenant[other].name);
}

void check_sent(struct world *w, const struct sim_conn *c, const struct gs_msg *m)
{
    if (m->type == GS_MSG_GRANT) {
        const struct gs_msg_grant *g = &m->u.grant;
        if (!c->open)
            fail(w, "a GRANT to conn %d, which is closed", (int)(c - w->conn));
        else if (g->slot >= GS_MAX_DEVICES || !c->client.slots[g->slot].device)
            fail(w, "a GRANT for a slot that names no GPU");
        else if (c->client.slots[g->slot].holds != g->grant)
            fail(w, "a GRANT of grant %llu to conn %d slot %u, which the server has holding %llu",
                 (unsigned long long)g->grant, (int)(c - w->conn), g->slot,
                 (unsigned long long)c->client.slots[g->slot].holds);
    } else if (m->type == GS_MSG_MEM_LEASED) {
        /* (a lease of nothing may be granted to a tenant its processes'
         * declarations after a restart put over its cap) */
        const struct gs_msg_mem_leased *l = &m->u.leased;
        if (l->status == GS_LEASE_GRANTED && l->granted > 0 && l->cap && l->used > l->cap)
            fail(w, "a lease of %llu bytes granted to conn %d, leaving its tenant at %llu, over its cap of %llu",
                 (unsigned long long)l->granted, (int)(c - w->conn), (unsigned long long)l->used,
                 (unsigned long long)l->cap);
    }
}

/* What tenant t's processes count on GPU g: those connected and
 * welcomed (a process declares what it holds when its WELCOME comes,
 * gs_gate_messages.c), and those the server keeps a count for without a
 * connection, or before it declares on its next (ghosted: the process
 * lives on, and what it counted when its connection closed is still on
 * the GPU; a ghosted process that dies is in flight, EV_PROCESS_GONE, until
 * the server's check sees it gone). -1 where the server may rightly count
 * otherwise: a ghosted process allocated uncounted under `open`, or more of
 * the tenant's processes are ghosted than an entry keeps (MEM_GHOSTS), or
 * a process's connection closed while a lease's answer was on its way (the
 * server counts what it granted, which the process never heard of, until
 * the process declares what it holds on its next connection: it counts
 * over, never under). */
static int64_t truth(const struct world *w, int t, int g)
{
    int64_t sum = 0;
    int ghosts = 0;
    for (int i = 0; i < w->nprocs; i++) {
        const struct sim_proc *p = &w->proc[i];
        if (p->tenant != t || !p->alive || ((p->conn < 0 || !p->welcomed) && !p->ghosted))
            continue;
        if (p->ghosted && (w->over_cap_excused[t] || ++ghosts > MEM_GHOSTS))
            return -1;
        if (p->lease_lost)
            return -1;
        for (int k = 0; k < p->ngpus; k++)
            if (p->dev[k].gpu == g)
                sum += (int64_t)(p->ghosted ? p->dev[k].counted_at_close : shim_count(p, k));
    }
    return sum;
}

/* ---- a latency tenant due on a batch tenant's slice --------------------------------- */

/* Whether process p holds the slice on GPU g that d runs now. */
static bool holds_slice(const struct sim_proc *p, const struct device *d, int g)
{
    for (int k = 0; k < p->ngpus; k++)
        if (p->dev[k].gpu == g && p->dev[k].held_grant == d->grant)
            return p->alive && d->holder && (int)d->holder->tenant->index == p->tenant;
    return false;
}

/* What preempting the slice on GPU g waits for: each process of the holder
 * tenant that holds the slice keeps at most its GRANT's bound on work
 * ahead (and a quarter more, for the estimate) and one item on the GPU,
 * one after another. UINT64_MAX where that is not promised: a holder
 * process hostile or stopped, a GRANT of the slice with no bound, or work
 * on the GPU of a process that does not hold the slice (queued where no
 * slice the server knows of held it: a connection lost, the server down
 * under `open`; a holder's own such work too, whatever its slice admits
 * now). */
static uint64_t preemption_bound(const struct world *w, const struct device *d, int g)
{
    const struct sim_gpu *gpu = &w->gpu[g];
    for (int k = 0; k < gpu->n; k++) {
        const struct item *it = &gpu->q[(gpu->head + k) % SIM_QUEUE];
        /* (an item queued outside any slice is no slice's: one of a holder
         * that launched it while its connection was lost, before this
         * slice, included) */
        if (it->excused || !holds_slice(&w->proc[it->proc], d, g))
            return UINT64_MAX;
    }
    uint64_t sum = 0;
    for (int i = 0; i < w->nprocs; i++) {
        const struct sim_proc *p = &w->proc[i];
        if (!holds_slice(p, d, g))
            continue;
        for (int k = 0; k < p->ngpus; k++) {
            const struct shim_dev *sd = &p->dev[k];
            if (sd->gpu != g)
                continue;
            if (p->stopped || p->hostile != H_NONE || sd->slice_ahead == 0)
                return UINT64_MAX;
            sum += sd->slice_ahead + sd->slice_ahead / 4 + p->item_len;
        }
    }
    return sum;
}

/* Whether d's slice is a batch tenant's outside any gang: one a latency
 * tenant may preempt, and whose holders it bounds. */
static bool batch_slice(const struct world *w, const struct device *d)
{
    return d->holder && !d->gang_start && d->holder->tenant->config.class != CLASS_LATENCY &&
           !w->tenant[d->holder->tenant->index].gang;
}

/* Whether a latency tenant is due on d: one waits there and its limit lets
 * it, the holder is a batch tenant outside any gang and has passed it in
 * virtual time (charged up to now), and no other tenant waiting there is
 * ahead of it (ties go to the latency tenant). */
static bool latency_due(const struct world *w, const struct device *d, uint64_t now)
{
    if ((d->state != DEV_RUNNING && d->state != DEV_REVOKING) || !batch_slice(w, d))
        return false;
    const struct device_tenant *h = d->holder;
    double holder_vtime = h->vtime;
    if (now > d->charged_until)
        holder_vtime += (double)(now - d->charged_until) / h->tenant->config.share;
    double latency = INFINITY, batch = INFINITY;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt == h || dt->waiting == 0 || dt->eligible_at > now)
            continue;
        /* one that has not paid for its preemptions waits as batch does */
        double *least = dt->tenant->config.class == CLASS_LATENCY && sched_may_preempt(dt) ? &latency : &batch;
        if (dt->vtime < *least)
            *least = dt->vtime;
    }
    return latency <= batch && latency <= holder_vtime;
}

static void check_latency_due(struct world *w)
{
    const struct sim_server *sv = &w->server;
    for (int g = 0; g < w->ngpus; g++) {
        const struct device *d = sv->gpus[g];
        uint64_t *since = &w->fig.latency_due_since[g], *bound = &w->fig.latency_due_bound[g];
        if (w->stalls || !d || !latency_due(w, d, w->now)) {
            if (*since) {
                w->fig.latency_due_waits++;
                if (w->now - *since > w->fig.latency_due_max)
                    w->fig.latency_due_max = w->now - *since;
            }
            *since = 0;
            continue;
        }
        uint64_t drain = preemption_bound(w, d, g);
        if (drain == UINT64_MAX) {
            *since = 0; /* not promised: looked at again from the next slice */
            continue;
        }
        if (!*since) {
            *since = w->now;
            *bound = 0;
        }
        if (drain + LATENCY_SLACK_NS > *bound)
            *bound = drain + LATENCY_SLACK_NS;
        if (w->now - *since > *bound) {
            for (int k = 0; k < w->gpu[g].n; k++) {
                const struct item *it = &w->gpu[g].q[(w->gpu[g].head + k) % SIM_QUEUE];
                trace(w, "GPU %d queue %d: proc %d %.3f ms%s submitted %.6f started %.6f", g, k, it->proc,
                      (double)it->len / 1e6, it->excused ? " excused" : "", (double)it->submitted / 1e9,
                      (double)it->started / 1e9);
            }
            fail(w, "GPU %d: a latency tenant has been due for %.1f ms while tenant %s holds it, over the %.1f ms "
                    "its preemption may take", g, (double)(w->now - *since) / 1e6, d->holder->tenant->name,
                 (double)*bound / 1e6);
            return;
        }
    }
}

/* Whether a process holding d's batch slice has no bound on work ahead
 * in its slice machine while a latency tenant names d (for
 * BOUND_SETTLE_NS: it bounds holders from then on) and may preempt
 * (sched_may_preempt). Not a holder that
 * is hostile or stopped, nor a gang's or a latency tenant's slice. */
static bool batch_holder_unbounded(const struct world *w, const struct device *d, int g)
{
    if (d->state != DEV_RUNNING || !batch_slice(w, d))
        return false;
    bool named = false;
    for (size_t i = 0; i < d->ntenants && !named; i++)
        named = d->tenants[i].refs > 0 && d->tenants[i].tenant->config.class == CLASS_LATENCY &&
                w->now >= d->tenants[i].named_since + BOUND_SETTLE_NS && sched_may_preempt(&d->tenants[i]);
    if (!named)
        return false;
    for (int i = 0; i < w->nprocs; i++) {
        const struct sim_proc *p = &w->proc[i];
        if (!holds_slice(p, d, g) || p->stopped || p->hostile != H_NONE)
            continue;
        for (int k = 0; k < p->ngpus; k++)
            if (p->dev[k].gpu == g && p->dev[k].held_grant == d->grant && p->dev[k].gs->slice.ahead_ns == 0)
                return true;
    }
    return false;
}

static void check_holder_bounded(struct world *w)
{
    const struct sim_server *sv = &w->server;
    for (int g = 0; g < w->ngpus; g++) {
        const struct device *d = sv->gpus[g];
        uint64_t *since = &w->fig.unbounded_since[g];
        if (w->stalls || !d || !batch_holder_unbounded(w, d, g)) {
            *since = 0;
            continue;
        }
        if (!*since)
            *since = w->now;
        if (w->now - *since > BOUND_NOTICE_NS) {
            fail(w, "GPU %d: a latency tenant names it, and a process of tenant %s has held its slice without a "
                    "bound on work ahead for %.1f ms (over %.1f ms)",
                 g, d->holder->tenant->name, (double)(w->now - *since) / 1e6, (double)BOUND_NOTICE_NS / 1e6);
            return;
        }
    }
}

void check_after_step(struct world *w)
{
    struct sim_server *sv = &w->server;
    if (!sv->up)
        return;
    check_latency_due(w);
    if (w->failed)
        return;
    check_holder_bounded(w);
    if (w->failed)
        return;
    /* Counts change only with the events that carry memory messages (and
     * closes): look after those, and at virtual times now and then. */
    if (!w->mem_changed && (w->fig.events & 255) != 0)
        return;
    bool quiet = w->mem_in_flight == 0;
    if (quiet)
        w->mem_changed = false;
    /* No GPU is kept for a tenant none of whose processes names it. */
    for (int g = 0; g < w->ngpus; g++) {
        const struct device *d = sv->gpus[g];
        if (!d || d->state == DEV_IDLE || !d->holder)
            continue;
        bool named = false;
        for (size_t i = 0; i < d->nslots && !named; i++)
            named = d->slots[i]->tenant == d->holder->tenant;
        if (!named) {
            fail(w, "GPU %d is %s for tenant %s, none of whose processes names it", g,
                 d->state == DEV_RESERVED ? "reserved" : "held", d->holder->tenant->name);
            return;
        }
    }
    for (int g = 0; g < w->ngpus; g++) {
        const struct device *d = sv->gpus[g];
        if (!d)
            continue;
        for (size_t i = 0; i < d->ntenants; i++) {
            const struct device_tenant *dt = &d->tenants[i];
            int t = (int)dt->tenant->index;
            const struct tenant_plan *tp = &w->tenant[t];
            if (!isfinite(dt->vtime) || dt->vtime < -1e-3) {
                fail(w, "tenant %s's virtual time on GPU %d is %g", tp->name, g, dt->vtime);
                return;
            }
            if (tp->hostile)
                continue;
            uint64_t cap = tp->config.memory;
            if (cap && dt->mem_used > cap && !tp->cap_lowered && !w->over_cap_excused[t]) {
                fail(w, "tenant %s counts %llu bytes on GPU %d, over its cap of %llu", tp->name,
                     (unsigned long long)dt->mem_used, g, (unsigned long long)cap);
                return;
            }
            int64_t counted = quiet ? truth(w, t, g) : -1;
            if (counted >= 0 && dt->mem_used != (uint64_t)counted) {
                fail(w, "tenant %s: the server counts %llu bytes on GPU %d, its processes %lld", tp->name,
                     (unsigned long long)dt->mem_used, g, (long long)counted);
                return;
            }
        }
    }
}

static bool uses_gpu(const struct world *w, int t, int g)
{
    for (int i = 0; i < w->nprocs; i++)
        if (w->proc[i].tenant == t && w->proc[i].dev[0].gpu == g)
            return true;
    return false;
}

/* How long an honest tenant may wait for GPU g, in turns of the others
 * there. Its last slice (its quantum, or longer if it overran or was
 * extended) put it ahead by that much device time over its weight: the
 * others may use as much, by their weights, before it is next; and each
 * may be a slice into its own turn then (its quantum, or its longest
 * slice, and a drain). */
static uint64_t turns_bound(const struct world *w, int t, int g)
{
    uint64_t bound = 0;
    double others = 0;
    for (int u = 0; u < w->ntenants; u++) {
        if (u == t || !uses_gpu(w, u, g))
            continue;
        others += w->tenant[u].share_most; /* the most it had (config changes) */
        /* its slice: its quantum, or its longest (an overrun: the items
         * it admitted take longer than their estimate); a hostile one
         * may hold its slice until the grace period takes it back */
        uint64_t quantum = w->tenant[u].quantum_most;
        uint64_t slice = w->fig.max_held[u][g] > quantum ? w->fig.max_held[u][g] : quantum;
        bound += slice + DRAIN_SLACK_NS + (w->tenant[u].hostile ? 250 * MS : 0);
        /* a gang's ranks may be left waiting in a collective for a peer
         * (its drain then ends at the grace period, or when the collective
         * times out) */
        if (w->tenant[u].gang)
            bound += 250 * MS + 100 * MS;
    }
    const struct tenant_plan *mine = &w->tenant[t];
    /* the server charges from when it sent the grant to when the release
     * was sent: the messages' delays (a few ms at worst) too */
    uint64_t last = (w->fig.max_held[t][g] > mine->quantum_most ? w->fig.max_held[t][g] : mine->quantum_most) + 5 * MS;
    return bound + (uint64_t)((double)last * others / mine->share_least);
}

/* The bound on tenant t's wait for GPU g: its turns there, and the slice
 * running when it asked. Where gangs are, each gang's gathering may keep
 * the GPU for it meanwhile, bounded by the longest slice anywhere and the grace
 * period a drain may take; a gang itself is checked for progress. */
static uint64_t wait_bound(const struct world *w, int t, int g)
{
    uint64_t longest = 0;
    unsigned gangs = 0;
    for (int u = 0; u < w->ntenants; u++) {
        if (w->tenant[u].quantum_most > longest)
            longest = w->tenant[u].quantum_most;
        gangs += w->tenant[u].gang;
    }
    if (w->tenant[t].gang)
        return GANG_PROGRESS_NS;
    uint64_t bound = turns_bound(w, t, g) + longest + DRAIN_SLACK_NS;
    /* each gang's gathering, a drain to its grace */
    bound += gangs * (2 * (longest + DRAIN_SLACK_NS) + 250 * MS);
    return bound;
}

void check_grant_arrived(struct world *w, const struct sim_proc *p, int g, uint64_t grant, uint64_t sent)
{
    int t = p->tenant;
    if (w->fig.grant_last[t][g] == grant)
        return; /* another of its processes had it first */
    w->fig.grant_last[t][g] = grant;
    w->fig.grant_transit[t][g] = w->now - sent;
}

/* The GPU sat idle while the slice's GRANT was on its way: the slice's
 * tenant is charged for that (docs/design/scheduler.md, "What is charged": a GRANT that
 * takes longer to reach the process stays the tenant's) beyond the
 * refund, and the shares at the end count it as the tenant's. */
void check_slice_held(struct world *w, int t, int g, uint64_t held)
{
    uint64_t transit = w->fig.grant_transit[t][g];
    w->fig.grant_transit[t][g] = 0;
    if (w->now < w->warmup)
        return;
    uint64_t refund = (uint64_t)((double)(transit + held) * REFUND_PART);
    if (refund < REFUND_LEAST_NS)
        refund = REFUND_LEAST_NS;
    if (transit > refund)
        w->fig.grant_idle_charged[t][g] += transit - refund;
}

/* A lease is refused only where the tenant's processes on the GPU hold
 * too much: what they allocated, with the asker's allocation, is over the
 * cap. Headroom a process keeps is the tenant's to lend: the server
 * recalls it before it refuses. Not judged where the server cannot know
 * what the processes hold: a message that changes a count of the tenant
 * on its way, a process of it stopped, disconnected, unwelcomed, counted
 * as a ghost or dead with its connection still open at the server, a cap
 * lowered, allocations uncounted under `open`,
 * hostile tenants, scripted processes (they run no shim). */
void check_lease_refused(struct world *w, const struct sim_proc *p, int g, uint64_t need)
{
    int t = p->tenant;
    const struct tenant_plan *tp = &w->tenant[t];
    uint64_t cap = tp->config.memory;
    if (!cap || tp->hostile || tp->cap_lowered || w->over_cap_excused[t] || w->mem_in_flight_of[t] > 0)
        return;
    /* a process of the tenant that died while the server still has its
     * connection (its close on its way): its count is still the server's */
    for (int k = 0; k < w->nconns; k++)
        if (w->conn[k].open && w->conn[k].tenant == t && !w->proc[w->conn[k].proc].alive)
            return;
    uint64_t held = 0, asked = need;
    for (int k = 0; k < w->nprocs; k++) {
        const struct sim_proc *q = &w->proc[k];
        if (q->tenant != t || (!q->alive && !q->ghosted))
            continue;
        for (int j = 0; j < q->ngpus; j++) {
            const struct shim_dev *d = &q->dev[j];
            if (d->gpu != g || (!q->started && !shim_held(q, j)))
                continue;
            if (q->app == APP_HOSTILE || q->app == APP_SCRIPT || q->stopped || q->conn < 0 || !q->welcomed ||
                q->ghosted || q->lease_lost)
                return;
            held += shim_held(q, j);
            if (q == p)
                asked = d->lease_need;
        }
    }
    if (held + asked <= cap)
        fail(w, "proc %d's lease on GPU %d refused: its tenant's processes there hold %llu bytes and it needs %llu, "
             "within the cap of %llu (the rest is headroom the server did not get back)", p->id, g,
             (unsigned long long)held, (unsigned long long)asked, (unsigned long long)cap);
}

void check_end(struct world *w)
{
    /* a lease still unanswered has waited no longer than one may */
    for (int i = 0; i < w->nprocs && w->server.up; i++) {
        const struct sim_proc *p = &w->proc[i];
        for (int k = 0; k < p->ngpus && p->alive && !p->stopped && p->conn >= 0; k++) {
            const struct shim_dev *d = &p->dev[k];
            uint64_t from = d->lease_sent > p->continued_at ? d->lease_sent : p->continued_at;
            if (d->lease_out && w->now - from > LEASE_ANSWER_NS) {
                fail(w, "proc %d's MEM_LEASE on GPU %d has waited %.1f ms for its answer (over %.0f ms)", p->id,
                     d->gpu, (double)(w->now - from) / 1e6, (double)LEASE_ANSWER_NS / 1e6);
                return;
            }
        }
    }
    /* held time still running counts up to the end */
    for (int t = 0; t < w->ntenants; t++)
        for (int g = 0; g < w->ngpus; g++)
            if (w->holding[t][g])
                w->fig.held[t][g] += w->now - w->holding_since[t][g];
    if (w->clean) {
        /* device time and the idle of slow GRANTs charged as held
         * (check_slice_held) */
        double weights = 0, busy = 0, got_ns[SIM_MAX_TENANTS];
        for (int t = 0; t < w->ntenants; t++) {
            weights += w->tenant[t].config.share;
            got_ns[t] = (double)(w->gpu[0].busy_tenant[t] - w->busy_at_warmup[0][t]) +
                        (double)w->fig.grant_idle_charged[t][0];
            busy += got_ns[t];
        }
        double tolerance = w->share_tolerance > 0 ? w->share_tolerance : SHARE_TOLERANCE;
        for (int t = 0; t < w->ntenants && busy > 0; t++) {
            double got = got_ns[t] / busy;
            double want = w->tenant[t].config.share / weights;
            /* within 0.5 points, or, where the run's end cuts a round
             * short, within the lag a fair queue allows over an interval
             * (docs/design/scheduler.md, "How close to the weights"): for each other tenant u, the
             * difference of their device times over their weights is at
             * most a slice of each over its weight, so t's device time is
             * off its weight's part of the whole by at most
             *   (1 - want) * its slice + want * the others' slices */
            double off_ns = fabs(got - want) * busy;
            double others_round = 0;
            for (int u = 0; u < w->ntenants; u++)
                if (u != t)
                    others_round += (double)(w->tenant[u].config.quantum_ns + DRAIN_SLACK_NS);
            double own_slice = (double)(w->tenant[t].config.quantum_ns + DRAIN_SLACK_NS);
            double lag_ns = (1 - want) * own_slice + want * others_round;
            if (fabs(got - want) > tolerance && off_ns > lag_ns) {
                fail(w, "clean run: tenant %s got %.2f %% of the device time, its weight is %.2f %%",
                     w->tenant[t].name, 100 * got, 100 * want);
                return;
            }
        }
    }
    if (w->honest_pair) {
        int a = w->honest_a, b = w->honest_b;
        double ba = (double)(w->gpu[0].busy_tenant[a] - w->busy_at_warmup[0][a]);
        double bb = (double)(w->gpu[0].busy_tenant[b] - w->busy_at_warmup[0][b]);
        double sa = w->tenant[a].config.share, sb = w->tenant[b].config.share;
        /* within 1.5 points, or, where the hostile tenants leave the pair
         * few slices, within one slice of the exact split (as for clean
         * runs) */
        double off = ba + bb > 0 ? fabs(ba / (ba + bb) - sa / (sa + sb)) : 0;
        uint64_t quantum = w->tenant[a].config.quantum_ns > w->tenant[b].config.quantum_ns
                               ? w->tenant[a].config.quantum_ns : w->tenant[b].config.quantum_ns;
        if (off > PAIR_TOLERANCE && off * (ba + bb) > (double)(quantum + DRAIN_SLACK_NS)) {
            double ha = (double)w->fig.held[a][0], hb = (double)w->fig.held[b][0];
            fail(w, "hostile run: the honest tenants split %.2f/%.2f, their weights %.2f/%.2f (held %.2f/%.2f)",
                 100 * ba / (ba + bb), 100 * bb / (ba + bb), 100 * sa / (sa + sb), 100 * sb / (sa + sb),
                 100 * ha / (ha + hb), 100 * hb / (ha + hb));
            return;
        }
    }
    /* limits, in held time */
    for (int t = 0; t < w->ntenants; t++) {
        const struct tenant_plan *tp = &w->tenant[t];
        if (tp->config.limit >= 1.0 || w->limit_changed[t])
            continue;
        for (int g = 0; g < w->ngpus; g++) {
            uint64_t held = w->fig.held[t][g];
            if (tp->hostile) {
                held = 0;
                for (int i = 0; i < w->nprocs; i++)
                    if (w->proc[i].tenant == t && w->proc[i].dev[0].gpu == g && w->proc[i].hostile == H_LIAR)
                        held += w->proc[i].held_ns;
            }
            /* the last slice's overrun is paid for after the run */
            uint64_t last = w->fig.max_held[t][g] > tp->config.quantum_ns ? w->fig.max_held[t][g] : tp->config.quantum_ns;
            uint64_t allowed = (uint64_t)(tp->config.limit * (double)w->end) + last + DRAIN_SLACK_NS;
            if (held > allowed) {
                fail(w, "tenant %s held GPU %d %.3f s of %.3f s, over its limit %g", tp->name, g, (double)held / 1e9,
                     (double)w->end / 1e9, tp->config.limit);
                return;
            }
        }
    }
    if (w->stalls)
        return;
    /* waits, gangs, returning tenants */
    for (int t = 0; t < w->ntenants; t++) {
        const struct tenant_plan *tp = &w->tenant[t];
        if (tp->hostile || tp->config.limit < 1.0 || w->limit_changed[t])
            continue; /* a limit holds it back by design (its own check above) */
        for (int g = 0; g < w->ngpus; g++) {
            uint64_t waited = w->fig.max_wait[t][g];
            if (w->fig.wait_since[t][g] && wait_so_far(w, t, g) > waited)
                waited = wait_so_far(w, t, g);
            uint64_t bound = wait_bound(w, t, g);
            if (waited > bound) {
                fail(w, "tenant %s waited %.1f ms for GPU %d, over the bound of %.1f ms", tp->name,
                     (double)waited / 1e6, g, (double)bound / 1e6);
                return;
            }
        }
        if (tp->gang) {
            uint64_t busy = 0;
            for (int g = 0; g < w->ngpus; g++)
                busy += w->gpu[g].busy_tenant[t];
            /* Its ranks run collectives only while all of them live (an
             * NCCL communicator): it is promised its turn once all have
             * been up for GANG_PROGRESS_NS together. A rank killed sooner
             * leaves a gang that may never have run (a rank killed 0.28 s
             * after the last one started). */
            uint64_t all_up = 0, first_death = w->now;
            for (int i = 0; i < w->nprocs; i++) {
                const struct sim_proc *p = &w->proc[i];
                if (p->tenant != t)
                    continue;
                if (p->start_at > all_up)
                    all_up = p->start_at;
                if (p->died_at && p->died_at < first_death)
                    first_death = p->died_at;
            }
            if (busy == 0 && first_death >= all_up + GANG_PROGRESS_NS) {
                fail(w, "gang %s never ran", tp->name);
                return;
            }
        }
    }
    for (int i = 0; i < w->nprocs; i++) {
        const struct sim_proc *p = &w->proc[i];
        int g = p->dev[0].gpu;
        /* (first_wait_ns counts only the waits no limit had a say in:
         * one that began under a limit, or saw the limit change, may be
         * the limit's doing, sim_shim.c) */
        if (!p->returning || !p->first_wait_ns || w->tenant[p->tenant].hostile)
            continue;
        /* a process of a tenant of several may also wait out its own
         * tenant's slice, which it could not join once it drained */
        /* its tenant's slice, which it could not join once it was being
         * drained: a quantum, and the drain of all its siblings queued */
        uint64_t drain = 0;
        for (int k = 0; k < w->nprocs; k++) {
            const struct sim_proc *q = &w->proc[k];
            if (q->tenant == p->tenant && q->dev[0].gpu == g)
                drain += q->item_len * (uint64_t)q->depth; /* one GPU, one after another */
        }
        /* and where its own work of the burst before was still queued,
         * behind its siblings', that work's drain first (the named case
         * returning-behind-own-work: 15 processes of one tenant, its items
         * of 20 ms each behind 240 ms of theirs) */
        if (p->longest_wait_behind)
            drain *= 2;
        uint64_t bound = wait_bound(w, p->tenant, g) + w->tenant[p->tenant].config.quantum_ns + drain + DRAIN_SLACK_NS;
        if (p->first_wait_ns > bound) {
            fail(w, "proc %d came back after a pause and waited %.1f ms for its first slice, over %.1f ms", p->id,
                 (double)p->first_wait_ns / 1e6, (double)bound / 1e6);
            return;
        }
    }
}
