/*
 * The named cases: what exploration found, written down as runs of the
 * simulation that meet it whatever the seed, each under the invariants of
 * every run (sim_check.c). A seed means something for one version of
 * scenario_make only; a case keeps its meaning when the generator changes.
 *
 *   sim --case NAME     one case (with --seed N: its random details,
 *                       transport delays and item lengths, from seed N)
 *   sim --cases         every case, and every scripted case (sim_script.c)
 *
 * Each case says what broke before, and each fails on the code or the
 * check it names as it was then.
 */
#include "sim.h"

#include <stddef.h>
#include <string.h>

/* One GPU or more, a policy for a server that is down, figures from 1 s. */
static void node(struct world *w, int gpus, enum on_server_down policy)
{
    w->ngpus = gpus;
    w->policy = policy;
    w->warmup = w->end / 10;
}

/* A deep queue of `len` items, `depth` of them at most, on GPU `gpu`. */
static struct sim_proc *deep(struct world *w, int tenant, int gpu, uint64_t len, int depth)
{
    struct sim_proc *p = scenario_proc(w, tenant, APP_DEEP);
    p->dev[0].gpu = gpu;
    p->item_len = len;
    p->depth = depth;
    return p;
}

/* Processes written as rows: what a seed's node was, by hand. */
struct proc_row {
    int tenant;
    enum app_kind app;
    uint64_t item_us;
    int depth, batch;
    uint64_t host_us, start_ms, alloc_mib; /* alloc_mib 0: no device memory */
};

static void add_procs(struct world *w, const struct proc_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct sim_proc *p = scenario_proc(w, rows[i].tenant, rows[i].app);
        p->item_len = rows[i].item_us * US;
        p->depth = rows[i].depth;
        p->batch = rows[i].batch;
        p->host_ns = rows[i].host_us * US;
        p->start_at = rows[i].start_ms * MS;
        p->uses_memory = rows[i].alloc_mib > 0;
        p->alloc_size = rows[i].alloc_mib * MIB;
    }
}

/* Tenants as rows, in order (t0, t1...): what a seed's node was, by hand.
 * gang: the plan's (its ranks run collectives); gang_mode: the tenant's
 * setting. */
struct tenant_row {
    double share, limit;
    uint64_t quantum_ms, memory_mib;
    enum tenant_class class;
    enum gang_mode gang_mode;
    bool gang;
};

static void add_tenants(struct world *w, const struct tenant_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct tenant_plan *tp = scenario_tenant(w, rows[i].share);
        tp->config.limit = rows[i].limit;
        tp->config.quantum_ns = rows[i].quantum_ms * MS;
        tp->config.memory = rows[i].memory_mib * MIB;
        tp->config.class = rows[i].class;
        tp->config.gang = rows[i].gang_mode;
        tp->gang = rows[i].gang;
    }
}

/* Processes written as rows with their GPU and, for a gang's ranks, their
 * job (group; 0 for none): a seed's node of several GPUs, by hand. */
struct placed_row {
    int gpu, group;
    struct proc_row proc;
};

static void add_placed(struct world *w, const struct placed_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        add_procs(w, &rows[i].proc, 1);
        struct sim_proc *p = &w->proc[w->nprocs - 1];
        p->dev[0].gpu = rows[i].gpu;
        p->group = rows[i].group;
    }
}

/* A gang's rank killed 0.2 s in, before its other rank had started: the
 * job's communicator never forms, so the gang never runs. The check said
 * "gang t0 never ran"; it now asks a gang to run only once all its ranks
 * have lived GANG_PROGRESS_NS together (sim_check.c). */
static void gang_rank_killed_early(struct world *w)
{
    node(w, 2, ON_DOWN_WAIT);
    struct tenant_plan *gang = scenario_tenant(w, 2);
    gang->gang = true;
    for (int r = 0; r < 2; r++) {
        struct sim_proc *p = scenario_proc(w, 0, APP_RANK);
        p->group = 1;
        p->dev[0].gpu = r;
        p->item_len = 500 * US;
        p->depth = 4;
        p->start_at = r * 300 * MS;
    }
    for (int g = 0; g < 2; g++) {
        scenario_tenant(w, 1);
        deep(w, 1 + g, g, 1 * MS, 8);
    }
    scenario_fault(w, F_KILL, 0, 200 * MS, 0);
    scenario_describe(w, "gang-rank-killed-early (named case)");
}

/* A tenant alone on its GPU under a limit of 0.05 comes back from pauses
 * and waits out its limit (up to 19 of its slices), then its limit is
 * lifted at 5 s. The check skipped returning processes only when their
 * tenant's limit was below 1 at the end, and failed on waits its limit
 * had made before the change; it now counts only the waits that began
 * with no limit and saw no change of it, and those after 5 s are still
 * judged. */
static void returning_after_limit_lifted(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    struct tenant_plan *t = scenario_tenant(w, 1);
    t->config.limit = 0.05;
    t->config.quantum_ns = 40 * MS;
    struct sim_proc *p = scenario_proc(w, 0, APP_BURSTS);
    p->item_len = 500 * US;
    p->depth = 4;
    struct fault *f = scenario_fault(w, F_CONFIG, 0, 5000 * MS, 0);
    f->scripted = true;
    f->config = t->config;
    f->config.limit = 1.0;
    scenario_describe(w, "returning-after-limit-lifted (named case)");
}

/* A batch tenant whose policy is `open` loses its connection while a
 * latency tenant shares its GPU: meanwhile it launches ungated (items of
 * 5 ms, 15 deep), and when it is granted a slice again that work is still
 * queued ahead of anything its slice admits. A latency tenant due then
 * waits for all of it, which no GRANT's bound on work ahead covers. The
 * check counted only what the slice admitted (and failed: due 27.5 ms,
 * over 22.5); work queued outside any slice is not the slice's, its own
 * holder's included, and a preemption promises nothing while it is there. */
static void latency_behind_ungated_work(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    struct tenant_plan *batch = scenario_tenant(w, 1);
    batch->config.on_server_down = ON_DOWN_OPEN;
    batch->config.quantum_ns = 14 * MS;
    deep(w, 0, 0, 5 * MS, 15);
    struct tenant_plan *latency = scenario_tenant(w, 3);
    latency->config.class = CLASS_LATENCY;
    latency->config.quantum_ns = 22 * MS;
    struct sim_proc *l = scenario_proc(w, 1, APP_SYNC);
    l->item_len = 2 * MS;
    l->batch = 32;
    l->host_ns = 1700 * US;
    for (int k = 0; k < 8; k++)
        scenario_fault(w, F_RECONNECT, 0, (1000 + 1000 * (uint64_t)k + 37 * (uint64_t)k) * MS, 0);
    scenario_describe(w, "latency-behind-ungated-work (named case)");
}

/* 40 processes of one tenant, each with up to 32 items in flight, and the
 * server down for 0.6 s under `open`: every process launches ungated, and
 * the GPU's queue holds what all of them have in flight (1280 items). The
 * simulated GPU held 512 and failed ("something grows without bound");
 * it holds SIM_QUEUE, room for every process's items. */
