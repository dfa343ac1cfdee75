/*
 * What a seed makes of the node: its GPUs, tenants (share, limit, quantum,
 * memory cap, gang), processes and what they run, hostile tenants, and the
 * faults of the run. Four kinds of run, each with what it promises:
 *   - clean: honest tenants keeping deep queues on one GPU, nothing else:
 *     their shares of device time within 0.5 points of their weights;
 *   - mixed: every pattern, limits, memory caps, tenants of many
 *     processes, forks, and faults (kills, stops, reconnections, server
 *     restarts, configuration changes);
 *   - gangs: jobs with ranks on several GPUs beside other tenants;
 *   - hostile: two honest tenants on GPU 0 beside tenants that abuse the
 *     protocol: the honest ones' ratio holds.
 * Every kind keeps the safety invariants (sim_check.c).
 */
#include "sim.h"

#include <stdio.h>
#include <string.h>

enum run_kind { RUN_CLEAN, RUN_MIXED, RUN_GANGS, RUN_HOSTILE };

static const double shares[] = {1, 1, 2, 3, 10};

struct tenant_plan *scenario_tenant(struct world *w, double share)
{
    struct tenant_plan *t = &w->tenant[w->ntenants];
    snprintf(t->name, sizeof t->name, "t%d", w->ntenants);
    t->config = (struct tenant_config){.share = share, .limit = 1, .quantum_ns = 20 * MS, .memory = 0,
                                       .gang = GANG_AUTO, .on_server_down = ON_DOWN_DEFAULT};
    w->ntenants++;
    return t;
}

struct sim_proc *scenario_proc(struct world *w, int tenant, enum app_kind app)
{
    struct sim_proc *p = &w->proc[w->nprocs];
    p->id = w->nprocs++;
    p->tenant = tenant;
    p->alive = true;
    p->app = app;
    p->conn = -1;
    p->alloc_pending = -1;
    p->stop_at = UINT64_MAX;
    p->depth = 8;
    p->batch = 4;
    p->item_len = 1 * MS;
    p->ngpus = 1;
    p->dev[0].gpu = 0;
    p->dev[0].slot = 0;
    p->dev[0].gs = &p->shim.devs[0];
    return p;
}

/* Item lengths from 20 us to 50 ms, most of them short. */
static uint64_t some_item_len(struct world *w)
{
    static const uint64_t lens[] = {20 * US, 50 * US, 200 * US, 500 * US, 1 * MS, 2 * MS, 5 * MS, 20 * MS, 50 * MS};
    return lens[rng_range(&w->rng, 0, sizeof lens / sizeof lens[0] - 1)];
}

static void some_app(struct world *w, struct sim_proc *p)
{
    static const enum app_kind apps[] = {APP_DEEP, APP_DEEP, APP_SYNC, APP_SYNC, APP_BURSTS};
    p->app = apps[rng_range(&w->rng, 0, 4)];
    p->item_len = some_item_len(w);
    /* runs of short kernels are items of at least 0.2 ms: a deep queue of
     * 20 us kernels is 10 of them in a row */
    if (p->app == APP_DEEP && p->item_len < 200 * US)
        p->item_len = 200 * US;
    p->depth = (int)rng_range(&w->rng, 2, 16);
    static const int batches[] = {1, 4, 32};
    p->batch = batches[rng_range(&w->rng, 0, 2)];
    p->host_ns = rng_range(&w->rng, 0, 5 * MS);
    if (p->item_len >= 20 * MS)
        p->depth = 2;
}

static void some_memory(struct world *w, struct sim_proc *p)
{
    if (!rng_chance(&w->rng, 0.4))
        return;
    p->uses_memory = true;
    p->alloc_size = rng_range(&w->rng, 1, 256) * MIB;
}

struct fault *scenario_fault(struct world *w, enum fault_kind kind, int target, uint64_t at, uint64_t len)
{
    if (w->nfaults >= (int)(sizeof w->fault / sizeof w->fault[0]))
        return NULL;
    struct fault *f = &w->fault[w->nfaults++];
    *f = (struct fault){.kind = kind, .target = target, .at = at, .len = len};
    if (kind == F_STOP || kind == F_SERVER_RESTART)
        w->stalls = true;
    return f;
}

