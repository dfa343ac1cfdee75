/*
 * What the simulated processes run, and the simulated GPUs.
 *
 * Applications (enum app_kind): a deep queue of items; batches followed by
 * a synchronize and host work (a training step, an inference request);
 * bursts with idle gaps; gang ranks whose items are collectives. An item
 * is one kernel or a run of short ones: it keeps the GPU busy for its
 * length. Some processes also allocate and free device memory.
 *
 * A GPU runs the items queued to it one at a time, in the order they were
 * submitted, whoever submitted them, and records the device time of each
 * process: the truth the figures are judged by. A collective, once at the
 * head, spins until every rank of its job has its collective of the same
 * index at the head of its own GPU, as NCCL's do (or until
 * COLLECTIVE_TIMEOUT_NS, as fakecuda's).
 */
#include "sim.h"

#include <string.h>

/* fakecuda's FAKECUDA_COLLECTIVE_TIMEOUT_NS: a collective missing a rank
 * ends after this; shorter than the grace period, so that work queued
 * behind one whose slice was taken back still runs */
#define COLLECTIVE_TIMEOUT_NS (100 * MS)

/* ---- the GPUs ---------------------------------------------------------------- */

static struct item *head(struct sim_gpu *g)
{
    return g->n ? &g->q[g->head] : NULL;
}

static struct item *at(struct sim_gpu *g, int k)
{
    return &g->q[(g->head + k) % SIM_QUEUE];
}

/* The GPU of rank r of a gang job (its first GPU), or -1. */
static int rank_gpu(const struct sim_proc *p)
{
    return p->ngpus ? p->dev[0].gpu : -1;
}

/* The item at the head of g started: when it ends, if that is known. */
static void start_head(struct world *w, int gi)
{
    struct sim_gpu *g = &w->gpu[gi];
    struct item *it = head(g);
    if (!it)
        return;
    if (!it->started)
        it->started = w->now;
    if (it->collective < 0) {
        post(w, it->started + it->len, EV_GPU, gi, ++g->gen);
        return;
    }
    /* A collective ends when every rank's same collective has started. */
    const struct sim_proc *p = &w->proc[it->proc];
    uint64_t last_start = it->started;
    bool all = true;
    for (int r = 0; r < w->nprocs && all; r++) {
        const struct sim_proc *q = &w->proc[r];
        if (r == it->proc || q->group != p->group || !p->group || !q->alive)
            continue;
        int qg = rank_gpu(q);
        struct item *h = qg >= 0 ? head(&w->gpu[qg]) : NULL;
        if (!h || h->proc != r || h->collective != it->collective || !h->started)
            all = false;
        else if (h->started > last_start)
            last_start = h->started;
    }
    if (all) {
        for (int r = 0; r < w->nprocs; r++) {
            const struct sim_proc *q = &w->proc[r];
            if (q->group != p->group || !q->alive)
                continue;
            int qg = rank_gpu(q);
            post(w, last_start + it->len, EV_GPU, qg, ++w->gpu[qg].gen);
        }
    } else {
        post(w, it->started + COLLECTIVE_TIMEOUT_NS + it->len, EV_GPU, gi, ++g->gen);
    }
}

void gpu_submit(struct world *w, int gi, struct sim_proc *p, uint64_t len, int64_t collective, enum shim_admit admit)
{
    bool excused = admit != SHIM_GATED;
    struct sim_gpu *g = &w->gpu[gi];
    if (g->n >= SIM_QUEUE) {
        fail(w, "GPU %d: %d items queued: something grows without bound", gi, g->n);
        return;
    }
    check_submit(w, gi, p, excused);
    /* a process back from a pause that waits behind this waits for work
     * no slice admitted: not its bound's concern */
    for (int i = 0; excused && i < w->nprocs; i++)
        if (w->proc[i].first_wait_start && w->proc[i].dev[0].gpu == gi)
            w->proc[i].first_wait_excused = true;
    struct item *it = at(g, g->n++);
    *it = (struct item){.proc = p->id, .tenant = p->tenant, .len = len, .collective = collective, .excused = excused,
                        .ungated = admit == SHIM_UNGATED, .submitted = w->now};
    if (g->n == 1)
        start_head(w, gi);
}