static void open_restart_many_processes(struct world *w)
{
    node(w, 1, ON_DOWN_OPEN);
    scenario_tenant(w, 1);
    scenario_tenant(w, 1);
    for (int k = 0; k < 40; k++) {
        struct sim_proc *p = scenario_proc(w, k % 2, APP_SYNC);
        p->item_len = 1 * MS;
        p->batch = 32;
        p->host_ns = 500 * US;
    }
    scenario_fault(w, F_SERVER_RESTART, 0, 2000 * MS, 600 * MS);
    scenario_describe(w, "open-restart-many-processes (named case)");
}

/* Found by a fresh seed (208216; the exploration issue's "tenant of 16
 * processes, share 1 of 14, waited 4.7 s against a bound of 3.1 s"). Four
 * tenants of share 1 on one GPU: three under limits (0.68, 0.58, and 0.42
 * for a latency tenant) with short slices, and t3, unlimited, of 16
 * processes whose drains stretch each of its slices to about 190 ms. The
 * limited three take their slices one after another and are then all
 * within their limits' windows at once, so t3 is the only one that may
 * have the GPU. Each came back from its window raised only to the others
 * in the running and to the GPU's floor, which had not moved since t3
 * began to run ahead (it rose only when a tenant became active or left):
 * the three kept one another behind, and t3 ran 360 ms of virtual time
 * ahead of them. When t0 (share 10) arrived at 4.1 s, at that floor, t3
 * waited 4.7 s, past its bound. The scheduler now raises the floor to the
 * virtual time of each slice it grants outside a gang (the least of those
 * in the running), so a tenant back from its limit starts there (failed
 * on 2 of seeds 1-8 before; meson runs the eight). */
static void limited_neighbours_run_ahead(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {
        {10, 1, 37, 0, CLASS_BATCH, GANG_OFF, false},  {1, 0.68, 23, 0, CLASS_BATCH, GANG_OFF, false},
        {1, 0.58, 9, 0, CLASS_BATCH, GANG_OFF, false}, {1, 1, 49, 0, CLASS_BATCH, GANG_OFF, false},
        {1, 0.42, 39, 0, CLASS_LATENCY, GANG_OFF, false},
    };
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* tenant, app, item (us), depth, batch, host (us), start (ms) */
    static const struct proc_row procs[] = {
        {0, APP_SYNC, 20, 7, 4, 994, 4116, 0},    {1, APP_SYNC, 500, 2, 1, 4380, 0, 0},
        {1, APP_BURSTS, 50, 2, 1, 2984, 0, 0},    {1, APP_DEEP, 2000, 6, 1, 617, 0, 0},
        {2, APP_SYNC, 20000, 2, 4, 3215, 0, 0},   {2, APP_SYNC, 200, 12, 1, 3068, 0, 0},
        {2, APP_SYNC, 5000, 6, 4, 4131, 4661, 0}, {3, APP_DEEP, 50000, 2, 32, 3748, 0, 0},
        {3, APP_DEEP, 200, 10, 32, 2500, 3062, 0}, {3, APP_DEEP, 200, 11, 32, 338, 3508, 0},
        {3, APP_BURSTS, 2000, 4, 32, 989, 0, 0},  {3, APP_DEEP, 5000, 3, 1, 3844, 0, 0},
        {3, APP_DEEP, 200, 15, 1, 895, 4705, 0},  {3, APP_BURSTS, 20, 14, 1, 2013, 2725, 0},
        {3, APP_DEEP, 50000, 2, 1, 4920, 136, 0}, {3, APP_SYNC, 5000, 8, 1, 3571, 0, 0},
        {3, APP_DEEP, 1000, 15, 1, 2408, 0, 0},   {3, APP_BURSTS, 50, 14, 32, 3216, 0, 0},
        {3, APP_SYNC, 50000, 2, 32, 1375, 0, 0},  {3, APP_BURSTS, 5000, 10, 32, 2752, 0, 0},
        {3, APP_DEEP, 200, 5, 32, 2857, 1836, 0}, {3, APP_SYNC, 20000, 2, 1, 821, 0, 0},
        {3, APP_SYNC, 2000, 11, 4, 2254, 2788, 0}, {4, APP_DEEP, 500, 10, 4, 1246, 0, 0},
    };
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_describe(w, "limited-neighbours-run-ahead (named case)");
}

/* A tenant alone on its GPU under a limit of 0.23, whose policy is
 * `open`: one process keeps a deep queue of 1 ms items, the other runs
 * batches of 32 items of 50 ms. The second loses its connection at 8.9 s
 * and, ungated meanwhile, queues a whole batch (1.6 s of work); the
 * first's next slice then drains behind it, past its grace, to the run's
 * end. The check judged the tenant's held time against its limit and
 * failed (3.0 s of 10 s, over 0.23); under `open` a process with no server
 * runs ungated, so the limit is not promised for its tenant from then on,
 * as after a server restart (fresh seed 31089834). */
static void open_reconnect_under_limit(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    struct tenant_plan *t = scenario_tenant(w, 10);
    t->config.limit = 0.23;
    t->config.quantum_ns = 42 * MS;
    t->config.on_server_down = ON_DOWN_OPEN;
    deep(w, 0, 0, 1 * MS, 7);
    struct sim_proc *p = scenario_proc(w, 0, APP_SYNC);
    p->item_len = 50 * MS;
    p->batch = 32;
    p->host_ns = 7 * US;
    scenario_fault(w, F_RECONNECT, 1, 8900 * MS, 0);
    scenario_describe(w, "open-reconnect-under-limit (named case)");
}

/* A tenant alone on its GPU under `open`: one process runs batches of 32
 * items of 50 ms, four others come and go in bursts (items of 20 ms). The
 * first loses its connection now and then and, ungated meanwhile, queues a
 * whole batch (1.6 s of work). A burst that comes back then waits for its
 * first slice behind that work: its tenant's slice drains only once the
 * work before it has run. The check judged that wait by the bound of a
 * slice and its siblings' drains and failed (615 ms, over 480; fresh seed
 * 31036171); a wait with work no slice admitted on the GPU is not counted
 * (sim_app.c marks it). */
static void returning_behind_ungated_work(struct world *w)
{
    node(w, 1, ON_DOWN_OPEN);
    struct tenant_plan *t = scenario_tenant(w, 1);
    t->config.quantum_ns = 42 * MS;
    struct sim_proc *batch = scenario_proc(w, 0, APP_SYNC);
    batch->item_len = 50 * MS;
    batch->batch = 32;
    batch->host_ns = 725 * US;
    for (int k = 0; k < 4; k++) {
        struct sim_proc *bursts = scenario_proc(w, 0, APP_BURSTS);
        bursts->item_len = 20 * MS;
        bursts->depth = 2;
    }
    deep(w, 0, 0, 1 * MS, 16);
    for (int k = 0; k < 11; k++)
        scenario_fault(w, F_RECONNECT, 0, (1000 + 800 * (uint64_t)k) * MS, 0);
    scenario_describe(w, "returning-behind-ungated-work (named case)");
}

/* One tenant of 15 processes alone on its GPU with a quantum of 5 ms: its
 * slice is extended again and again, and the GPU runs its processes' work
 * one item after another. One comes back from a pause with items of 20 ms
 * while its last burst's are still queued behind its siblings' (about 240
 * ms of them): its first launch waits for those to finish, then its own
 * turn in the queue. The check allowed one drain of the tenant's queue and
 * failed (560 ms, over 526; fresh seed 41005110); a process with work of
 * its own in flight when it comes back is allowed that work's drain too. */
