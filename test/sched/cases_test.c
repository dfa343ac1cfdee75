/*
 * Regression cases for the scheduler's state machine (tokenserver/sched.c,
 * with sched_prepare.c, memory.c and histogram.c), one function per bug a
 * review of it found. Each case drives sched_step through a hand-written
 * sequence of events on a virtual clock, carries out the actions the steps
 * leave, and asserts on what it measured: device time held (the entries'
 * used_ns), the grants each process received, the state of a GPU, the time
 * a GPU was granted to nobody while a process waited for it.
 *
 * The harness (world_*, and the process helpers below it) plays both the
 * server's dispatch and the shims:
 *   - a GPU's SET_TIMER is kept, and world_run_until fires the timers in
 *     order of time, moving the clock to each;
 *   - a GRANT is counted for the process it goes to;
 *   - a REVOKE to a busy process is drained at once: it releases with
 *     GS_RELEASE_MORE at the same instant (it always has more work); a
 *     process that is not busy releases only when its case says so.
 * Nothing is random and nothing reads a clock: a case replays exactly.
 *
 * Usage: sched_cases_test [CASE...]   runs the cases numbered (all if none)
 * and exits 1 if any check failed.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/protocol.h"
#include "sched.h"

#define MS 1000000ull
#define START_NS (1000 * MS)  /* the virtual clock's start */
#define GRACE_NS (250 * MS)   /* the server's default --grace-ms */
#define QUANTUM_NS (20 * MS)  /* every tenant's quantum here */
#define MAX_GPUS 4
#define MAX_TENANTS 6
#define MAX_PROCESSES 8
#define MAX_RELEASES 64
#define CAP_GRANT_SLACK_NS (2 * MS) /* run_until_granted's step, and a timer's */

/* ---- checks ---------------------------------------------------------------------- */

/* Checks that failed, over all cases (main's exit status). Only main's
 * thread runs. */
static unsigned failures;

/* Prints one check's outcome: what it checks and what was measured. */
__attribute__((format(printf, 3, 4))) static void check(bool ok, const char *which, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s %s: ", ok ? "ok  " : "FAIL", which);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!ok)
        failures++;
}

static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

/* ---- the world: GPUs, tenants, processes, and a clock ------------------------------- */

/* One process (a shim's client): one slot per GPU it may name, slot k for
 * the world's GPU k, as a client embeds GS_MAX_DEVICES slots. */
struct process {
    struct sched_slot slots[GS_MAX_DEVICES];
    bool busy;                          /* always has work: drains a REVOKE at once
                                           and asks again */
    unsigned grants[MAX_GPUS];          /* GRANT actions it received (extensions and
                                           joins included) */
    uint64_t last_grant_ns[MAX_GPUS];   /* when the last of them came */
    uint64_t last_ahead_ns[MAX_GPUS];   /* and the bound it carried (ahead_ns) */
    uint64_t last_deadline[MAX_GPUS];   /* and its deadline */
    unsigned notices[MAX_GPUS];         /* of them, GRANTs for a new bound alone */
    uint64_t last_notice_ns[MAX_GPUS];  /* when the last of those came */
    uint64_t least_notice_gap[MAX_GPUS]; /* the least time between two of them */
    uint64_t waited_ns[MAX_GPUS];       /* time it spent asking for the GPU */
    uint64_t asked_ns[MAX_GPUS];        /* when it last asked (ACQUIRE, or RELEASE
                                           with more) */
    unsigned grants_asked[MAX_GPUS];    /* grants it had received then */
};

struct world {
    struct sched s;
    uint64_t now;
    struct device gpus[MAX_GPUS];
    unsigned ngpus;
    uint64_t timer_at[MAX_GPUS];        /* the TIMER each GPU asked for; 0 none */
    uint64_t unheld_wait_ns[MAX_GPUS];  /* time no process held the GPU while one
                                           waited for it */
    struct sched_tenant tenants[MAX_TENANTS];
    unsigned ntenants;
    struct process procs[MAX_PROCESSES];
    unsigned nprocs;
    size_t ndeclared;                   /* slots declared, all GPUs */
    struct sched_slot *to_release[MAX_RELEASES]; /* busy holders revoked, to drain */
    size_t nto_release;
    uint32_t lease_status;              /* the last LEASED answer: enum gs_lease_status */
    uint64_t lease_granted;             /* and the bytes it granted */
};

static unsigned gpu_number(const struct world *w, const struct device *d)
{
    return (unsigned)(d - w->gpus);
}

static struct world *world_new(void)
{
    struct world *w = calloc(1, sizeof *w);
    if (!w) {
        perror("calloc");
        exit(2);
    }
    sched_init(&w->s, GRACE_NS);
    w->now = START_NS;
    return w;
}

/* Frees what the scheduler allocated for the world, and the world. */
static void world_free(struct world *w)
{
    for (unsigned i = 0; i < w->ngpus; i++)
        sched_device_remove(&w->s, &w->gpus[i]);
    free(w->s.actions);
    free(w);
}

static struct device *world_gpu(struct world *w)
{
    struct device *d = &w->gpus[w->ngpus];
    d->uuid[0] = (uint8_t)(++w->ngpus);
    sched_device_add(&w->s, d, w->now);
    return d;
}

/* A batch tenant with the given share, no limit, gang = auto. */
static struct sched_tenant *world_tenant(struct world *w, const char *name, double share)
{
    struct sched_tenant *t = &w->tenants[w->ntenants];
    t->name = name;
    t->index = w->ntenants++;
    t->config.share = share;
    t->config.limit = 1.0;
    t->config.quantum_ns = QUANTUM_NS;
    t->config.gang = GANG_AUTO;
    t->config.class = CLASS_BATCH;
    return t;
}

static struct process *world_process(struct world *w, struct sched_tenant *t, bool busy)
{
    struct process *p = &w->procs[w->nprocs];
    p->busy = busy;
    for (uint32_t k = 0; k < GS_MAX_DEVICES; k++) {
        p->slots[k].owner = p;
        p->slots[k].number = k;
        p->slots[k].pid = 100 + w->nprocs;
        p->slots[k].tenant = t;
    }
    w->nprocs++;
    return p;
}

/* Whether a process holds d's current grant. */
static bool gpu_held(const struct world *w, const struct device *d)
{
    if (d->state != DEV_RUNNING && d->state != DEV_REVOKING)
        return false;
    for (unsigned i = 0; i < w->nprocs; i++) {
        const struct sched_slot *slot = &w->procs[i].slots[gpu_number(w, d)];
        if (slot->device == d && slot->holds == d->grant)
            return true;
    }
    return false;
}

/* Counts [now, until) in the waits of the processes and GPUs. */
static void world_account(struct world *w, uint64_t until)
{
    uint64_t span = until - w->now;
    for (unsigned g = 0; g < w->ngpus; g++) {
        bool waited = false;
        for (unsigned i = 0; i < w->nprocs; i++) {
            struct sched_slot *slot = &w->procs[i].slots[g];
            if (slot->device && slot->wants) {
                w->procs[i].waited_ns[g] += span;
                waited = true;
            }
        }
        if (waited && !gpu_held(w, &w->gpus[g]))
            w->unheld_wait_ns[g] += span;
    }
}

/* Notes that p asks for GPU g now, for run_until_granted. */
static void asks(const struct world *w, struct process *p, unsigned g)
{
    p->asked_ns[g] = w->now;
    p->grants_asked[g] = p->grants[g];
}

/* Runs one event now and carries out its actions, then drains what busy
 * holders were asked to give back (each a step of its own, at the same
 * instant). */