static void add_fault(struct world *w, enum fault_kind kind, int target)
{
    uint64_t at = rng_range(&w->rng, w->end / 20, w->end - w->end / 10);
    scenario_fault(w, kind, target, at, rng_range(&w->rng, 10 * MS, 800 * MS));
}

static void clean_run(struct world *w)
{
    int n = (int)rng_range(&w->rng, 2, 4);
    uint64_t quantum = rng_range(&w->rng, 5, 40) * MS;
    for (int t = 0; t < n; t++) {
        struct tenant_plan *tp = scenario_tenant(w, shares[rng_range(&w->rng, 0, 3)]);
        /* one quantum for all: each slice costs a handoff, which a tenant of
         * shorter slices pays more often (docs/design/scheduler.md) */
        tp->config.quantum_ns = quantum;
        /* a latency tenant preempts the others' slices: when it runs, not
         * how much (the shares below hold all the same) */
        if (rng_chance(&w->rng, 0.3))
            tp->config.class = CLASS_LATENCY;
        struct sim_proc *p = scenario_proc(w, t, APP_DEEP);
        p->item_len = rng_range(&w->rng, 2, 50) * 100 * US;
        p->depth = (int)rng_range(&w->rng, 4, 16);
    }
    w->clean = true;
}

static void mixed_run(struct world *w)
{
    w->ngpus = (int)rng_range(&w->rng, 1, 3);
    int n = (int)rng_range(&w->rng, 2, 6);
    for (int t = 0; t < n; t++) {
        struct tenant_plan *tp = scenario_tenant(w, shares[rng_range(&w->rng, 0, 4)]);
        tp->config.quantum_ns = rng_range(&w->rng, 5, 50) * MS;
        if (rng_chance(&w->rng, 0.25))
            tp->config.limit = (double)rng_range(&w->rng, 20, 90) / 100.0;
        if (rng_chance(&w->rng, 0.4))
            tp->config.memory = rng_range(&w->rng, 64, 2048) * MIB;
        if (rng_chance(&w->rng, 0.3))
            tp->config.on_server_down = rng_chance(&w->rng, 0.5) ? ON_DOWN_OPEN : ON_DOWN_WAIT;
        if (rng_chance(&w->rng, 0.25))
            tp->config.class = CLASS_LATENCY;
        tp->config.gang = GANG_OFF; /* independent work per GPU here; gangs have runs of their own */
        int procs = rng_chance(&w->rng, 0.1) ? 16 : (int)rng_range(&w->rng, 1, 3);
        int gpu = (int)rng_range(&w->rng, 0, (uint64_t)w->ngpus - 1);
        for (int k = 0; k < procs && w->nprocs < SIM_MAX_PROCS - 8; k++) {
            struct sim_proc *p = scenario_proc(w, t, APP_DEEP);
            some_app(w, p);
            some_memory(w, p);
            p->dev[0].gpu = rng_chance(&w->rng, 0.8) ? gpu : (int)rng_range(&w->rng, 0, (uint64_t)w->ngpus - 1);
            p->start_at = rng_chance(&w->rng, 0.7) ? 0 : rng_range(&w->rng, 0, w->end / 2);
        }
    }
    int faults = (int)rng_range(&w->rng, 0, 4);
    for (int f = 0; f < faults; f++) {
        static const enum fault_kind kinds[] = {F_KILL, F_STOP, F_RECONNECT, F_SERVER_RESTART, F_CONFIG, F_FORK};
        enum fault_kind kind = kinds[rng_range(&w->rng, 0, 5)];
        add_fault(w, kind, kind == F_CONFIG ? (int)rng_range(&w->rng, 0, (uint64_t)w->ntenants - 1)
                                           : (int)rng_range(&w->rng, 0, (uint64_t)w->nprocs - 1));
    }
}