static void returning_behind_own_work(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    struct tenant_plan *t = scenario_tenant(w, 10);
    t->config.quantum_ns = 5 * MS;
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {
        {0, APP_DEEP, 2000, 15, 1, 1541, 0, 0},      {0, APP_DEEP, 200, 2, 4, 1115, 0, 0},
        {0, APP_BURSTS, 200, 2, 1, 2643, 0, 146},    {0, APP_DEEP, 5000, 11, 32, 1001, 0, 210},
        {0, APP_DEEP, 500, 10, 1, 3123, 1327, 17},   {0, APP_SYNC, 50000, 2, 4, 1738, 0, 0},
        {0, APP_SYNC, 5000, 3, 4, 2742, 0, 0},       {0, APP_BURSTS, 20000, 2, 32, 2315, 0, 0},
        {0, APP_SYNC, 50, 3, 4, 130, 0, 13},         {0, APP_BURSTS, 1000, 5, 1, 1506, 0, 0},
        {0, APP_BURSTS, 50, 12, 4, 942, 3528, 255},  {0, APP_DEEP, 1000, 6, 32, 4257, 1547, 81},
        {0, APP_BURSTS, 1000, 8, 4, 3265, 4709, 242}, {0, APP_SYNC, 50000, 2, 4, 3359, 0, 225},
        {0, APP_SYNC, 50000, 2, 32, 2210, 0, 146},
    };
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_describe(w, "returning-behind-own-work (named case)");
}

/* Six tenants on one GPU under `open`. t3 (share 10) has a process that
 * runs batches of 32 items of 50 ms; it loses its connection late in the
 * run and, ungated meanwhile, queues the rest of a batch (over a second of
 * work) ahead of everyone. Each slice after that drains behind it and ends
 * at the grace period: t0 waited 1.59 s for its next slice, over its bound
 * of 1.56 s (fresh seed 51061449, its connection lost at 8.74 s; at 9.2 s
 * here, where the check failed on 3 of seeds 1-8). The server neither knew
 * of that work nor could take the GPU back from it: a wait is now measured
 * less the device time spent meanwhile on work queued ungated (sim_shim.c,
 * wait_so_far). */