static void world_step(struct world *w, struct sched_event ev)
{
    sched_step(&w->s, &ev, w->now);
    for (size_t i = 0; i < w->s.nactions; i++) {
        const struct sched_action *a = &w->s.actions[i];
        /* what the process receives, through the server's own translation */
        struct gs_msg m;
        if (sched_wire_message(a, 0, &m)) {
            struct process *p = a->slot->owner;
            unsigned g = gpu_number(w, a->slot->device);
            if (m.type == GS_MSG_GRANT) {
                p->grants[g]++;
                p->last_grant_ns[g] = w->now;
                p->last_ahead_ns[g] = m.u.grant.ahead_ns;
                p->last_deadline[g] = m.u.grant.deadline_ns;
                if (a->notice) {
                    uint64_t gap = w->now - p->last_notice_ns[g];
                    if (p->notices[g]++ && (!p->least_notice_gap[g] || gap < p->least_notice_gap[g]))
                        p->least_notice_gap[g] = gap;
                    p->last_notice_ns[g] = w->now;
                }
            } else if (m.type == GS_MSG_REVOKE && p->busy) {
                if (w->nto_release == MAX_RELEASES) {
                    fprintf(stderr, "sched_cases_test: more than %d revokes to drain at once\n", MAX_RELEASES);
                    exit(2);
                }
                w->to_release[w->nto_release++] = a->slot;
            } else if (m.type == GS_MSG_MEM_LEASED) {
                w->lease_status = m.u.leased.status;
                w->lease_granted = m.u.leased.granted;
            }
            continue; /* recalls and query answers: none of these cases' concern */
        }
        if (a->type == SCHED_SET_TIMER)
            w->timer_at[gpu_number(w, a->device)] = a->at; /* drops, late holders: none of their concern */
    }
    if (w->s.actions_lost) {
        fprintf(stderr, "sched_cases_test: %llu actions found no room\n", (unsigned long long)w->s.actions_lost);
        exit(2);
    }
    while (w->nto_release > 0) {
        struct sched_slot *slot = w->to_release[--w->nto_release];
        if (!slot->holds)
            continue;
        asks(w, slot->owner, gpu_number(w, slot->device));
        world_step(w, (struct sched_event){.type = SCHED_RELEASE, .slot = slot, .grant = slot->holds,
                                           .more = true, .sent_ns = w->now});
    }
}

/* Moves the clock to `until`, firing every GPU timer due by then, in order. */
static void world_run_until(struct world *w, uint64_t until)
{
    for (;;) {
        unsigned next = MAX_GPUS;
        for (unsigned g = 0; g < w->ngpus; g++)
            if (w->timer_at[g] && w->timer_at[g] <= until && (next == MAX_GPUS || w->timer_at[g] < w->timer_at[next]))
                next = g;
        if (next == MAX_GPUS)
            break;
        if (w->timer_at[next] > w->now) {
            world_account(w, w->timer_at[next]);
            w->now = w->timer_at[next];
        }
        w->timer_at[next] = 0;
        world_step(w, (struct sched_event){.type = SCHED_TIMER, .device = &w->gpus[next]});
    }
    if (until > w->now) {
        world_account(w, until);
        w->now = until;
    }
}

static void world_run_for(struct world *w, uint64_t ns)
{
    world_run_until(w, w->now + ns);
}

/* ---- what a process does ---------------------------------------------------------- */

static struct sched_slot *slot_on(struct world *w, struct process *p, struct device *d)
{
    return &p->slots[gpu_number(w, d)];
}

/* The process names d (DECLARE), its tenant's entry and room made first. */
static void declare(struct world *w, struct process *p, struct device *d)
{
    struct sched_slot *slot = slot_on(w, p, d);
    if (!sched_entry_get(d, slot->tenant) || !sched_slots_reserve(d) || !sched_actions_reserve(&w->s, ++w->ndeclared)) {
        perror("sched_cases_test: out of memory");
        exit(2);
    }
    world_step(w, (struct sched_event){.type = SCHED_DECLARE, .slot = slot, .device = d});
}

/* The process names d no more (its process lives on). */
static void undeclare(struct world *w, struct process *p, struct device *d)
{
    world_step(w, (struct sched_event){.type = SCHED_UNDECLARE, .slot = slot_on(w, p, d), .lives_on = true});
}

static void acquire(struct world *w, struct process *p, struct device *d)
{
    asks(w, p, gpu_number(w, d));
    world_step(w, (struct sched_event){.type = SCHED_ACQUIRE, .slot = slot_on(w, p, d)});
}

/* The process gives back the grant it holds on d (asking again if more). */
static void release(struct world *w, struct process *p, struct device *d, bool more)
{
    struct sched_slot *slot = slot_on(w, p, d);
    if (more)
        asks(w, p, gpu_number(w, d));
    world_step(w, (struct sched_event){.type = SCHED_RELEASE, .slot = slot, .grant = slot->holds, .more = more,
                                       .sent_ns = w->now});
}

static bool holds(struct world *w, struct process *p, struct device *d)
{
    struct sched_slot *slot = slot_on(w, p, d);
    return slot->holds && slot->holds == d->grant;
}

/* The process exits: its connection closes, all its slots at once. */
static void client_gone(struct world *w, struct process *p)
{
    world_step(w, (struct sched_event){.type = SCHED_CLIENT_GONE, .slot = p->slots, .nslots = GS_MAX_DEVICES});
}

/* The process's connection closes while the process lives on: what it
 * holds stays counted, as a ghost (memory.c). */
static void connection_lost(struct world *w, struct process *p)
{
    world_step(w, (struct sched_event){.type = SCHED_CLIENT_GONE, .slot = p->slots, .nslots = GS_MAX_DEVICES,
                                       .lives_on = true});
}

/* The process asks for `bytes` of device memory on d (need = want);
 * returns the answer's status (w->lease_granted: what it granted). */
static uint32_t mem_lease(struct world *w, struct process *p, struct device *d, uint64_t bytes)
{
    w->lease_status = UINT32_MAX;
    w->lease_granted = 0;
    world_step(w, (struct sched_event){.type = SCHED_MEM_LEASE, .slot = slot_on(w, p, d), .id = 1, .bytes = bytes,
                                       .want = bytes});
    return w->lease_status;
}

/* The tenant's memory count on d (its entry's mem_used). */
static uint64_t mem_counted(const struct device *d, const struct sched_tenant *t)
{
    const struct device_tenant *dt = sched_entry_find(d, t);
    return dt ? dt->mem_used : 0;
}

/* The device time the tenant held on d so far (its entry's used_ns). */
static uint64_t held_ns(const struct device *d, const struct sched_tenant *t)
{
    const struct device_tenant *dt = sched_entry_find(d, t);
    return dt ? dt->used_ns : 0;
}

/* Runs the clock in steps of 1 ms until p has been granted d since it last
 * asked for it (at once if it has been already), for at most `limit` ns
 * past that; returns how long after asking the grant came (limit if it
 * never did). */
static uint64_t run_until_granted(struct world *w, struct process *p, struct device *d, uint64_t limit)
{
    unsigned g = gpu_number(w, d);
    while (p->grants[g] == p->grants_asked[g] && w->now - p->asked_ns[g] < limit)
        world_run_for(w, MS);
    return p->grants[g] == p->grants_asked[g] ? limit : p->last_grant_ns[g] - p->asked_ns[g];
}

/* ---- the cases ---------------------------------------------------------------------- */

/* Case 1. A gang whose limit holds it back is never chosen to gather by
 * another gang's turn. Gangs G (share 10, limit 0.5) and H (share 1), a
 * busy rank of each on GPUs d and e: each time H's turn came, G (first by
 * virtual time) was chosen to gather in its place, limit or not, and held
 * 90 % of both GPUs. */
static void case_gang_limit(void)
{
    const char *which = "case 1 (gang held back by its limit)";
    struct world *w = world_new();
    struct device *d = world_gpu(w), *e = world_gpu(w);
    struct sched_tenant *g = world_tenant(w, "G", 10), *h = world_tenant(w, "H", 1);
    g->config.limit = 0.5;
    struct process *g_d = world_process(w, g, true), *g_e = world_process(w, g, true);
    struct process *h_d = world_process(w, h, true), *h_e = world_process(w, h, true);
    declare(w, g_d, d);
    declare(w, g_e, e);
    declare(w, h_d, d);
    declare(w, h_e, e);
    acquire(w, g_d, d);
    acquire(w, g_e, e);
    acquire(w, h_d, d);
    acquire(w, h_e, e);
    const uint64_t window = 2000 * MS;
    world_run_for(w, window);
    struct device *gpus[] = {d, e};
    for (unsigned i = 0; i < 2; i++) {
        uint64_t held_g = held_ns(gpus[i], g), held_h = held_ns(gpus[i], h);
        check(held_g <= window * 55 / 100, which,
              "G held GPU %u for %.0f ms of %.0f: at most its limit 0.5 (+5 points)", i, ms(held_g), ms(window));
        check(held_g + held_h >= window * 95 / 100, which,
              "GPU %u held %.0f ms of %.0f by the two busy gangs: not left idle for the limit", i,
              ms(held_g + held_h), ms(window));
    }
    world_free(w);
}