static void gang_run(struct world *w)
{
    w->ngpus = (int)rng_range(&w->rng, 2, 3);
    int gangs = (int)rng_range(&w->rng, 1, 2), group = 1;
    for (int k = 0; k < gangs; k++) {
        int t = w->ntenants;
        struct tenant_plan *tp = scenario_tenant(w, shares[rng_range(&w->rng, 0, 2)]);
        tp->config.quantum_ns = rng_range(&w->rng, 10, 40) * MS;
        tp->gang = true;
        int ranks = (int)rng_range(&w->rng, 2, (uint64_t)w->ngpus);
        uint64_t len = rng_range(&w->rng, 2, 20) * 100 * US;
        for (int r = 0; r < ranks; r++) {
            struct sim_proc *p = scenario_proc(w, t, APP_RANK);
            p->group = group;
            p->item_len = len;
            p->depth = (int)rng_range(&w->rng, 2, 8);
            p->dev[0].gpu = r;
            /* a job's ranks start a little apart */
            p->start_at = r ? rng_range(&w->rng, 0, 300 * MS) : 0;
        }
        group++;
    }
    int others = (int)rng_range(&w->rng, 1, 3);
    for (int k = 0; k < others; k++) {
        int t = w->ntenants;
        struct tenant_plan *tp = scenario_tenant(w, shares[rng_range(&w->rng, 0, 2)]);
        tp->config.quantum_ns = rng_range(&w->rng, 10, 40) * MS;
        struct sim_proc *p = scenario_proc(w, t, APP_DEEP);
        some_app(w, p);
        p->dev[0].gpu = (int)rng_range(&w->rng, 0, (uint64_t)w->ngpus - 1);
    }
    if (rng_chance(&w->rng, 0.3))
        add_fault(w, rng_chance(&w->rng, 0.5) ? F_KILL : F_STOP, (int)rng_range(&w->rng, 0, (uint64_t)w->nprocs - 1));
}

static void hostile_run(struct world *w)
{
    w->ngpus = (int)rng_range(&w->rng, 1, 2);
    for (int k = 0; k < 2; k++) {
        struct tenant_plan *tp = scenario_tenant(w, k == 0 ? shares[rng_range(&w->rng, 0, 3)] : 1);
        tp->config.quantum_ns = 20 * MS;
        struct sim_proc *p = scenario_proc(w, w->ntenants - 1, APP_DEEP);
        p->item_len = rng_range(&w->rng, 2, 30) * 100 * US;
        p->depth = 8;
    }
    w->honest_pair = true;
    w->honest_a = 0;
    w->honest_b = 1;
    int bad = (int)rng_range(&w->rng, 1, 3);
    for (int k = 0; k < bad; k++) {
        struct tenant_plan *tp = scenario_tenant(w, shares[rng_range(&w->rng, 0, 4)]);
        tp->hostile = true;
        tp->config.quantum_ns = rng_range(&w->rng, 5, 40) * MS;
        if (rng_chance(&w->rng, 0.3))
            tp->config.limit = (double)rng_range(&w->rng, 10, 90) / 100.0;
        if (rng_chance(&w->rng, 0.5))
            tp->config.memory = rng_range(&w->rng, 64, 2048) * MIB;
        enum hostile_kind kind = (enum hostile_kind)rng_range(&w->rng, H_LIAR, H_KINDS - 1);
        int conns = kind == H_FLOOD || kind == H_DEVICE_FLOOD ? (int)rng_range(&w->rng, 1, 4) : 1;
        for (int c = 0; c < conns; c++) {
            struct sim_proc *p = scenario_proc(w, w->ntenants - 1, APP_HOSTILE);
            p->hostile = kind;
            p->dev[0].gpu = (int)rng_range(&w->rng, 0, (uint64_t)w->ngpus - 1);
            if (kind == H_HOLDER)
                w->stalls = true;
        }
    }
}