static void waiting_behind_ungated_work(struct world *w)
{
    node(w, 1, ON_DOWN_OPEN);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {
        {1, 1, 30, 0, CLASS_BATCH, GANG_AUTO, false},     {1, 0.2, 32, 0, CLASS_BATCH, GANG_AUTO, false},
        {3, 1, 50, 253, CLASS_BATCH, GANG_AUTO, false},   {10, 1, 15, 0, CLASS_BATCH, GANG_AUTO, false},
        {1, 0.67, 5, 1489, CLASS_BATCH, GANG_AUTO, false}, {1, 1, 24, 1614, CLASS_BATCH, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {
        {0, APP_SYNC, 50000, 2, 1, 4962, 0, 0},    {0, APP_DEEP, 1000, 4, 32, 4372, 0, 69},
        {0, APP_BURSTS, 2000, 15, 1, 762, 0, 0},   {1, APP_DEEP, 20000, 2, 4, 1903, 2538, 0},
        {2, APP_SYNC, 50, 2, 4, 1965, 0, 0},       {2, APP_SYNC, 50, 14, 4, 4250, 0, 0},
        {2, APP_SYNC, 2000, 4, 1, 781, 0, 0},      {3, APP_SYNC, 50000, 2, 32, 3812, 0, 0},
        {3, APP_SYNC, 20, 7, 4, 1432, 1025, 217},  {4, APP_DEEP, 20000, 2, 1, 3628, 0, 228},
        {5, APP_BURSTS, 50000, 2, 1, 3096, 0, 189},
    };
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_fault(w, F_RECONNECT, 7, 9200 * MS, 0);
    scenario_describe(w, "waiting-behind-ungated-work (named case)");
}

/* A clean run: three tenants of shares 1, 2 and 1 (the last a latency
 * tenant, whose turns preempt the others' slices), deep queues, one
 * quantum of 40 ms. The run ended 26 ms into a slice of t0, with t1 next:
 * t1 had 49.43 % of the device time against a weight of 50 %, 51 ms
 * short. The check allowed the larger of one slice of t1's (50 ms) and
 * its part of a round of the others' (50 ms), below what fair queuing
 * promises: half of its own slice and half of each other's, 75 ms
 * (docs/design/scheduler.md, "How close to the weights"; fresh seed 31031273). Where
 * the end falls is up to the seed: the old check failed on 6 of seeds
 * 1-200 (meson runs the 200, about a second). */
static void share_lag_mid_slice(struct world *w)
{
    node(w, 1, ON_DOWN_OPEN);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {
        {1, 1, 40, 0, CLASS_BATCH, GANG_AUTO, false}, {2, 1, 40, 0, CLASS_BATCH, GANG_AUTO, false},
        {1, 1, 40, 0, CLASS_LATENCY, GANG_AUTO, false}};
    add_tenants(w, tenants, 3);
    deep(w, 0, 0, 1100 * US, 16);
    deep(w, 1, 0, 4100 * US, 13);
    deep(w, 2, 0, 500 * US, 10);
    w->clean = true;
    scenario_describe(w, "share-lag-mid-slice (named case)");
}

/* t0 (share 10, one process with items of 5 ms) and t1, a latency
 * tenant of share 3 with sixteen processes, several with items of 20 and
 * 50 ms; t0's process asks 1 ms after them and is killed at 0.7 s. t1
 * is granted first; its processes admit their first items before any
 * estimate exists, the slice's drain runs to the grace period, and t0
 * waits 282 ms. The check judges such a wait by each tenant's longest
 * slice, which it measured as its processes' holds taken together: alone
 * after 0.7 s, t1's sixteen never all let go at once, so its longest
 * slice read as 0 and the bound as 212 ms (fresh seed 71382216). A
 * slice's length is now also each process's own hold (sim_shim.c,
 * hold_end). */
static void overlapping_holds(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{10, 1, 25, 805, CLASS_BATCH, GANG_AUTO, false},
                                                {3, 1, 32, 0, CLASS_LATENCY, GANG_AUTO, false}};
    add_tenants(w, tenants, 2);
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {
        {0, APP_DEEP, 5000, 11, 1, 2339, 1, 168},  {1, APP_DEEP, 50000, 2, 1, 566, 0, 0},
        {1, APP_DEEP, 200, 4, 4, 1914, 855, 155},  {1, APP_DEEP, 20000, 2, 32, 1514, 0, 76},
        {1, APP_DEEP, 2000, 2, 32, 2778, 0, 0},    {1, APP_DEEP, 50000, 2, 1, 2667, 0, 0},
        {1, APP_SYNC, 20, 9, 4, 815, 0, 164},      {1, APP_SYNC, 1000, 10, 1, 4527, 2438, 0},
        {1, APP_DEEP, 2000, 10, 1, 2218, 0, 30},   {1, APP_SYNC, 50, 12, 32, 1199, 0, 85},
        {1, APP_BURSTS, 500, 12, 1, 2255, 0, 85},  {1, APP_DEEP, 200, 15, 32, 3283, 0, 0},
        {1, APP_SYNC, 50000, 2, 32, 1807, 0, 0},   {1, APP_BURSTS, 2000, 10, 1, 3754, 0, 0},
        {1, APP_DEEP, 1000, 3, 1, 2534, 0, 0},     {1, APP_SYNC, 50000, 2, 32, 4271, 0, 0},
        {1, APP_DEEP, 1000, 13, 4, 2212, 2306, 0},
    };
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_fault(w, F_KILL, 0, 703 * MS, 0);
    scenario_describe(w, "overlapping-holds (named case)");
}

/* Two GPUs, a batch tenant with a deep queue on each, and a hostile
 * latency tenant whose two connections declare their slots again and
 * again, as GPU 0 and then GPU 1, every 0.1 to 2 ms (the sim's
 * H_DEVICE_FLOOD): the bound on the batch holders' work ahead changes
 * over and over. Each change sent the holders a GRANT at once, which
 * filled a holder's socket until the server dropped it; the GRANTs for a
 * new bound are now at most one per GPU per BOUND_NOTICE_GAP_NS (checked
 * as the simulation's server sends them: sim_server.c), and the bound
 * comes only from a tenant that named the GPU for BOUND_SETTLE_NS. */
static void latency_device_flood(struct world *w)
{
    node(w, 2, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{1, 1, 20, 0, CLASS_BATCH, GANG_OFF, false},
                                                {1, 1, 20, 0, CLASS_LATENCY, GANG_OFF, false}};
    add_tenants(w, tenants, 2);
    w->tenant[1].hostile = true;
    deep(w, 0, 0, 1 * MS, 16);
    deep(w, 0, 1, 1 * MS, 16);
    for (int c = 0; c < 2; c++) {
        struct sim_proc *p = scenario_proc(w, 1, APP_HOSTILE);
        p->hostile = H_DEVICE_FLOOD;
        p->dev[0].gpu = c;
    }
    scenario_describe(w, "latency-device-flood (named case)");
}

/* A gang of two ranks on GPUs 0 and 1 (share 1, a quantum of 10 ms; its
 * ranks' collectives wait for each other up to the timeout, so each of
 * its slices drains for about 100 ms), and t1 with a deep queue on GPU 1.
 * Each time the gang asked while t1 held GPU 1, it was next everywhere
 * (t1 held a slice, so it did not wait) and gathered, and GPU 1 was
 * reserved for it when t1's slice ended, however far behind it t1 was in
 * virtual time. Its rank on GPU 0 is then killed, and the tenant, a gang
 * no more, waits on GPU 1 while t1 catches up: in fresh seed 61034498
 * (t1 of share 2, the rank killed at 4.2 s, the gang 2.6 s of virtual
 * time ahead there) 5.5 s, over the 5 s a gang is promised; two more
 * fresh seeds met the same. Here t1 has share 10 and the rank dies at 3
 * s: the old scheduler broke the bound on 13 of seeds 1-16. A gang now
 * gathers only once no holder of one of its GPUs would still be behind
 * it at the end of its slice (tokenserver/sched.c,
 * gang_next_everywhere). */
static void gang_behind_holder(struct world *w)
{
    node(w, 2, ON_DOWN_OPEN);
    struct tenant_plan *gang = scenario_tenant(w, 1);
    gang->config.quantum_ns = 10 * MS;
    gang->gang = true;
    for (int r = 0; r < 2; r++) {
        struct sim_proc *p = scenario_proc(w, 0, APP_RANK);
        p->group = 1;
        p->dev[0].gpu = r;
        p->item_len = 300 * US;
        p->depth = 6 - r;
        p->start_at = r * 149 * MS;
    }
    struct tenant_plan *t1 = scenario_tenant(w, 10);
    t1->config.quantum_ns = 32 * MS;
    struct sim_proc *p = deep(w, 1, 1, 5 * MS, 9);
    p->batch = 32;
    p->host_ns = 2013 * US;
    scenario_fault(w, F_KILL, 0, 3000 * MS, 0);
    scenario_describe(w, "gang-behind-holder (named case)");
}

/* Two gangs on GPUs 0 and 1: t0 (share 1) and t1 (share 2), which also
 * needs GPU 2, where plain t2 (share 2) keeps a deep queue. t1 was often
 * not next on GPU 2 while t0 ran on GPUs 0 and 1, and its virtual time
 * there stood still; at its starts it was raised only to the tenants in
 * the running that were not gangs, none on GPUs 0 and 1. By 4.4 s it was
 * 2.7 s of virtual time behind t0 there. t2 is killed at 4.7 s; t1, free
 * of GPU 2, spent what it had banked, and t0 waited 5.3 s for its turn,
 * over the 5 s a gang is promised (fresh seed 61050101). A gang starting
 * on a GPU now starts no lower than the GPU's floor either, which t0's
 * slices raised, less the longest slice (tokenserver/sched.c,
 * gang_try_start). The old scheduler broke the bound on 9 of seeds 1-16,
 * seed 1 not among them (meson runs 1-8). */
static void gangs_one_held_elsewhere(struct world *w)
{
    node(w, 3, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{1, 1, 27, 0, CLASS_BATCH, GANG_AUTO, true},
                                                {2, 1, 13, 0, CLASS_BATCH, GANG_AUTO, true},
                                                {2, 1, 22, 0, CLASS_BATCH, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    static const struct {
        int tenant, gpu, depth;
        uint64_t item_us, start_ms;
    } ranks[] = {{0, 0, 8, 2000, 0}, {0, 1, 3, 2000, 71}, {1, 0, 2, 700, 0}, {1, 1, 8, 700, 241}, {1, 2, 2, 700, 86}};
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
        struct sim_proc *p = scenario_proc(w, ranks[r].tenant, APP_RANK);
        p->group = 1 + ranks[r].tenant;
        p->dev[0].gpu = ranks[r].gpu;
        p->depth = ranks[r].depth;
        p->item_len = ranks[r].item_us * US;
        p->start_at = ranks[r].start_ms * MS;
    }
    struct sim_proc *p = deep(w, 2, 2, 1 * MS, 16);
    p->batch = 32;
    p->host_ns = 2885 * US;
    scenario_fault(w, F_KILL, p->id, 4665 * MS, 0);
    scenario_describe(w, "gangs-one-held-elsewhere (named case)");
}

/* A latency tenant (t0, quantum 30 ms) of three processes with bursts,
 * each keeping one item of 20 us queued while its burst lasts, and a batch
 * tenant with a deep queue. A launch with a slice held takes the fast
 * path, which reads no clock: the shim learns of it at the gate thread's
 * next look, at most 5 ms away while the program keeps emptying its queue,
 * counts 2 ms of idleness from that look and sees them at a look up to
 * 3 ms later. A burst that ends just after a look leaves the slice held
 * idle up to 10 ms, and more when the gate thread wakes late (half its
 * wake-ups here, a busy machine). The check allowed 10 ms in all and
 * failed nearly every run of this node; a fresh seed (81201639) met it
 * once in 350 000 runs, 10.04 ms. The bound now follows from the shim's
 * constants and the gate thread's lateness (sim_shim.c, IDLE_HOLD_NS). */
static void idle_after_fast_launches(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    w->late_wakes = 0.5; /* a busy machine: the gate thread often wakes late */
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{3, 1, 30, 0, CLASS_LATENCY, GANG_AUTO, false},
                                                {1, 1, 20, 0, CLASS_BATCH, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {{0, APP_BURSTS, 20, 1, 1, 0, 0, 0},
                                            {0, APP_BURSTS, 20, 1, 1, 0, 0, 0},
                                            {0, APP_BURSTS, 20, 1, 1, 0, 0, 0},
                                            {1, APP_DEEP, 2000, 8, 1, 0, 0, 0}};
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_describe(w, "idle-after-fast-launches (named case)");
}

/* A latency tenant (t0, share 3) whose two processes take and give back
 * slices of 0.1 ms about twice a millisecond, beside t1 under a limit of
 * 0.05 whose slices drain 80 ms of work each: after each, t1 may not run
 * again for over a second, and the server arms the GPU's timer for that
 * moment again at every GRANT and RELEASE of t0, to the deadline it
 * already had. The simulated loop queued an event for every arming and
 * dropped the superseded ones only when their time came, so thousands
 * waited at once and the queue of 4096 filled: fresh seed 391060844 (its
 * t1 under a limit of 0.2, stopped 430 ms while it held) failed so at
 * 8.8 s, with nothing wrong at the server. A full queue now first drops
 * the timer events no arming will fire (sim_world.c,
 * drop_superseded_timers); without that every one of seeds 1-8 fails. */
static void timer_rearmed_beside_limited_tenant(struct world *w)
{
    node(w, 1, ON_DOWN_OPEN);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{3, 1, 43, 0, CLASS_LATENCY, GANG_AUTO, false},
                                                {1, 0.02, 13, 0, CLASS_BATCH, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {{0, APP_SYNC, 20, 2, 4, 365, 0, 0},
                                            {0, APP_SYNC, 20, 2, 4, 365, 0, 0},
                                            {1, APP_SYNC, 50000, 2, 4, 95, 0, 0}};
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_describe(w, "timer-rearmed-beside-limited-tenant (named case)");
}

/* A gang of three ranks (t0, items of 0.8 ms) on GPUs 0, 1 and 2, and a
 * plain tenant on each: t2 on GPU 0 and t1 on GPU 1 synchronize after
 * items of 50 ms, t3 keeps a deep queue on GPU 2; t2's process is killed
 * at 6.49 s. A slice of t1 or t2 drains its 50 ms items past its deadline
 * for longer than NOT_YIELDING_NS, and the two drain in turn, one whenever
 * the other's slice ends. A gathering gang did not reserve while one of
 * its GPUs was held that long past its deadline, so t0 gathered only once
 * t2's process was gone: it waited 6.3 s for GPU 0, over the 5 s a gang
 * is promised (seed 12046 of the generator then). A gang whose gathering
 * gave up now reserves at its next one while others drain, and keeps what
 * it reserves until their drains end, the grace at most
 * (tokenserver/sched.c, gang_give_up and gang_blocked); without that
 * every one of seeds 1-200 breaks the bound. */
static void gang_starved_by_alternating_drains(struct world *w)
{
    node(w, 3, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {
        {1, 1, 20, 0, CLASS_BATCH, GANG_AUTO, true},  {1, 1, 23, 0, CLASS_BATCH, GANG_AUTO, false},
        {1, 1, 19, 0, CLASS_BATCH, GANG_AUTO, false}, {1, 1, 31, 0, CLASS_BATCH, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* gpu, group, {tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB)} */
    static const struct placed_row procs[] = {
        {0, 1, {0, APP_RANK, 800, 5, 4, 0, 0, 0}},      {1, 1, {0, APP_RANK, 800, 3, 4, 0, 213, 0}},
        {2, 1, {0, APP_RANK, 800, 4, 4, 0, 183, 0}},    {1, 0, {1, APP_SYNC, 50000, 2, 4, 1151, 0, 0}},
        {0, 0, {2, APP_SYNC, 50000, 2, 1, 1041, 0, 0}}, {2, 0, {3, APP_DEEP, 200, 3, 32, 1290, 0, 0}},
    };
    add_placed(w, procs, sizeof procs / sizeof procs[0]);
    scenario_fault(w, F_KILL, 4, 6491 * MS, 0);
    scenario_describe(w, "gang-starved-by-alternating-drains (named case)");
}

/* Six tenants on three GPUs, five of them latency tenants; t4, under a
 * limit of 0.41, has 16 processes, most of them on GPU 2, several with
 * items of 20 and 50 ms in batches of 32, so that its slices there drain
 * past the grace period (250 ms) and are taken back. Such a holder was
 * charged up to then and its late release ignored: t4 held GPU 2 4.7 s of
 * 10, over its limit (seed 35660 of the generator then). A late release
 * now charges the drain up to when it was sent, to virtual time, figures
 * and limit, one more grace period at most (tokenserver/sched.c,
 * charge_late_drain, from on_release). Without it the limit breaks on 180
 * of seeds 1-200, seed 1 not among them (meson runs 1-8). */
static void late_drains_under_limit(struct world *w)
{
    node(w, 3, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {
        {10, 1, 8, 0, CLASS_LATENCY, GANG_OFF, false},    {1, 1, 17, 0, CLASS_LATENCY, GANG_OFF, false},
        {1, 1, 47, 861, CLASS_LATENCY, GANG_OFF, false},  {1, 1, 20, 1988, CLASS_LATENCY, GANG_OFF, false},
        {1, 0.41, 26, 1449, CLASS_BATCH, GANG_OFF, false}, {2, 1, 29, 1498, CLASS_LATENCY, GANG_OFF, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    w->tenant[1].config.on_server_down = ON_DOWN_WAIT;
    w->tenant[5].config.on_server_down = ON_DOWN_OPEN;
    /* gpu, group, {tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB)} */
    static const struct placed_row procs[] = {
        {0, 0, {0, APP_DEEP, 2000, 2, 4, 3226, 4917, 0}},      {1, 0, {1, APP_SYNC, 2000, 7, 4, 2576, 3309, 0}},
        {1, 0, {1, APP_SYNC, 20000, 2, 32, 1315, 0, 0}},       {0, 0, {2, APP_BURSTS, 50, 14, 4, 418, 2558, 0}},
        {1, 0, {3, APP_SYNC, 5000, 11, 4, 784, 0, 0}},         {1, 0, {3, APP_BURSTS, 20, 9, 32, 893, 0, 0}},
        {1, 0, {3, APP_SYNC, 50, 8, 4, 4330, 0, 74}},          {2, 0, {4, APP_DEEP, 50000, 2, 32, 1736, 0, 0}},
        {0, 0, {4, APP_DEEP, 50000, 2, 32, 1262, 0, 0}},       {2, 0, {4, APP_DEEP, 2000, 15, 32, 2319, 2201, 234}},
        {2, 0, {4, APP_SYNC, 20000, 2, 1, 3227, 0, 0}},        {2, 0, {4, APP_SYNC, 200, 7, 4, 185, 0, 0}},
        {2, 0, {4, APP_SYNC, 200, 5, 32, 1819, 3086, 0}},      {2, 0, {4, APP_BURSTS, 1000, 4, 32, 3309, 0, 239}},
        {2, 0, {4, APP_SYNC, 20, 14, 32, 2882, 0, 0}},         {2, 0, {4, APP_DEEP, 20000, 2, 1, 1144, 1832, 0}},
        {2, 0, {4, APP_BURSTS, 50000, 2, 32, 2473, 0, 0}},     {2, 0, {4, APP_BURSTS, 5000, 10, 32, 1755, 4291, 0}},
        {2, 0, {4, APP_SYNC, 50000, 2, 4, 2952, 0, 0}},        {1, 0, {4, APP_DEEP, 200, 13, 4, 873, 0, 158}},
        {2, 0, {4, APP_BURSTS, 50000, 2, 1, 2074, 0, 0}},      {2, 0, {4, APP_DEEP, 20000, 2, 32, 629, 4558, 256}},
        {0, 0, {4, APP_BURSTS, 1000, 11, 32, 3104, 0, 180}},   {1, 0, {5, APP_SYNC, 20000, 2, 1, 3692, 0, 0}},
    };
    add_placed(w, procs, sizeof procs / sizeof procs[0]);
    scenario_fault(w, F_KILL, 15, 5835 * MS, 0);
    scenario_fault(w, F_FORK, 18, 8801 * MS, 0);
    scenario_describe(w, "late-drains-under-limit (named case)");
}

/* Two gangs: t0 (share 2) with ranks on GPUs 0, 1 and 2, t1 (share 1)
 * with ranks on GPUs 0 and 1; and t2 with a deep queue on GPU 1. A rank
 * that waits in a collective for a peer drains past the grace period and
 * is taken back. Its late release charged the drain to its gang on that
 * GPU and not on the gang's others, which put the gang's virtual times on
 * its GPUs apart, and the smallest (gang_key) kept t0 first among gangs:
 * t1 waited 5 s for GPU 1, to the run's end (seed 24982 of the generator
 * then). A gang's ranks late past the grace are now not charged their
 * drain (tokenserver/sched.c, on_timer: no late_grant for a gang's
 * slice). On the scheduler since, gang_next_everywhere's test of a holder
 * that would still be behind the gang keeps this node within its bounds
 * with that undone too (no seed of 1-3000 breaks one); with both undone
 * the bound breaks again, on 6 of seeds 1-400 (146 the first). */
static void gang_behind_unevenly_charged_gang(struct world *w)
{
    node(w, 3, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{2, 1, 16, 0, CLASS_BATCH, GANG_AUTO, true},
                                                {1, 1, 35, 0, CLASS_BATCH, GANG_AUTO, true},
                                                {1, 1, 26, 0, CLASS_BATCH, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* gpu, group, {tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB)} */
    static const struct placed_row procs[] = {
        {0, 1, {0, APP_RANK, 1100, 8, 4, 0, 0, 0}},   {1, 1, {0, APP_RANK, 1100, 3, 4, 0, 283, 0}},
        {2, 1, {0, APP_RANK, 1100, 6, 4, 0, 213, 0}}, {0, 2, {1, APP_RANK, 1500, 4, 4, 0, 0, 0}},
        {1, 2, {1, APP_RANK, 1500, 7, 4, 0, 208, 0}}, {1, 0, {2, APP_DEEP, 200, 11, 1, 4100, 0, 0}},
    };
    add_placed(w, procs, sizeof procs / sizeof procs[0]);
    scenario_describe(w, "gang-behind-unevenly-charged-gang (named case)");
}

/* Six tenants on three GPUs. On GPU 1, latency tenant t0 (limit 0.78; a
 * deep queue of 0.2 ms items and bursts of 20 us items) beside t3 (share
 * 10, three processes that synchronize after each batch) and t5 (share
 * 10, limit 0.69, bursts); processes of t3 and of t0 are killed at 2.9 s
 * and 3.5 s. At 3.4 s, while t3 holds GPU 1, its share falls from 10 to 1
 * (the change seed 25415 drew when it was found; the run's random draws
 * have moved since, and the seed now draws a new quantum there). The
 * preemption for t0 had been planned with t3's old share and came late:
 * t0 waited past the 17.6 ms its preemption may take. A tenant's
 * configuration change now looks at preemption on every GPU a slice runs
 * on (tokenserver/sched.c, sched_step on SCHED_TENANT_CHANGED:
 * preempt_check; the scripted case latency-waits-holder-share-halved
 * plays it too). Without it the bound breaks on 15 of seeds 1-200, seed
 * 2 among them (meson runs 1-8). */
static void latency_behind_holder_share_change(struct world *w)
{
    node(w, 3, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {
        {1, 0.78, 24, 0, CLASS_LATENCY, GANG_OFF, false}, {2, 1, 43, 1566, CLASS_BATCH, GANG_OFF, false},
        {1, 1, 22, 1354, CLASS_BATCH, GANG_OFF, false},   {10, 1, 33, 1968, CLASS_BATCH, GANG_OFF, false},
        {1, 0.62, 20, 0, CLASS_BATCH, GANG_OFF, false},   {10, 0.69, 44, 0, CLASS_BATCH, GANG_OFF, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    w->tenant[4].config.on_server_down = ON_DOWN_OPEN;
    /* gpu, group, {tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB)} */
    static const struct placed_row procs[] = {
        {1, 0, {0, APP_DEEP, 200, 9, 1, 2027, 0, 0}},        {1, 0, {0, APP_BURSTS, 20, 14, 32, 1088, 0, 75}},
        {2, 0, {0, APP_DEEP, 20000, 2, 1, 707, 0, 222}},     {0, 0, {1, APP_SYNC, 1000, 12, 1, 2753, 3593, 82}},
        {2, 0, {2, APP_DEEP, 20000, 2, 32, 1334, 0, 49}},    {2, 0, {2, APP_SYNC, 50, 13, 32, 558, 0, 0}},
        {2, 0, {2, APP_DEEP, 1000, 9, 32, 4612, 1627, 217}}, {1, 0, {3, APP_SYNC, 50, 9, 1, 1159, 0, 103}},
        {1, 0, {3, APP_SYNC, 50, 14, 1, 3515, 0, 0}},        {1, 0, {3, APP_SYNC, 2000, 10, 4, 2604, 0, 0}},
        {0, 0, {4, APP_SYNC, 20, 5, 4, 2355, 0, 90}},        {0, 0, {4, APP_DEEP, 2000, 7, 32, 3861, 392, 0}},
        {1, 0, {5, APP_BURSTS, 200, 16, 4, 4457, 0, 0}},
    };
    add_placed(w, procs, sizeof procs / sizeof procs[0]);
    scenario_fault(w, F_KILL, 2, 3535 * MS, 0);
    struct fault *f = scenario_fault(w, F_CONFIG, 3, 3395 * MS, 0);
    f->scripted = true;
    f->config = w->tenant[3].config;
    f->config.share = 1;
    scenario_fault(w, F_KILL, 9, 2909 * MS, 0);
    scenario_describe(w, "latency-behind-holder-share-change (named case)");
}

/* One GPU under `open`: t0 (share 3) with three processes that
 * synchronize after batches of 0.5 and 2 ms items, latency tenant t1 with
 * bursts, and t2 (share 2) with bursts of 50 ms items. t2's process
 * reconnects at 1.24 s and forks at 2.58 s, t0's second process forks at
 * 2.95 s, and t1's process reconnects at 4.89 s: back 50 ms later, t1
 * names the GPU again while t0 holds it. A process of t0 had given its
 * slice back and joined it again; its slice machine took every later GRANT
 * of that slice for the extension of a slice already given back and
 * ignored the bound on work ahead that t1's arrival brought: it held its
 * slice unbounded 8.1 ms, over 8 (seed 44252 of the generator then). The
 * slice machine now takes the extensions of a slice it gave back and
 * joined again (shim/gs_slice.c, grant). Without that the bound breaks on
 * 66 of seeds 1-200, seed 8 the first (meson runs 1-8). */
static void rejoined_holder_bounded(struct world *w)
{
    node(w, 1, ON_DOWN_OPEN);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{3, 1, 43, 0, CLASS_BATCH, GANG_OFF, false},
                                                {1, 1, 34, 0, CLASS_LATENCY, GANG_OFF, false},
                                                {2, 1, 47, 0, CLASS_BATCH, GANG_OFF, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    w->tenant[2].config.on_server_down = ON_DOWN_OPEN;
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {
        {0, APP_SYNC, 500, 5, 32, 3604, 0, 0},  {0, APP_SYNC, 500, 6, 1, 1337, 0, 0},
        {0, APP_SYNC, 2000, 14, 4, 2038, 0, 0}, {1, APP_BURSTS, 200, 5, 1, 4802, 0, 0},
        {2, APP_BURSTS, 50000, 2, 32, 4398, 0, 0},
    };
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_fault(w, F_FORK, 4, 2579 * MS, 0);
    scenario_fault(w, F_RECONNECT, 4, 1239 * MS, 0);
    scenario_fault(w, F_RECONNECT, 3, 4891 * MS, 0);
    scenario_fault(w, F_FORK, 1, 2951 * MS, 0);
    scenario_describe(w, "rejoined-holder-bounded (named case)");
}

/* Three latency tenants (shares 3, 1 and 3, items of 0.3, 2.5 and 2.6 ms)
 * and a batch tenant (share 1, items of 0.2 ms, four queued), quantum
 * 5 ms, alone on one GPU: a clean run of 40 s (the case's length), judged
 * on shares within 0.04 points. The latency tenants preempt the batch
 * tenant's slices within a millisecond of their start, about a hundred
 * times a second. Each such slice was charged MIN_SLICE_CHARGE_NS, the
 * least a slice costs for its handoffs, although the preemptor caused the
 * handoff and paid for it in its preemption debt: the batch tenant got
 * 11.76 % of the device time against its weight's 12.50 % (the first
 * finding, in a generated run). A slice cut short by a preemption is
 * charged what it held (tokenserver/sched.c, end_slice), and up to
 * PREEMPTED_REFUND_NS of the idle its holders claim is refunded: the
 * GRANT's way to them. Refunded only 1/32 of such a slice, the batch
 * tenant gets 12.41 to 12.43 % (the plant sched-preempted-refund-capped);
 * with the refund, 12.49 to 12.51 % on seeds 1-200, once the check counts
 * as the tenant's the idle of slow GRANTs the scheduler charged
 * (sim_check.c, check_slice_held; without that, 2 of seeds 1-3000 of a
 * 10 s run fell 0.5 points short). */
static void batch_preempted_early(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{3, 1, 5, 0, CLASS_LATENCY, GANG_AUTO, false},
                                                {1, 1, 5, 0, CLASS_LATENCY, GANG_AUTO, false},
                                                {1, 1, 5, 0, CLASS_BATCH, GANG_AUTO, false},
                                                {3, 1, 5, 0, CLASS_LATENCY, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    deep(w, 0, 0, 300 * US, 16);
    deep(w, 1, 0, 2500 * US, 15);
    deep(w, 2, 0, 200 * US, 4);
    deep(w, 3, 0, 2600 * US, 5);
    if (w->end >= 40000 * MS) /* over a shorter run, the figures wander more */
        w->share_tolerance = 0.0004;
    w->clean = true;
    scenario_describe(w, "batch-preempted-early (named case)");
}

/* Latency tenant t1 and batch tenants t0 (a quantum of 250 ms) and t2,
 * each with a deep queue of 1 ms items on one GPU. t1 holds first, t0
 * and t2 (named 40 ms in) after it; from about 80 ms t0 holds a slice
 * while t2 waits next, ahead of t1 in virtual time, so that t1 may not
 * preempt. At 120 ms t2's process is killed: t1 is next, t0 has passed it,
 * and it preempts t0's slice at once (tokenserver/sched.c,
 * slot_stops_waiting: preempt_check). Without that look t1 waits out t0's
 * slice, past the bound on its preemption: on 106 of seeds 1-200, 6 of the
 * eight meson runs (the plant sched-leaver-unlooked). No seed of 1-60000
 * of the generator met it any more: seed 24748, which did, stopped when
 * the scheduler's refunds of preempted slices changed the runs. */
static void latency_behind_leaver(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{1, 1, 250, 0, CLASS_BATCH, GANG_OFF, false},
                                                {1, 1, 20, 0, CLASS_LATENCY, GANG_OFF, false},
                                                {1, 1, 20, 0, CLASS_BATCH, GANG_OFF, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    struct sim_proc *batch = deep(w, 0, 0, 1 * MS, 8);
    batch->start_at = 1 * MS;
    deep(w, 1, 0, 1 * MS, 4);
    struct sim_proc *leaver = deep(w, 2, 0, 1 * MS, 8);
    leaver->start_at = 40 * MS;
    scenario_fault(w, F_KILL, leaver->id, 120 * MS, 0);
    scenario_describe(w, "latency-behind-leaver (named case)");
}

/* One tenant with a cap of 370 MiB and three processes on one GPU, each
 * allocating and freeing 70 to 182 MiB as it runs: the tenant is often at
 * its cap, and a process's lease that does not fit makes the server
 * recall its siblings' headroom. A sibling answered with what it had,
 * then freed an allocation and kept it as headroom, or asked for a lease
 * of its own and was given, beside what it needed, headroom out of the
 * room the recall had just made; the asker's retry found the room gone
 * and was refused, although what the processes held and what it asked
 * came within the cap (on 44 of seeds 1-3000 of the generator, and on 46
 * of seeds 1-200 here, 2 of 1-8). Now a process keeps nothing it frees as
 * headroom for 200 ms after a recall (shim/gs_lease.c, RECALLED_NS), and
 * while a slot waits on its round of recalls its siblings' leases get
 * what they need and no more (tokenserver/memory.c, sibling_recalling). The check: sim_check.c,
 * check_lease_refused. */
static void sibling_frees_after_recall(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{3, 1, 29, 370, CLASS_BATCH, GANG_OFF, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {{0, APP_SYNC, 50, 4, 1, 2111, 0, 146},
                                            {0, APP_SYNC, 20000, 2, 1, 1846, 0, 70},
                                            {0, APP_SYNC, 50, 6, 1, 1659, 0, 182}};
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_describe(w, "sibling-frees-after-recall (named case)");
}

/* One tenant with a cap of 668 MiB and three processes on one GPU that
 * allocate 213 to 245 MiB each: one that allocates and frees in bursts,
 * beside a busy tenant. A lease that did not fit made the server recall
 * the headroom of the siblings that held a count; one with no count then
 * was sent nothing, leased what it needed after the round, and freed it
 * at once, keeping it as headroom (it had answered no recall). The asker's
 * retry found no room and, its round of recalls answered, was refused,
 * although what the processes held and what it asked came within the cap
 * (fresh seed 421079848, at 16 ms; here 12 of seeds 1-3000, 539 the
 * first: meson runs 535-544). A retry now recalls the siblings granted a lease since its
 * round began (tokenserver/memory.c, recall_siblings). The check:
 * sim_check.c, check_lease_refused. */
static void sibling_leases_after_recall_round(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{1, 1, 29, 668, CLASS_BATCH, GANG_AUTO, false},
                                                {3, 1, 39, 0, CLASS_BATCH, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {{0, APP_SYNC, 20, 4, 4, 1415, 0, 235},
                                            {0, APP_BURSTS, 20, 3, 1, 2838, 0, 213},
                                            {0, APP_SYNC, 50, 11, 32, 1148, 0, 245},
                                            {1, APP_SYNC, 500, 12, 4, 1670, 0, 0},
                                            {1, APP_SYNC, 5000, 15, 1, 2822, 0, 0}};
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    scenario_describe(w, "sibling-leases-after-recall-round (named case)");
}

/* A tenant with a cap of 512 MiB whose two honest processes allocate 200
 * and 220 MiB while a third leases, frees and declares without end and
 * answers no recall, beside an honest pair. A lease that does not fit
 * makes the server recall the siblings' headroom, and each retry recalls
 * those granted a lease since its round began (tokenserver/memory.c,
 * recall_siblings): the storm is granted leases all the time and answers
 * none of it. What its own tenant's processes get is that tenant's own
 * affair (hostile: not judged); what must hold is the rest: the server's
 * invariants for every client (sim_check_sched.c), the honest pair's
 * split, and the simulation's bounds (its event queue among them). */
static void hostile_sibling_during_recall(struct world *w)
{
    node(w, 1, ON_DOWN_WAIT);
    /* share, limit, quantum (ms), memory (MiB), class, gang mode, gang */
    static const struct tenant_row tenants[] = {{1, 1, 20, 0, CLASS_BATCH, GANG_AUTO, false},
                                                {3, 1, 20, 0, CLASS_BATCH, GANG_AUTO, false},
                                                {1, 1, 20, 512, CLASS_BATCH, GANG_AUTO, false}};
    add_tenants(w, tenants, sizeof tenants / sizeof tenants[0]);
    /* tenant, app, item (us), depth, batch, host (us), start (ms), memory (MiB) */
    static const struct proc_row procs[] = {{0, APP_DEEP, 500, 8, 1, 0, 0, 0},
                                            {1, APP_DEEP, 1500, 8, 1, 0, 0, 0},
                                            {2, APP_SYNC, 50, 4, 4, 1000, 0, 200},
                                            {2, APP_BURSTS, 20, 3, 1, 2000, 0, 220}};
    add_procs(w, procs, sizeof procs / sizeof procs[0]);
    w->tenant[2].hostile = true;
    struct sim_proc *storm = scenario_proc(w, 2, APP_HOSTILE);
    storm->hostile = H_LEASE_STORM;
    w->honest_pair = true;
    w->honest_a = 0;
    w->honest_b = 1;
    scenario_describe(w, "hostile-sibling-during-recall (named case)");
}

const struct sim_case sim_cases[] = {
    {"gang-rank-killed-early", "a gang whose rank died before the job formed is not owed a turn",
     gang_rank_killed_early, NULL, 0},
    {"returning-after-limit-lifted", "a wait its limit made is not held against a tenant once the limit goes",
     returning_after_limit_lifted, NULL, 0},
    {"latency-behind-ungated-work", "work a holder launched with no connection is no slice's to bound",
     latency_behind_ungated_work, NULL, 0},
    {"open-restart-many-processes", "a GPU's queue holds every process's items when all run ungated",
     open_restart_many_processes, NULL, 0},
    {"returning-behind-ungated-work", "a process back from a pause behind work no slice admitted is not owed "
     "its bound", returning_behind_ungated_work, NULL, 0},
    {"open-reconnect-under-limit", "a tenant's limit is not promised once a process of it ran ungated",
     open_reconnect_under_limit, NULL, 0},
    {"returning-behind-own-work", "a process back from a pause with its own work still queued waits for it "
     "first", returning_behind_own_work, NULL, 0},
    {"limited-neighbours-run-ahead", "a tenant that ran while its limited neighbours waited out their "
     "windows is not owed for it", limited_neighbours_run_ahead, NULL, 0},
    {"waiting-behind-ungated-work", "the GPU's time on work queued ungated is not counted in a tenant's wait",
     waiting_behind_ungated_work, NULL, 0},
    {"share-lag-mid-slice", "a share is judged at the end within the lag fair queuing allows",
     share_lag_mid_slice, NULL, 0},
    {"gang-behind-holder", "a gang does not gather while a holder behind it would come first after its slice",
     gang_behind_holder, NULL, 0},
    {"gangs-one-held-elsewhere", "a gang that waited for another GPU banks nothing against a gang that ran "
     "meanwhile", gangs_one_held_elsewhere, NULL, 0},
    {"overlapping-holds", "a tenant's longest slice is its processes' longest hold, also where their holds "
     "overlap", overlapping_holds, NULL, 0},
    {"latency-device-flood", "a latency tenant declaring GPUs over and over sends batch holders at most one "
     "GRANT for a new bound per GPU per 2 ms", latency_device_flood, NULL, 0},
    {"idle-after-fast-launches", "a slice goes back within two of the gate thread's looks (10 ms, and their "
     "lateness) after a program's last fast-path launches finish", idle_after_fast_launches, NULL, 0},
    {"gang-starved-by-alternating-drains", "a gang whose gathering gave up reserves its GPUs at the next one, "
     "though their holders drain past their deadlines in turn", gang_starved_by_alternating_drains, NULL, 0},
    {"late-drains-under-limit", "a drain past the grace counts toward the limit once its late release comes",
     late_drains_under_limit, NULL, 0},
    {"gang-behind-unevenly-charged-gang", "a gang's ranks late past the grace are not charged on one of its "
     "GPUs alone", gang_behind_unevenly_charged_gang, NULL, 0},
    {"latency-behind-holder-share-change", "a holder's new share moves the preemption a latency tenant waits for",
     latency_behind_holder_share_change, NULL, 0},
    {"rejoined-holder-bounded", "a batch holder that gave its slice back and joined it again takes the bound "
     "on work ahead a latency tenant brings", rejoined_holder_bounded, NULL, 0},
    {"batch-preempted-early", "a batch slice a latency tenant preempts within a millisecond is charged what "
     "it held, not the least a slice costs", batch_preempted_early, NULL, 40},
    {"latency-behind-leaver", "a latency tenant is looked at when a tenant waiting ahead of it stops waiting",
     latency_behind_leaver, NULL, 0},
    {"timer-rearmed-beside-limited-tenant", "a GPU's timer armed again and again to the deadline it has, "
     "thousands of times before it fires, fills nothing", timer_rearmed_beside_limited_tenant, NULL, 0},
    {"sibling-leases-after-recall-round", "a lease within the tenant's cap is not refused for headroom a "
     "sibling leased after the round of recalls", sibling_leases_after_recall_round, NULL, 0},
    {"sibling-frees-after-recall", "a lease within the tenant's cap is not refused for headroom a sibling took "
     "back after a recall", sibling_frees_after_recall, NULL, 0},
    {"hostile-sibling-during-recall", "a sibling that leases without end and answers no recall costs only its "
     "own tenant", hostile_sibling_during_recall, NULL, 0},
};
const int sim_ncases = (int)(sizeof sim_cases / sizeof sim_cases[0]);

const struct sim_case *sim_case_find(const char *name)
{
    for (int k = 0; k < sim_ncases; k++)
        if (strcmp(sim_cases[k].name, name) == 0)
            return &sim_cases[k];
    for (int k = 0; k < sim_nscripted_cases; k++)
        if (strcmp(sim_scripted_cases[k].name, name) == 0)
            return &sim_scripted_cases[k];
    return NULL;
}