/* Case 2. A GPU is not left idle while a tenant that is no gang waits
 * there, when a gang starts gathering from it. Gangs U (GPUs e, f) and T
 * (d, e), plain N on d, plain Y holding e (it does not give it back until
 * its grace ends). U and T wait;
 * N gives d back asking for more: T's turn on d picks U to gather (first by
 * index), which needs no d, and d was left idle with no timer while N
 * waited, 260 ms, until Y's grace ended. */
static void case_gather_leaves_gpu_idle(void)
{
    const char *which = "case 2 (GPU idle while a plain tenant waits, a gang gathering)";
    struct world *w = world_new();
    struct device *d = world_gpu(w), *e = world_gpu(w), *f = world_gpu(w);
    struct sched_tenant *u = world_tenant(w, "U", 1), *t = world_tenant(w, "T", 1);
    struct sched_tenant *n = world_tenant(w, "N", 1), *y = world_tenant(w, "Y", 1);
    struct process *u_e = world_process(w, u, false), *u_f = world_process(w, u, false);
    struct process *t_d = world_process(w, t, false), *t_e = world_process(w, t, false);
    struct process *n_d = world_process(w, n, false), *y_e = world_process(w, y, false);
    declare(w, u_e, e);
    declare(w, u_f, f);
    declare(w, t_d, d);
    declare(w, t_e, e);
    declare(w, n_d, d);
    declare(w, y_e, e);
    acquire(w, y_e, e);
    acquire(w, n_d, d);
    world_run_for(w, 5 * MS);
    acquire(w, u_e, e);
    acquire(w, t_d, d);
    world_run_for(w, 5 * MS);
    check(holds(w, n_d, d), which, "N holds d before it gives it back (the case's premise)");
    release(w, n_d, d, true);
    uint64_t unheld0 = w->unheld_wait_ns[0];
    uint64_t wait = run_until_granted(w, n_d, d, 50 * MS);
    world_run_for(w, 50 * MS - wait);
    check(wait <= MS, which, "N granted d %.1f ms after it asked again (at most 1 ms)", ms(wait));
    check(w->unheld_wait_ns[0] - unheld0 <= MS, which,
          "d granted to nobody for %.1f ms of the next 50 while someone waited there (at most 1 ms)",
          ms(w->unheld_wait_ns[0] - unheld0));
    world_free(w);
}

/* Case 3. When the gang picked to gather is not next on all its GPUs, the
 * fallback considers the GPU's own best gang. Gang U (share 0.1; GPUs e, f,
 * behind plain X and Z on f) and gang T (d, e); a rank of T asks for d:
 * U comes first by gang order but is not next on f, and the fallback then
 * skipped T itself (the GPU's best) instead of U (the one tried): d and e
 * idled 440 ms and more while T and U waited. */
static void case_gang_fallback(void)
{
    const char *which = "case 3 (fallback after a gang not next everywhere)";
    struct world *w = world_new();
    struct device *d = world_gpu(w), *e = world_gpu(w), *f = world_gpu(w);
    struct sched_tenant *u = world_tenant(w, "U", 0.1), *t = world_tenant(w, "T", 1);
    struct sched_tenant *x = world_tenant(w, "X", 1), *z = world_tenant(w, "Z", 1);
    struct process *u_f = world_process(w, u, false), *u_e = world_process(w, u, false);
    struct process *t_d = world_process(w, t, true), *t_e = world_process(w, t, true);
    struct process *x_f = world_process(w, x, true), *z_f = world_process(w, z, true);
    declare(w, u_f, f);
    declare(w, x_f, f);
    declare(w, z_f, f);
    acquire(w, u_f, f);
    acquire(w, x_f, f);
    acquire(w, z_f, f);
    world_run_for(w, 21 * MS); /* U's slice on f ends; it gives f back 1 ms late */
    check(holds(w, u_f, f), which, "U still holds f past its slice (the case's premise)");
    release(w, u_f, f, false);
    declare(w, u_e, e);
    acquire(w, u_e, e); /* U is a gang now, behind X and Z on f */
    declare(w, t_d, d);
    declare(w, t_e, e);
    uint64_t unheld_d = w->unheld_wait_ns[0], unheld_e = w->unheld_wait_ns[1];
    acquire(w, t_d, d);
    uint64_t wait = run_until_granted(w, t_d, d, 500 * MS);
    check(wait <= 10 * MS, which, "T granted d %.0f ms after its rank asked (at most 10 ms)", ms(wait));
    check(e->state == DEV_RUNNING && e->holder && e->holder->tenant == t, which,
          "T's slice runs on e as well when it is granted d (a gang's GPUs together)");
    check(w->unheld_wait_ns[0] - unheld_d <= 10 * MS && w->unheld_wait_ns[1] - unheld_e <= 10 * MS, which,
          "d and e granted to nobody while someone waited: %.0f and %.0f ms (at most 10 ms)",
          ms(w->unheld_wait_ns[0] - unheld_d), ms(w->unheld_wait_ns[1] - unheld_e));
    world_free(w);
}

/* Case 4. An entry left active while its tenant waits nowhere does not hold
 * a GPU's floor down. G (share 0.1) runs on e, becomes a gang (a rank asks
 * for d), then its rank on d goes: its entry on e stayed active, waiting
 * nowhere, at a low virtual time, and the floor stopped there. A, idle while
 * B ran alone for 1 s, came back that far behind B and got 379 of the next
 * 400 ms. */
static void case_stale_entry_floor(void)
{
    const char *which = "case 4 (stale active entry holds the floor down)";
    struct world *w = world_new();
    struct device *d = world_gpu(w), *e = world_gpu(w);
    struct sched_tenant *g = world_tenant(w, "G", 0.1);
    struct sched_tenant *a = world_tenant(w, "A", 1), *b = world_tenant(w, "B", 1);
    struct process *g_d = world_process(w, g, false), *g_e = world_process(w, g, false);
    struct process *a_e = world_process(w, a, true), *b_e = world_process(w, b, true);
    declare(w, a_e, e);
    declare(w, b_e, e);
    declare(w, g_e, e);
    acquire(w, a_e, e);
    acquire(w, b_e, e);
    world_run_for(w, 100 * MS);
    acquire(w, g_e, e);
    world_run_for(w, 30 * MS);
    check(holds(w, g_e, e), which, "G holds e 30 ms after it asked (the case's premise)");
    release(w, g_e, e, false);
    world_run_for(w, 5 * MS);
    declare(w, g_d, d); /* G is a gang now, and waits: A and B are ahead of it on e */
    acquire(w, g_d, d);
    world_run_for(w, 60 * MS);
    undeclare(w, g_d, d); /* its rank on d goes: no gang, waiting nowhere */
    world_run_for(w, 300 * MS);
    check(holds(w, a_e, e), which, "A holds e when it goes idle (the case's premise)");
    a_e->busy = false;
    release(w, a_e, e, false);
    world_run_for(w, 1000 * MS); /* B alone */
    a_e->busy = true;
    acquire(w, a_e, e);
    uint64_t a0 = held_ns(e, a), b0 = held_ns(e, b);
    const uint64_t window = 400 * MS;
    world_run_for(w, window);
    uint64_t held_a = held_ns(e, a) - a0, held_b = held_ns(e, b) - b0;
    check(held_a <= window * 6 / 10 && held_b >= window * 4 / 10, which,
          "A back from idle held %.0f ms and B %.0f ms of the next %.0f (each 40..60 %%)", ms(held_a), ms(held_b),
          ms(window));
    world_free(w);
}