void scenario_make(struct world *w)
{
    w->warmup = w->end / 10;
    w->ngpus = 1;
    w->policy = rng_chance(&w->rng, 0.5) ? ON_DOWN_WAIT : ON_DOWN_OPEN;
    double r = rng_unit(&w->rng);
    enum run_kind kind = r < 0.3 ? RUN_CLEAN : r < 0.7 ? RUN_MIXED : r < 0.85 ? RUN_GANGS : RUN_HOSTILE;
    switch (kind) {
    case RUN_CLEAN: clean_run(w); break;
    case RUN_MIXED: mixed_run(w); break;
    case RUN_GANGS: gang_run(w); break;
    case RUN_HOSTILE: hostile_run(w); break;
    }
    scenario_describe(w, kind == RUN_CLEAN ? "clean" : kind == RUN_MIXED ? "mixed" : kind == RUN_GANGS ? "gang"
                                                                                                  : "hostile");
}

void scenario_describe(struct world *w, const char *kind)
{
    trace(w, "seed %llu: %s run, %d GPUs, %d tenants, %d processes, %d faults, policy %s",
          (unsigned long long)w->seed, kind, w->ngpus, w->ntenants, w->nprocs, w->nfaults,
          w->policy == ON_DOWN_OPEN ? "open" : "wait");
    for (int t = 0; t < w->ntenants; t++) {
        struct tenant_plan *tp = &w->tenant[t];
        tp->share_most = tp->share_least = tp->config.share;
        tp->quantum_most = tp->config.quantum_ns;
        trace(w, "tenant %s: share %g limit %g quantum %llu ms memory %llu MiB%s%s%s%s", tp->name, tp->config.share,
              tp->config.limit, (unsigned long long)(tp->config.quantum_ns / MS),
              (unsigned long long)(tp->config.memory / MIB), tp->gang ? " gang" : "", tp->hostile ? " hostile" : "",
              tp->config.class == CLASS_LATENCY ? " latency" : "",
              tp->config.on_server_down == ON_DOWN_OPEN   ? " policy open"
              : tp->config.on_server_down == ON_DOWN_WAIT ? " policy wait"
                                                          : "");
    }
    for (int i = 0; i < w->nprocs; i++) {
        const struct sim_proc *p = &w->proc[i];
        trace(w, "proc %d: tenant %d app %d hostile %d gpu %d item %llu us depth %d batch %d host %llu us start %llu ms "
              "memory %llu MiB", i, p->tenant, p->app, p->hostile, p->dev[0].gpu,
              (unsigned long long)(p->item_len / US), p->depth, p->batch, (unsigned long long)(p->host_ns / US),
              (unsigned long long)(p->start_at / MS), (unsigned long long)(p->uses_memory ? p->alloc_size / MIB : 0));
    }
    for (int f = 0; f < w->nfaults; f++)
        trace(w, "fault %d: kind %d target %d at %llu ms for %llu ms", f, (int)w->fault[f].kind, w->fault[f].target,
              (unsigned long long)(w->fault[f].at / MS), (unsigned long long)(w->fault[f].len / MS));
}

/* ---- faults -------------------------------------------------------------------- */

void proc_kill(struct world *w, struct sim_proc *p)
{
    if (!p->alive)
        return;
    trace(w, "proc %d: killed", p->id);
    shim_gone(w, p);
    p->alive = false;
    p->died_at = w->now;
    gpu_kill(w, p->id);
    close_from_proc(w, p->conn);
    p->conn = -1;
    /* a count the server kept for it while it had no connection goes at
     * the server's next check (every second) */
    post(w, w->now + rng_range(&w->rng, 1 * MS, 1000 * MS), EV_PROCESS_GONE, p->id, 0);
}

static void fork_proc(struct world *w, struct sim_proc *parent)
{
    if (w->nprocs >= SIM_MAX_PROCS || !parent->alive || parent->app == APP_RANK || parent->app == APP_HOSTILE)
        return;
    struct sim_proc *child = scenario_proc(w, parent->tenant, parent->app);
    child->item_len = parent->item_len;
    child->depth = parent->depth;
    child->batch = parent->batch;
    child->host_ns = parent->host_ns;
    child->dev[0].gpu = parent->dev[0].gpu;
    child->uses_memory = parent->uses_memory;
    child->alloc_size = parent->alloc_size;
    child->start_at = w->now;
    trace(w, "proc %d: forked proc %d", parent->id, child->id);
    post(w, w->now, EV_APP, child->id, child->app_gen);
}