static void finish_head(struct world *w, int gi)
{
    struct sim_gpu *g = &w->gpu[gi];
    struct item it = *head(g);
    g->head = (g->head + 1) % SIM_QUEUE;
    g->n--;
    uint64_t busy = w->now - it.started;
    g->busy_ns[it.proc] += busy;
    g->busy_tenant[it.tenant] += busy;
    if (it.ungated)
        g->ungated_busy_ns += busy;
    g->last_tenant_end[it.tenant] = w->now;
    struct sim_proc *p = &w->proc[it.proc];
    for (int i = 0; i < p->ngpus; i++)
        if (p->dev[i].gpu == gi) {
            if (p->in_flight[i] > 0)
                p->in_flight[i]--;
            if (p->alive) {
                shim_item_done(w, p, i, it.submitted);
                post(w, w->now, EV_APP, p->id, p->app_gen);
            }
            break;
        }
    start_head(w, gi);
}

void gpu_event(struct world *w, int gi, uint64_t gen)
{
    struct sim_gpu *g = &w->gpu[gi];
    if (gen != g->gen || !head(g))
        return;
    finish_head(w, gi);
}

void gpu_kill(struct world *w, int proc)
{
    for (int gi = 0; gi < w->ngpus; gi++) {
        struct sim_gpu *g = &w->gpu[gi];
        bool head_gone = g->n && head(g)->proc == proc;
        int kept = 0;
        for (int k = 0; k < g->n; k++) {
            struct item it = *at(g, k);
            if (it.proc == proc) {
                if (k == 0 && it.started) {
                    g->busy_ns[proc] += w->now - it.started;
                    g->busy_tenant[it.tenant] += w->now - it.started;
                }
                continue;
            }
            *at(g, kept++) = it;
        }
        g->n = kept;
        if (head_gone) {
            g->gen++;
            start_head(w, gi);
        }
    }
}

void gpu_excuse(struct world *w, int proc)
{
    for (int gi = 0; gi < w->ngpus; gi++) {
        struct sim_gpu *g = &w->gpu[gi];
        for (int k = 0; k < g->n; k++)
            if (at(g, k)->proc == proc)
                at(g, k)->excused = true;
    }
}

bool gpu_excused_queued(const struct world *w, int gi)
{
    const struct sim_gpu *g = &w->gpu[gi];
    for (int k = 0; k < g->n; k++)
        if (g->q[(g->head + k) % SIM_QUEUE].excused)
            return true;
    return false;
}

uint64_t gpu_ungated_busy(const struct world *w, int gi)
{
    const struct sim_gpu *g = &w->gpu[gi];
    const struct item *h = g->n ? &g->q[g->head] : NULL;
    uint64_t running = h && h->ungated && h->started && h->started < w->now ? w->now - h->started : 0;
    return g->ungated_busy_ns + running;
}

int gpu_tenant_in_flight(const struct world *w, int gi, int except_tenant)
{
    const struct sim_gpu *g = &w->gpu[gi];
    for (int k = 0; k < g->n; k++) {
        const struct item *it = &g->q[(g->head + k) % SIM_QUEUE];
        if (!it->excused && it->tenant != except_tenant)
            return it->tenant;
    }
    return -1;
}

/* ---- applications ------------------------------------------------------------- */

static uint64_t item_len(struct world *w, const struct sim_proc *p)
{
    /* +-10 % around the process's length */
    uint64_t spread = p->item_len / 10;
    return p->item_len - spread + rng_range(&w->rng, 0, 2 * spread);
}

/* Launches one item on its GPU number i if the shim admits it. */
static bool launch(struct world *w, struct sim_proc *p, int i)
{
    enum shim_admit admit = shim_launch(w, p, i);
    if (admit == SHIM_WAIT)
        return false;
    int64_t coll = p->app == APP_RANK ? p->next_collective++ : -1;
    p->in_flight[i]++;
    gpu_submit(w, p->dev[i].gpu, p, item_len(w, p), coll, admit);
    return true;
}