/* Case 5. A gathering gang none of whose processes waits any more gives up.
 * Gang G (processes P1, P2 on d and e), plain X busy on e. P1 asks for d, G
 * starts gathering (d reserved), and P1 exits: G still gathered, took e from
 * X at the end of X's slice and held both GPUs a quantum for nobody, X
 * waiting meanwhile and G charged for it. */
static void case_gang_gathers_for_nobody(void)
{
    const char *which = "case 5 (gang gathering after its only waiting process exits)";
    struct world *w = world_new();
    struct device *d = world_gpu(w), *e = world_gpu(w);
    struct sched_tenant *g = world_tenant(w, "G", 1), *x = world_tenant(w, "X", 1);
    struct process *p1 = world_process(w, g, false), *p2 = world_process(w, g, false);
    struct process *x_e = world_process(w, x, true);
    declare(w, p1, d);
    declare(w, p1, e);
    declare(w, p2, d);
    declare(w, p2, e);
    declare(w, x_e, e);
    acquire(w, x_e, e);
    world_run_for(w, 5 * MS);
    acquire(w, p1, d);
    check(w->s.forming_gang == g && d->state == DEV_RESERVED, which,
          "G gathers once P1 asks for d, d reserved for it (the case's premise)");
    client_gone(w, p1);
    check(w->s.forming_gang != g && d->state == DEV_IDLE, which,
          "once P1 exits, G gathers no more and d is free (d is %s)",
          d->state == DEV_IDLE ? "idle" : d->state == DEV_RESERVED ? "reserved" : "granted");
    uint64_t waited0 = x_e->waited_ns[1], unheld0 = w->unheld_wait_ns[1];
    const uint64_t window = 60 * MS;
    world_run_for(w, window);
    check(x_e->waited_ns[1] - waited0 <= MS, which, "X waited %.0f ms for e in the next %.0f (at most 1 ms)",
          ms(x_e->waited_ns[1] - waited0), ms(window));
    check(w->unheld_wait_ns[1] - unheld0 <= MS, which,
          "e granted to nobody for %.0f ms while X waited (at most 1 ms)", ms(w->unheld_wait_ns[1] - unheld0));
    check(held_ns(d, g) == 0 && held_ns(e, g) == 0, which,
          "G, which no process of asked for, charged %.0f ms on d and %.0f ms on e (none)", ms(held_ns(d, g)),
          ms(held_ns(e, g)));
    world_free(w);
}

/* Cases 6 and 12 begin alike: batch A and B busy on d, latency L (shares
 * 1). L runs 25 ms, gives the GPU back, and 5 ms later asks again, while B
 * holds d and A, next, is 5 ms of virtual time ahead of L. Returns whether
 * L was granted at once when it first asked (B's slice preempted). */
static bool latency_asks_behind_a(struct world *w, struct device *d, struct process *a_d, struct process *b_d,
                                  struct process *l_d)
{
    declare(w, a_d, d);
    declare(w, b_d, d);
    declare(w, l_d, d);
    acquire(w, a_d, d);
    acquire(w, b_d, d);
    world_run_for(w, 30 * MS); /* A's slice, then B's */
    acquire(w, l_d, d);
    bool at_once = run_until_granted(w, l_d, d, 100 * MS) == 0;
    world_run_for(w, 25 * MS);
    release(w, l_d, d, false);
    world_run_for(w, 5 * MS);
    acquire(w, l_d, d);
    return at_once;
}

/* Case 6. A batch slice that starts while a latency tenant waits is cut
 * short when its holder passes the latency tenant in virtual time, not run
 * to its quantum: preemption was looked at only when the latency tenant
 * asked. Batch A and B busy on d; latency L runs 25 ms, then asks again
 * while B holds d and A, next, is 5 ms of virtual time ahead of L: A's
 * slice, which starts at the end of B's, must end 5 ms later, not 20. */
static void case_latency_after_slice_start(void)
{
    const char *which = "case 6 (latency tenant waiting when a batch slice starts)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *b = world_tenant(w, "B", 1), *l = world_tenant(w, "L", 1);
    l->config.class = CLASS_LATENCY;
    struct process *a_d = world_process(w, a, true), *b_d = world_process(w, b, true);
    struct process *l_d = world_process(w, l, false);
    check(latency_asks_behind_a(w, d, a_d, b_d, l_d), which,
          "L granted d at once when it first asks, B's slice preempted (the case's premise)");
    const struct device_tenant *entry_a = sched_entry_find(d, a), *entry_l = sched_entry_find(d, l);
    check(holds(w, b_d, d) && entry_a->vtime < entry_l->vtime, which,
          "L asks again while B holds d and A is ahead of L by %.1f ms of virtual time (the case's premise)",
          (entry_l->vtime - entry_a->vtime) / 1e6);
    run_until_granted(w, a_d, d, 100 * MS);
    uint64_t started = a_d->last_grant_ns[0], held_a0 = held_ns(d, a);
    uint64_t due = (uint64_t)((entry_l->vtime - entry_a->vtime) * a->config.share); /* when A passes L */
    uint64_t deadline_off = d->deadline > started + due ? d->deadline - (started + due) : started + due - d->deadline;
    check(l_d->grants[0] == l_d->grants_asked[0] && deadline_off <= 1000 /* ns */, which,
          "A's slice, begun with L waiting, ends in %.1f ms: when A passes L (%.1f ms), not at its quantum (%.0f ms)",
          ms(d->deadline - started), ms(due), ms(QUANTUM_NS));
    uint64_t wait = run_until_granted(w, l_d, d, 100 * MS);
    check(wait <= 21 * MS, which,
          "L granted %.0f ms after it asked (at most 21: B's slice to its end, then A's until A passes L)", ms(wait));
    check(held_ns(d, a) - held_a0 <= due + MS, which, "A held %.1f ms of its slice before L was granted (%.1f due)",
          ms(held_ns(d, a) - held_a0), ms(due));
    world_free(w);
}

/* Case 6, the review's stream: batch A and B busy on d, latency L asking
 * every 4..8 ms and holding 1 ms. Each request must be granted within a
 * few ms (the bound --preempt-ms gives the batch holders): one waited a
 * whole quantum, 20 ms, for a batch slice that began just before it. */
static void case_latency_stream(void)
{
    const char *which = "case 6 (latency requests beside two busy batch tenants)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *b = world_tenant(w, "B", 1), *l = world_tenant(w, "L", 1);
    l->config.class = CLASS_LATENCY;
    struct process *a_d = world_process(w, a, true), *b_d = world_process(w, b, true);
    struct process *l_d = world_process(w, l, false);
    declare(w, a_d, d);
    declare(w, b_d, d);
    declare(w, l_d, d);
    acquire(w, a_d, d);
    acquire(w, b_d, d);
    world_run_for(w, 100 * MS);
    const unsigned requests = 200;
    uint64_t worst = 0;
    unsigned over = 0;
    for (unsigned i = 0; i < requests; i++) {
        world_run_for(w, 4 * MS + (i * 7 % 5) * MS);
        acquire(w, l_d, d);
        uint64_t wait = run_until_granted(w, l_d, d, 100 * MS);
        if (wait > worst)
            worst = wait;
        if (wait > 2 * MS)
            over++;
        world_run_for(w, MS);
        release(w, l_d, d, false);
    }
    check(worst <= 2 * MS, which, "L's worst wait %.1f ms over %u requests, %u over 2 ms (none)", ms(worst),
          requests, over);
    world_free(w);
}

static void case_latency(void)
{
    case_latency_after_slice_start();
    case_latency_stream();
}

/* Case 7. A tenant alone on a GPU that gives back each slice idle (it
 * synchronized, then asked again a little later) raises the GPU's floor as
 * it goes. It left the running at each release, after the slice had ended,
 * so the floor stayed where it was when A left; A, back after B ran alone
 * for 1 s, started that far behind B and held the GPU while B waited
 * (simulation seed 5602: 190 ms, against a bound of 148). */
