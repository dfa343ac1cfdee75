/*
 * The named cases: what exploration found, written down as runs of the
 * simulation that meet it whatever the seed, each under the invariants of
 * every run (sim_check.c). A seed means something for one version of
 * scenario_make only; a case keeps its meaning when the generator changes.
 *
 *   sim --case NAME     one case (with --seed N: its random details,
 *                       transport delays and item lengths, from seed N)
 *   sim --cases         every case
 *
 * Each case says what broke before, and each fails on the code or the
 * check it names as it was then.
 */
#include "sim.h"

#include <stddef.h>

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

const struct sim_case sim_cases[] = {
    {"gang-rank-killed-early", "a gang whose rank died before the job formed is not owed a turn",
     gang_rank_killed_early},
    {"returning-after-limit-lifted", "a wait its limit made is not held against a tenant once the limit goes",
     returning_after_limit_lifted},
    {"latency-behind-ungated-work", "work a holder launched with no connection is no slice's to bound",
     latency_behind_ungated_work},
    {"open-restart-many-processes", "a GPU's queue holds every process's items when all run ungated",
     open_restart_many_processes},
};
const int sim_ncases = (int)(sizeof sim_cases / sizeof sim_cases[0]);