void proc_fault(struct world *w, int f)
{
    struct fault *ft = &w->fault[f];
    struct sim_proc *p = ft->target < w->nprocs ? &w->proc[ft->target] : NULL;
    switch (ft->kind) {
    case F_KILL:
        if (p)
            proc_kill(w, p);
        break;
    case F_STOP:
        if (p && p->alive && !p->stopped) {
            trace(w, "proc %d: SIGSTOP for %llu ms", p->id, (unsigned long long)(ft->len / MS));
            p->stopped = true;
            ft->kind = F_CONT; /* the same fault, once more: SIGCONT */
            ft->at = w->now + ft->len;
            post(w, ft->at, EV_FAULT, f, 0);
        }
        break;
    case F_RECONNECT:
        if (p && p->alive && p->conn >= 0 && p->app != APP_HOSTILE) {
            trace(w, "proc %d: reconnects", p->id);
            /* under `open` it runs ungated until it is back, and what it
             * queues meanwhile holds up its siblings' drains: its tenant's
             * limit is not promised (as for a server restart) */
            if (shim_policy_open(w, p)) {
                w->limit_changed[p->tenant] = true;
                w->limit_changed_at[p->tenant] = w->now;
            }
            close_from_proc(w, p->conn);
            shim_disconnected(w, p);
            shim_schedule(w, p);
        }
        break;
    case F_SERVER_RESTART:
        trace(w, "server: killed; back in %llu ms", (unsigned long long)(ft->len / MS));
        /* the next server knows nothing of the limits' windows (and under
         * `open` the processes ran ungated meanwhile) */
        for (int t = 0; t < w->ntenants; t++) {
            w->limit_changed[t] = true;
            w->limit_changed_at[t] = w->now;
        }
        server_stop(w);
        post(w, w->now + ft->len, EV_SERVER_START, 0, 0);
        break;
    case F_CONFIG: {
        struct tenant_plan *tp = &w->tenant[ft->target];
        double limit = tp->config.limit;
        uint64_t r = ft->scripted ? 4 : rng_next(&w->rng) % 4;
        if (r == 4) {
            tp->config = ft->config;
            if (tp->config.limit != limit)
                w->limit_changed[ft->target] = true;
        } else if (r == 0)
            tp->config.share = shares[rng_range(&w->rng, 0, 4)];
        else if (r == 1) {
            tp->config.limit = rng_chance(&w->rng, 0.5) ? 1.0 : (double)rng_range(&w->rng, 20, 90) / 100.0;
            w->limit_changed[ft->target] = true;
        } else if (r == 2)
            tp->config.quantum_ns = rng_range(&w->rng, 5, 50) * MS;
        else {
            tp->config.memory = rng_chance(&w->rng, 0.3) ? 0 : rng_range(&w->rng, 64, 2048) * MIB;
            tp->cap_lowered = true; /* may now be below what it holds */
        }
        if (tp->config.limit != limit)
            w->limit_changed_at[ft->target] = w->now;
        if (tp->config.share > tp->share_most)
            tp->share_most = tp->config.share;
        if (tp->config.share < tp->share_least)
            tp->share_least = tp->config.share;
        if (tp->config.quantum_ns > tp->quantum_most)
            tp->quantum_most = tp->config.quantum_ns;
        trace(w, "tenant %s: configuration changed", tp->name);
        server_tenant_changed(w, ft->target);
        break;
    }
    case F_FORK:
        if (p)
            fork_proc(w, p);
        break;
    case F_CONT:
        if (p && p->stopped) {
            trace(w, "proc %d: SIGCONT", p->id);
            p->stopped = false;
            p->continued_at = w->now;
        }
        break;
    }
}