static void case_idle_releases_raise_floor(void)
{
    const char *which = "case 7 (a tenant alone, releasing idle, raises the floor)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *b = world_tenant(w, "B", 1);
    struct process *a_d = world_process(w, a, true), *b_d = world_process(w, b, false);
    declare(w, a_d, d);
    declare(w, b_d, d);
    acquire(w, a_d, d);
    world_run_for(w, 100 * MS);
    a_d->busy = false;
    if (holds(w, a_d, d))
        release(w, a_d, d, false);
    world_run_for(w, 5 * MS);
    /* B alone for 1 s: a 5 ms burst, then idle 2 ms, and again */
    uint64_t alone_until = w->now + 1000 * MS;
    while (w->now < alone_until) {
        acquire(w, b_d, d);
        run_until_granted(w, b_d, d, 100 * MS);
        world_run_for(w, 5 * MS);
        if (holds(w, b_d, d))
            release(w, b_d, d, false);
        world_run_for(w, 2 * MS);
    }
    /* A is back, and B is busy now: they should split the GPU */
    a_d->busy = true;
    b_d->busy = true;
    acquire(w, a_d, d);
    acquire(w, b_d, d);
    uint64_t a0 = held_ns(d, a), b0 = held_ns(d, b);
    const uint64_t window = 400 * MS;
    world_run_for(w, window);
    uint64_t held_a = held_ns(d, a) - a0, held_b = held_ns(d, b) - b0;
    check(held_a <= window * 6 / 10 && held_b >= window * 4 / 10, which,
          "A back after B ran alone held %.0f ms and B %.0f ms of the next %.0f (each 40..60 %%)", ms(held_a),
          ms(held_b), ms(window));
    world_free(w);
}

/* Case 8. A tenant that comes back to a busy GPU waits at most about one
 * quantum for its first slice, whatever it did before (issue 32). inf runs
 * alone for 3 s in steps that go idle (each RELEASE without more), leaves;
 * 2 s later bat starts, busy; 0.5 s later inf asks again. The floor moved
 * only when some tenant became active or left with others in the running,
 * never with inf's own slices: bat started 1.5 s of virtual time behind
 * inf, and inf waited 1 s for bat to use as much (server/return's first
 * step of 0.5 to 1.3 s). */
static void case_return_after_solo(void)
{
    const char *which = "case 8 (a tenant back after a solo run and a pause)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *inf = world_tenant(w, "inf", 1), *bat = world_tenant(w, "bat", 1);
    struct process *solo = world_process(w, inf, false);
    declare(w, solo, d);
    for (unsigned i = 0; i < 500; i++) { /* steps: 1 ms of kernels, 2 ms idle, then 3 ms of host work */
        acquire(w, solo, d);
        run_until_granted(w, solo, d, 100 * MS);
        world_run_for(w, 3 * MS);
        release(w, solo, d, false);
        world_run_for(w, 3 * MS);
    }
    client_gone(w, solo);
    world_run_for(w, 2000 * MS);
    struct process *b = world_process(w, bat, true);
    declare(w, b, d);
    acquire(w, b, d);
    world_run_for(w, 500 * MS);
    struct process *back = world_process(w, inf, false);
    declare(w, back, d);
    acquire(w, back, d);
    uint64_t wait = run_until_granted(w, back, d, 2000 * MS);
    check(wait <= 2 * QUANTUM_NS, which, "inf granted %.1f ms after it asked (at most two quanta, %.0f ms)", ms(wait),
          ms(2 * QUANTUM_NS));
    world_free(w);
}

/* Case 9. A GPU that no slot declares, but on which a live process that
 * lost its connection has memory counted (a ghost), is in use: the server
 * frees a GPU when sched_device_unused says so for --device-linger-ms, and
 * its entries' counts went with it, so the tenant's next process was
 * leased the memory the live one still held, past the tenant's cap. Tenant
 * t (cap 1000 MB): p leases 600 MB and loses its connection, living on;
 * the GPU must stay in use until p is gone (PROCESS_GONE), q's lease of
 * 600 MB meanwhile must be refused, and once p is gone the GPU is unused,
 * its linger starting then. */
static void case_ghost_keeps_gpu(void)
{
    const char *which = "case 9 (a ghost's memory keeps its GPU)";
    const uint64_t mb = 1000000ull;
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *t = world_tenant(w, "t", 1);
    t->config.memory = 1000 * mb;
    struct process *p = world_process(w, t, false);
    declare(w, p, d);
    uint32_t status = mem_lease(w, p, d, 600 * mb);
    check(status == GS_LEASE_GRANTED && w->lease_granted == 600 * mb, which,
          "p's lease of 600 MB: status %u, %llu bytes granted (granted, 600 MB)", (unsigned)status,
          (unsigned long long)w->lease_granted);
    connection_lost(w, p);
    world_run_for(w, 60000 * MS); /* far past any linger */
    check(!sched_device_unused(d), which, "the GPU %s while p's 600 MB is a ghost on it (in use)",
          sched_device_unused(d) ? "reads unused" : "reads in use");
    check(mem_counted(d, t) == 600 * mb, which, "t counts %llu bytes after p's connection closed (600 MB)",
          (unsigned long long)mem_counted(d, t));
    struct process *q = world_process(w, t, false);
    declare(w, q, d);
    status = mem_lease(w, q, d, 600 * mb);
    check(status == GS_LEASE_REFUSED, which, "q's lease of 600 MB past the cap: status %u (refused, %u)",
          (unsigned)status, (unsigned)GS_LEASE_REFUSED);
    client_gone(w, q);
    world_run_for(w, 1000 * MS);
    check(!sched_device_unused(d), which, "the GPU %s after q left, p's ghost still counted (in use)",
          sched_device_unused(d) ? "reads unused" : "reads in use");
    uint64_t gone_at = w->now;
    world_step(w, (struct sched_event){.type = SCHED_PROCESS_GONE, .pid = p->slots[0].pid});
    check(mem_counted(d, t) == 0, which, "t counts %llu bytes after p exited (0)",
          (unsigned long long)mem_counted(d, t));
    check(sched_device_unused(d) && d->unused_since == gone_at, which,
          "the GPU %s, unused since %.0f ms after p exited (unused, since 0 ms)",
          sched_device_unused(d) ? "reads unused" : "reads in use",
          (double)(int64_t)(d->unused_since - gone_at) / 1e6);
    world_free(w);
}

/* Case 10. A holder's drain past its grace counts toward its limit. L
 * (limit 0.5) alone on d holds a slice and does not release until 400 ms
 * after it began, past deadline (20 ms) + grace (250 ms): the slice was
 * taken back at 270 ms and charged up to then, the late release ignored,
 * and L was granted again 540 ms after its slice began, having held the
 * GPU 400 ms (74 %; simulation seed 35660: a tenant at limit 0.41 whose
 * drains outlasted the grace held 46.9 % of a run). Its late release now
 * says when the drain ended: charged up to then, L waits until 800 ms. */
static void case_late_drain_limit(void)
{
    const char *which = "case 10 (a drain past the grace counts toward the limit)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *l = world_tenant(w, "L", 1);
    l->config.limit = 0.5;
    struct process *p = world_process(w, l, false);
    declare(w, p, d);
    uint64_t began = w->now;
    acquire(w, p, d);
    uint64_t grant = slot_on(w, p, d)->holds;
    check(grant != 0, which, "p holds grant %llu after asking (a grant)", (unsigned long long)grant);
    world_run_until(w, began + 400 * MS);
    check(!holds(w, p, d), which, "p %s its slice 400 ms after it began (taken back at deadline + grace)",
          holds(w, p, d) ? "still holds" : "no longer holds");
    world_step(w, (struct sched_event){.type = SCHED_RELEASE, .slot = slot_on(w, p, d), .grant = grant,
                                       .sent_ns = w->now});
    check(held_ns(d, l) == 400 * MS, which, "L charged %.1f ms for a slice drained until 400 ms (400)",
          ms(held_ns(d, l)));
    acquire(w, p, d);
    uint64_t waited = run_until_granted(w, p, d, 1000 * MS);
    check(waited >= 400 * MS && waited <= 400 * MS + CAP_GRANT_SLACK_NS, which,
          "L granted again %.1f ms after its slice began (800: 400 ms held at limit 0.5)",
          ms(p->last_grant_ns[0] - began));
    world_free(w);
}