static void memory_step(struct world *w, struct sim_proc *p)
{
    if (!p->uses_memory || p->alloc_pending >= 0 || !rng_chance(&w->rng, 0.05))
        return;
    int which = (int)rng_range(&w->rng, 0, 7);
    if (p->allocs[which]) {
        shim_free(w, p, 0, which);
        p->allocs[which] = 0;
    } else {
        p->alloc_pending = which;
        p->allocs[which] = p->alloc_size;
        shim_alloc(w, p, 0, p->alloc_size, which);
    }
}

void app_alloc_done(struct world *w, struct sim_proc *p, int which, bool ok)
{
    (void)w;
    (void)which;
    if (!ok && p->alloc_pending >= 0)
        p->allocs[p->alloc_pending] = 0; /* refused: CUDA_ERROR_OUT_OF_MEMORY */
    p->alloc_pending = -1;
}

void app_step(struct world *w, struct sim_proc *p)
{
    if (!p->started) {
        p->started = true;
        shim_start(w, p);
        /* ranks that waited for this one to be up go on */
        for (int r = 0; p->app == APP_RANK && r < w->nprocs; r++)
            if (r != p->id && w->proc[r].group == p->group && w->proc[r].started && w->proc[r].alive)
                post(w, w->now, EV_APP, r, w->proc[r].app_gen);
    }
    if (w->now >= p->stop_at || !p->ngpus)
        return;
    memory_step(w, p);
    switch (p->app) {
    case APP_RANK:
        /* NCCL's communicator: no collective before every rank is up */
        for (int r = 0; r < w->nprocs; r++)
            if (w->proc[r].group == p->group && (!w->proc[r].started || !w->proc[r].alive))
                return;
        /* fall through */
    case APP_DEEP:
        for (int i = 0; i < p->ngpus; i++)
            while (p->in_flight[i] < p->depth && launch(w, p, i))
                ;
        break;
    case APP_BURSTS:
        if (w->now >= p->burst_until && w->now < p->idle_until) {
            if (p->dev[0].waiting)
                launch(w, p, 0); /* a launch blocked in the shim goes on waiting */
            break; /* idle: nothing launched */
        }
        if (w->now >= p->idle_until) {
            p->burst_until = w->now + rng_range(&w->rng, 20 * MS, 400 * MS);
            p->idle_until = p->burst_until + rng_range(&w->rng, 5 * MS, 600 * MS);
            post(w, p->idle_until, EV_APP, p->id, p->app_gen);
            p->returning = true;
            p->first_wait_start = w->now;
            p->first_wait_limited = w->tenant[p->tenant].config.limit < 1.0;
            p->first_wait_excused = gpu_excused_queued(w, p->dev[0].gpu);
            p->first_wait_behind = p->in_flight[0] > 0;
        }
        while (p->in_flight[0] < p->depth && launch(w, p, 0))
            p->first_wait_start = 0; /* admitted at once: no wait */
        break;
    case APP_SYNC:
        if (p->in_host && w->now < p->host_until)
            break;
        p->in_host = false;
        if (p->syncing) {
            if (p->in_flight[0] > 0)
                break;
            p->syncing = false;
            shim_synced(w, p, 0);
            p->in_host = true;
            p->issued = 0;
            p->host_until = w->now + p->host_ns;
            post(w, p->host_until, EV_APP, p->id, p->app_gen);
            break;
        }
        while (p->issued < p->batch && launch(w, p, 0))
            p->issued++;
        if (p->issued == p->batch)
            p->syncing = true;
        break;
    case APP_HOSTILE:
    case APP_SCRIPT:
    case APP_DRIVEN:
        break;
    }
}

void app_admitted(struct world *w, struct sim_proc *p, int i)
{
    (void)i;
    post(w, w->now, EV_APP, p->id, p->app_gen);
}