/* Case 11. What a late release charges is bounded: one more grace
 * period. S holds a slice on d, O waits, and S is stopped (SIGSTOP) past
 * its grace; its work ends meanwhile, but it releases only when it runs
 * again, 3 s after its slice began. The server cannot tell that from a
 * drain of 3 s: it charges S up to deadline + 2 x grace (520 ms), not
 * 3000 ms (which would keep S from the GPU until O had used as much). */
static void case_late_release_bounded(void)
{
    const char *which = "case 11 (a late release charges one more grace period at most)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *t = world_tenant(w, "S", 1), *o = world_tenant(w, "O", 1);
    struct process *p = world_process(w, t, false), *q = world_process(w, o, true);
    declare(w, p, d);
    declare(w, q, d);
    acquire(w, p, d);
    acquire(w, q, d);
    uint64_t grant = slot_on(w, p, d)->holds;
    world_run_for(w, 3000 * MS);
    world_step(w, (struct sched_event){.type = SCHED_RELEASE, .slot = slot_on(w, p, d), .grant = grant,
                                       .sent_ns = w->now});
    check(held_ns(d, t) == QUANTUM_NS + 2 * GRACE_NS, which,
          "S charged %.1f ms for a release 3000 ms after its slice began (%.1f: deadline + 2 x grace)",
          ms(held_ns(d, t)), ms(QUANTUM_NS + 2 * GRACE_NS));
    world_free(w);
}

/* Case 12. A tenant waiting ahead of a latency tenant stops waiting (its
 * process exits) while a batch tenant that has passed the latency tenant
 * holds the GPU: the latency tenant is next, and preempts then, rather
 * than waiting out the batch slice (simulation seed 6596). Batch A and B
 * busy, latency L: as case 6, L asks while B holds d and A is ahead of L;
 * then A's process exits. */
static void case_latency_after_leaver(void)
{
    const char *which = "case 12 (the tenant ahead of a latency tenant leaves)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *b = world_tenant(w, "B", 1), *l = world_tenant(w, "L", 1);
    l->config.class = CLASS_LATENCY;
    struct process *a_d = world_process(w, a, true), *b_d = world_process(w, b, true);
    struct process *l_d = world_process(w, l, false);
    latency_asks_behind_a(w, d, a_d, b_d, l_d);
    const struct device_tenant *entry_a = sched_entry_find(d, a), *entry_b = sched_entry_find(d, b);
    const struct device_tenant *entry_l = sched_entry_find(d, l);
    check(holds(w, b_d, d) && entry_a->vtime < entry_l->vtime, which,
          "L asks while B holds d and A is ahead of L by %.1f ms of virtual time (the case's premise)",
          (entry_l->vtime - entry_a->vtime) / 1e6);
    /* B, charged up to now, passes L this much later (0: it has); its
     * slice has this much left */
    double b_now = entry_b->vtime + (double)(w->now - d->charged_until) / b->config.share;
    uint64_t due = b_now >= entry_l->vtime ? 0 : (uint64_t)((entry_l->vtime - b_now) * b->config.share);
    uint64_t left = d->deadline > w->now ? d->deadline - w->now : 0;
    client_gone(w, a_d);
    uint64_t wait = run_until_granted(w, l_d, d, 100 * MS);
    check(wait <= due + CAP_GRANT_SLACK_NS && due + CAP_GRANT_SLACK_NS < left, which,
          "L granted %.1f ms after A left: when B passes L (%.1f ms), not at the end of B's slice (%.1f ms)",
          ms(wait), ms(due), ms(left));
    world_free(w);
}

/* Case 13. A latency tenant that declares a GPU while a batch tenant's
 * slice runs bounds what the holder admits ahead of the GPU once it has
 * named it BOUND_SETTLE_NS, and lifts the bound when it leaves: the holder
 * was told only with its next slice, so for the rest of this one it kept
 * its whole queue ahead, and a latency tenant asking then waited for it
 * all to drain. Batch A busy alone on d; latency L declares d 5 ms into
 * A's slice, and leaves 5 ms later. */
static void case_latency_declared_mid_slice(void)
{
    const char *which = "case 13 (a latency tenant declares a GPU mid-slice)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *l = world_tenant(w, "L", 1);
    l->config.class = CLASS_LATENCY;
    struct process *a_d = world_process(w, a, true), *l_d = world_process(w, l, false);
    unsigned g = gpu_number(w, d);
    declare(w, a_d, d);
    acquire(w, a_d, d);
    world_run_for(w, 5 * MS);
    unsigned grants = a_d->grants[g];
    uint64_t deadline = a_d->last_deadline[g];
    check(holds(w, a_d, d) && grants == 1 && a_d->last_ahead_ns[g] == 0, which,
          "A holds d, granted once without a bound (%u grants, ahead %.1f ms)", grants, ms(a_d->last_ahead_ns[g]));
    declare(w, l_d, d);
    world_run_for(w, BOUND_SETTLE_NS);
    check(a_d->grants[g] == grants + 1 && a_d->last_ahead_ns[g] == 2 * MS && a_d->last_deadline[g] == deadline &&
              a_d->notices[g] == 1 && holds(w, a_d, d),
          which, "L declares d: A is granted its slice again %.1f ms later, a notice (%u), bounded to 2 ms ahead "
                 "(%.1f ms), its deadline unchanged (%+.1f ms)",
          ms(a_d->last_grant_ns[g] - (w->now - BOUND_SETTLE_NS)), a_d->notices[g], ms(a_d->last_ahead_ns[g]),
          ms(a_d->last_deadline[g]) - ms(deadline));
    declare(w, l_d, d); /* named again: nothing changes */
    check(a_d->grants[g] == grants + 1, which, "L's second declaration sends nothing (%u grants)", a_d->grants[g]);
    world_run_for(w, 5 * MS);
    undeclare(w, l_d, d);
    check(a_d->grants[g] == grants + 2 && a_d->last_ahead_ns[g] == 0 && holds(w, a_d, d), which,
          "L leaves d: A's bound is lifted at once (%u grants, ahead %.1f ms)", a_d->grants[g],
          ms(a_d->last_ahead_ns[g]));
    world_free(w);
}

/* Case 18. A latency tenant that flips its declaration of a GPU as fast
 * as the server reads it sends the batch holder at most one GRANT per
 * BOUND_NOTICE_GAP_NS, and none while it never names the GPU for
 * BOUND_SETTLE_NS: each flip sent one (its socket filled and the server
 * dropped it, about 1 700 times in 4 s). A busy alone on d; L flips every
 * 10 us for 10 ms; then names d for 3 ms and leaves it for 0.1 ms, ten
 * times; then names it for good. */
static void case_latency_toggler(void)
{
    const char *which = "case 18 (a latency tenant flips its declaration of a GPU)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *l = world_tenant(w, "L", 1);
    l->config.class = CLASS_LATENCY;
    struct process *a_d = world_process(w, a, true), *l_d = world_process(w, l, false);
    unsigned g = gpu_number(w, d);
    declare(w, a_d, d);
    acquire(w, a_d, d);
    world_run_for(w, MS);
    unsigned grants = a_d->grants[g];
    for (int i = 0; i < 1000; i++) {
        declare(w, l_d, d);
        world_run_for(w, MS / 100);
        undeclare(w, l_d, d);
        world_run_for(w, MS / 100);
    }
    check(a_d->notices[g] == 0 && holds(w, a_d, d), which,
          "1000 flips 10 us apart: A got %u notices (none: L never named d for %.0f ms), %u GRANTs in all",
          a_d->notices[g], ms(BOUND_SETTLE_NS), a_d->grants[g] - grants);
    for (int i = 0; i < 10; i++) {
        declare(w, l_d, d);
        world_run_for(w, 3 * MS);
        undeclare(w, l_d, d);
        world_run_for(w, MS / 10);
    }
    check(a_d->notices[g] >= 2 && a_d->least_notice_gap[g] >= BOUND_NOTICE_GAP_NS, which,
          "named 3 ms and left 0.1 ms, ten times: %u notices, at least %.1f ms apart (%.1f)", a_d->notices[g],
          ms(BOUND_NOTICE_GAP_NS), ms(a_d->least_notice_gap[g]));
    declare(w, l_d, d);
    world_run_for(w, BOUND_SETTLE_NS + BOUND_NOTICE_GAP_NS);
    check(a_d->last_ahead_ns[g] == 2 * MS && holds(w, a_d, d), which,
          "named for good: A's bound is 2 ms within %.0f ms (%.1f ms)", ms(BOUND_SETTLE_NS + BOUND_NOTICE_GAP_NS),
          ms(a_d->last_ahead_ns[g]));
    world_free(w);
}

/* Case 19. A latency tenant pays for its preemptions by holding the GPU:
 * one that asks and gives the slice back at once, as fast as it can,
 * preempted the busy batch tenant at every ask (each costs it a handoff
 * or two with the GPU idle: 12 % of its device time beside 1 ms kernels).
 * Now it preempts PREEMPT_DEBT_MAX_NS / PREEMPT_COST_NS times and then
 * waits its turn. One that holds 1 ms each time preempts at every ask.
 * A busy on d; L asks, and once granted releases at once, for 1 s; then
 * M, another latency tenant, asks and holds 1 ms, 100 times. */
static void case_latency_churn(void)
{
    const char *which = "case 19 (a latency tenant asks and gives back as fast as it can)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *l = world_tenant(w, "L", 1), *m = world_tenant(w, "M", 1);
    l->config.class = m->config.class = CLASS_LATENCY;
    struct process *a_d = world_process(w, a, true), *l_d = world_process(w, l, false);
    struct process *m_d = world_process(w, m, false);
    declare(w, a_d, d);
    declare(w, l_d, d);
    acquire(w, a_d, d);
    world_run_for(w, 10 * MS);
    uint64_t start = w->now, before = d->preemptions;
    unsigned asks_made = 0;
    while (w->now - start < 1000 * MS) {
        acquire(w, l_d, d);
        asks_made++;
        if (run_until_granted(w, l_d, d, 100 * MS) >= 100 * MS)
            break;
        world_run_for(w, MS / 100);
        release(w, l_d, d, false);
    }
    /* what it may owe, what its holding paid, and the one that tipped it */
    uint64_t preempted = d->preemptions - before,
             allowed = PREEMPT_DEBT_MAX_NS / PREEMPT_COST_NS + asks_made * (MS / 100) / PREEMPT_COST_NS + 1;
    check(preempted <= allowed && asks_made > 20, which,
          "L, holding 10 us a time: %llu preemptions in %u asks over 1 s (at most %llu)",
          (unsigned long long)preempted, asks_made, (unsigned long long)allowed);
    check(held_ns(d, a) >= 950 * MS, which, "A held d %.0f ms of that second", ms(held_ns(d, a)));
    undeclare(w, l_d, d);
    declare(w, m_d, d);
    world_run_for(w, 10 * MS);
    before = d->preemptions;
    uint64_t longest = 0;
    for (int i = 0; i < 100; i++) {
        acquire(w, m_d, d);
        uint64_t waited = run_until_granted(w, m_d, d, 100 * MS);
        if (waited > longest)
            longest = waited;
        world_run_for(w, MS);
        release(w, m_d, d, false);
        world_run_for(w, 5 * MS); /* its host work */
    }
    check(d->preemptions - before == 100 && longest <= CAP_GRANT_SLACK_NS, which,
          "M, holding 1 ms a time: %llu preemptions in 100 asks, each granted within %.0f ms (the longest %.1f)",
          (unsigned long long)(d->preemptions - before), ms(CAP_GRANT_SLACK_NS), ms(longest));
    world_free(w);
}

/* Case 20. A process that joins a batch slice just as a latency tenant's
 * BOUND_SETTLE_NS is over, before the server's timer for it fired (the
 * loop's timers come late), gets the new bound; the holders must get it
 * too. The joiner's GRANT recorded the bound as granted, and the timer
 * then found nothing to tell: the holder stayed unbounded (fresh
 * simulation runs, 8 to 9 ms past the notice's bound). A1 and A2 of
 * batch A on d, A1 holding; L names d; the timer comes 1 ms late, and A2
 * asks as the settle time ends. */
static void case_join_at_settle(void)
{
    const char *which = "case 20 (a process joins as a latency tenant's settle time ends)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *l = world_tenant(w, "L", 1);
    l->config.class = CLASS_LATENCY;
    struct process *a1 = world_process(w, a, true), *a2 = world_process(w, a, false);
    struct process *l_d = world_process(w, l, false);
    unsigned g = gpu_number(w, d);
    declare(w, a1, d);
    declare(w, a2, d);
    acquire(w, a1, d);
    world_run_for(w, MS);
    declare(w, l_d, d);
    w->timer_at[g] += MS; /* the loop's wake-up comes late */
    world_run_for(w, BOUND_SETTLE_NS);
    acquire(w, a2, d);
    check(holds(w, a2, d) && a2->last_ahead_ns[g] == 2 * MS, which, "A2 joins, bounded to 2 ms ahead (%.1f ms)",
          ms(a2->last_ahead_ns[g]));
    world_run_for(w, 5 * MS);
    check(holds(w, a1, d) && a1->last_ahead_ns[g] == 2 * MS, which,
          "A1, holding since before L named d, is bounded too (%.1f ms ahead)", ms(a1->last_ahead_ns[g]));
    world_free(w);
}

/* Case 14. A tenant's configuration change moves a preemption planned
 * with the old one: the holder's share halved mid-slice makes it pass the
 * latency tenant waiting in half the time, and the revoke must come then,
 * not when the old share said (simulation seed 25415: 17.6 ms late). As
 * case 6: L asks again while B holds d and A, next, is 5 ms of virtual
 * time ahead of L; as A's slice begins, A's share goes from 1 to 0.5. */
static void case_latency_share_changed(void)
{
    const char *which = "case 14 (the holder's share changes while a latency tenant waits)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *a = world_tenant(w, "A", 1), *b = world_tenant(w, "B", 1), *l = world_tenant(w, "L", 1);
    l->config.class = CLASS_LATENCY;
    struct process *a_d = world_process(w, a, true), *b_d = world_process(w, b, true);
    struct process *l_d = world_process(w, l, false);
    latency_asks_behind_a(w, d, a_d, b_d, l_d);
    const struct device_tenant *entry_a = sched_entry_find(d, a), *entry_l = sched_entry_find(d, l);
    run_until_granted(w, a_d, d, 100 * MS);
    uint64_t started = a_d->last_grant_ns[0];
    double gap = entry_l->vtime - entry_a->vtime; /* virtual ns: A passes L after gap * share */
    check(holds(w, a_d, d) && gap > 2 * MS && l_d->grants[0] == l_d->grants_asked[0], which,
          "A's slice begins with L waiting and A %.1f ms of virtual time ahead of it (the case's premise)", gap / 1e6);
    a->config.share = 0.5;
    world_step(w, (struct sched_event){.type = SCHED_TENANT_CHANGED, .tenant = a});
    uint64_t wait = run_until_granted(w, l_d, d, 100 * MS), granted = l_d->last_grant_ns[0] - started;
    uint64_t due = (uint64_t)(gap * 0.5), old_due = (uint64_t)gap;
    check(wait < 100 * MS && granted <= due + CAP_GRANT_SLACK_NS && granted < old_due, which,
          "L granted %.1f ms into A's slice: when A passes L at its new share (%.1f ms), not its old (%.1f ms)",
          ms(granted), ms(due), ms(old_due));
    world_free(w);
}

/* Case 15. A limit set while a slice runs judges that slice from then on,
 * not from its start. T, busy and alone on d with no limit, holds one
 * slice for 2 s (extended: nobody else wants d); then its limit becomes
 * 0.5. Its slice ends at the next deadline, and it may hold d half the
 * time from the change on: granted again within 2 quanta, not 4 s later
 * (the 2 s held before the change, judged by the new limit: sched_fuzz's
 * liveness check saw 8.4 s held and then a limit of 0.25 keep the GPU
 * idle 25 s). And the limit binds: T holds at most half of the next
 * second. Then the limit goes back to 1 while T waits out a window of
 * 0.1: it is granted at once, not when the old limit would have let it. */
static void case_limit_set_mid_slice(void)
{
    const char *which = "case 15 (a limit set while a slice runs)";
    struct world *w = world_new();
    struct device *d = world_gpu(w);
    struct sched_tenant *t = world_tenant(w, "T", 1);
    struct process *p = world_process(w, t, true);
    declare(w, p, d);
    acquire(w, p, d);
    world_run_for(w, 2000 * MS);
    check(holds(w, p, d) && p->grants[0] > 50, which, "T holds d after 2 s alone, its slice extended (%u grants)",
          p->grants[0]);
    uint64_t changed = w->now, held_before = held_ns(d, t);
    t->config.limit = 0.5;
    world_step(w, (struct sched_event){.type = SCHED_TENANT_CHANGED, .tenant = t});
    unsigned grants = p->grants[0];
    uint64_t first_slice_end = 0;
    while (w->now < changed + 5000 * MS && p->grants[0] == grants) {
        world_run_for(w, MS);
        if (!first_slice_end && !holds(w, p, d))
            first_slice_end = w->now;
    }
    uint64_t regranted = p->last_grant_ns[0] - changed;
    check(first_slice_end && regranted <= 2 * QUANTUM_NS + CAP_GRANT_SLACK_NS, which,
          "T granted again %.1f ms after its limit became 0.5 (at most 2 quanta, %.1f ms; not 4 s)", ms(regranted),
          ms(2 * QUANTUM_NS));
    uint64_t from = w->now, held_from = held_ns(d, t);
    world_run_for(w, 1000 * MS);
    double part = (double)(held_ns(d, t) - held_from) / (double)(w->now - from);
    check(part > 0.45 && part <= 0.5 + (double)QUANTUM_NS / 1e9, which,
          "T held %.3f of the second after (limit 0.5; %.1f s held before the change)", part,
          (double)held_before / 1e9);
    /* the limit lowered to 0.1: a window of 9 slices' time to wait out */
    t->config.limit = 0.1;
    world_step(w, (struct sched_event){.type = SCHED_TENANT_CHANGED, .tenant = t});
    while (w->now < from + 3000 * MS && holds(w, p, d))
        world_run_for(w, MS);
    world_run_for(w, 2 * MS);
    const struct device_tenant *dt = sched_entry_find(d, t);
    bool waits = !holds(w, p, d) && dt->eligible_at > w->now + 50 * MS;
    check(waits, which, "T waits %.1f ms for its limit of 0.1 after a slice", ms(dt->eligible_at - w->now));
    t->config.limit = 1.0;
    asks(w, p, 0);
    world_step(w, (struct sched_event){.type = SCHED_TENANT_CHANGED, .tenant = t});
    uint64_t wait = run_until_granted(w, p, d, 1000 * MS);
    check(waits && wait <= CAP_GRANT_SLACK_NS, which, "T granted %.1f ms after its limit went back to 1 (at once)",
          ms(wait));
    world_free(w);
}

/* Case 16. A gang whose limit holds it back on one GPU is granted when the
 * limit lets it go, whichever of its GPUs its rank asks on. G (limit 0.5)
 * holds d alone for 10 ms, so its limit keeps it off d for 10 ms more;
 * then its process names e too (G is a gang now) and asks for e, idle.
 * The gang gathers once d lets it: nothing looked at d when the rank
 * asked on e, so no timer was armed for it, and the rank waited for ever
 * (sched_fuzz's liveness check, corpus liveness-gang-limit-elsewhere). */
static void case_gang_limit_elsewhere(void)
{
    const char *which = "case 16 (a gang its limit holds back on another GPU)";
    struct world *w = world_new();
    struct device *d = world_gpu(w), *e = world_gpu(w);
    struct sched_tenant *g = world_tenant(w, "G", 1);
    g->config.limit = 0.5;
    struct process *p = world_process(w, g, false);
    declare(w, p, d);
    acquire(w, p, d);
    uint64_t began = w->now;
    world_run_for(w, 10 * MS);
    release(w, p, d, false);
    declare(w, p, e);
    acquire(w, p, e);
    uint64_t wait = run_until_granted(w, p, e, 1000 * MS);
    uint64_t granted = wait < 1000 * MS ? p->last_grant_ns[1] - began : w->now - began;
    check(wait < 1000 * MS && granted >= 20 * MS && granted <= 20 * MS + CAP_GRANT_SLACK_NS, which,
          "G's rank %s e %.1f ms after G's slice on d began (20: 10 ms held at limit 0.5)",
          wait < 1000 * MS ? "granted" : "still not granted", ms(granted));
    world_free(w);
}

/* Case 17. A gang does not take a GPU at every turn from a holder behind
 * it there. Gang G (share 1) with a busy rank on d and on e, plain T
 * (share 10, busy) on e. Each time G's slice ended, T got e and G, alone
 * on d, was next there and next everywhere (T held e, so it did not
 * wait): it gathered, and e was reserved for it when T's slice ended,
 * however far behind G T was. G held half of e against a weight of 1/11
 * (the simulation's named case gang-behind-holder). */
static void case_gang_behind_holder(void)
{
    const char *which = "case 17 (a gang gathers while a holder behind it holds its GPU)";
    struct world *w = world_new();
    struct device *d = world_gpu(w), *e = world_gpu(w);
    struct sched_tenant *g = world_tenant(w, "G", 1), *t = world_tenant(w, "T", 10);
    struct process *g_d = world_process(w, g, true), *g_e = world_process(w, g, true);
    struct process *t_e = world_process(w, t, true);
    declare(w, g_d, d);
    declare(w, g_e, e);
    declare(w, t_e, e);
    acquire(w, g_d, d);
    acquire(w, g_e, e);
    acquire(w, t_e, e);
    const uint64_t window = 2000 * MS;
    world_run_for(w, window);
    uint64_t held_g = held_ns(e, g), held_t = held_ns(e, t);
    check(held_g <= window * 14 / 100 && held_g > 0, which,
          "G held e for %.0f ms of %.0f: its weight 1/11 (9 %%, +5 points), and not nothing", ms(held_g), ms(window));
    check(held_g + held_t >= window * 95 / 100, which, "e held %.0f ms of %.0f by the two busy tenants",
          ms(held_g + held_t), ms(window));
    world_free(w);
}

int main(int argc, char **argv)
{
    static void (*const cases[])(void) = {
        case_gang_limit, case_gather_leaves_gpu_idle, case_gang_fallback,
        case_stale_entry_floor, case_gang_gathers_for_nobody, case_latency,
        case_idle_releases_raise_floor, case_return_after_solo, case_ghost_keeps_gpu,
        case_late_drain_limit, case_late_release_bounded, case_latency_after_leaver,
        case_latency_declared_mid_slice, case_latency_share_changed, case_limit_set_mid_slice,
        case_gang_limit_elsewhere, case_gang_behind_holder, case_latency_toggler,
        case_latency_churn, case_join_at_settle,
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    if (argc == 1) {
        for (int i = 0; i < ncases; i++)
            cases[i]();
    } else {
        for (int i = 1; i < argc; i++) {
            int k = atoi(argv[i]);
            if (k < 1 || k > ncases) {
                fprintf(stderr, "usage: %s [CASE...]   (cases 1..%d)\n", argv[0], ncases);
                return 2;
            }
            cases[k - 1]();
        }
    }
    if (failures)
        printf("%u checks failed\n", failures);
    return failures ? 1 : 0;
}
