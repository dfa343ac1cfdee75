/*
 * What each executable graph costs on the device (see gs_graphcost.h).
 *
 * A decode step's graph can run for tens of milliseconds, so admitting it
 * as "one launch" near the end of a slice overruns by the whole graph.
 * Instead each CUgraphExec has a measured device time: its first launches
 * (and every MEASURE_EVERY-th after) are bracketed by two of the shim's
 * timed events (gs_graph.c), and the drainer reads their elapsed time.
 *
 * Owns the table of costs and the measurements in flight, guarded by the
 * gate lock.
 */
#include "gs_graphcost.h"
#include "gs_contexts.h"
#include "gs_locks.h"
#include "gs_log.h"

#include <stdlib.h>
#include <string.h>

#define MEASURE_FIRST 3
#define MEASURE_EVERY 32
#define MAX_MEASUREMENTS 64

struct graph_cost {
    CUgraphExec exec;
    uint64_t est_ns;     /* 0 = not measured yet */
    uint64_t launches;
};

struct measurement {
    struct gs_dev *dev;
    struct gs_ctx *ctx;
    CUgraphExec exec;
    CUevent start, end;
};

static struct graph_cost *costs;
static size_t ncosts, costs_cap;
static struct measurement measurements[MAX_MEASUREMENTS];
static int nmeasurements;

static struct graph_cost *cost_of_locked(CUgraphExec exec, bool create)
{
    for (size_t i = 0; i < ncosts; i++)
        if (costs[i].exec == exec)
            return &costs[i];
    if (!create)
        return NULL;
    if (ncosts == costs_cap) {
        size_t cap = costs_cap ? costs_cap * 2 : 64;
        struct graph_cost *grown = realloc(costs, cap * sizeof *grown);
        if (!grown)
            return NULL;
        costs = grown;
        costs_cap = cap;
    }
    costs[ncosts] = (struct graph_cost){.exec = exec};
    return &costs[ncosts++];
}

uint64_t gs_graphcost_estimate_locked(CUgraphExec exec)
{
    struct graph_cost *cost = cost_of_locked(exec, true);
    return cost ? cost->est_ns : 0;
}

bool gs_graphcost_launching_locked(CUgraphExec exec, struct gs_ctx *ctx)
{
    struct graph_cost *cost = cost_of_locked(exec, true);
    uint64_t n = cost ? cost->launches++ : 1;
    return cost && (n < MEASURE_FIRST || n % MEASURE_EVERY == 0) && nmeasurements < MAX_MEASUREMENTS &&
           gs_ctx_use_locked(ctx);
}

void gs_graphcost_measured(struct gs_dev *d, struct gs_ctx *ctx, CUgraphExec exec, CUevent start, CUevent end)
{
    gs_lock(GS_LOCK_GATE);
    bool kept = start && end && nmeasurements < MAX_MEASUREMENTS && !ctx->dead;
    if (kept)
        measurements[nmeasurements++] = (struct measurement){d, ctx, exec, start, end};
    gs_unlock(GS_LOCK_GATE);
    /* Not kept (the table filled meanwhile): the events go back to the
     * pool; measuring (a use of the context) kept it alive till here. */
    if (!kept) {
        gs_ctx_event_give(ctx, start, true);
        gs_ctx_event_give(ctx, end, true);
    }
    gs_lock(GS_LOCK_GATE);
    gs_ctx_unuse_locked(ctx);
    gs_unlock(GS_LOCK_GATE);
}

void gs_graphcost_forget_exec_locked(CUgraphExec exec)
{
    struct graph_cost *cost = cost_of_locked(exec, false);
    if (cost)
        *cost = costs[--ncosts];
    for (int i = 0; i < nmeasurements; i++)
        if (measurements[i].exec == exec)
            measurements[i].exec = NULL; /* its events still go back to the pool */
}

void gs_graphcost_measure(struct gs_dev *d)
{
    for (;;) {
        struct measurement m = {0};
        gs_lock(GS_LOCK_GATE);
        for (int i = 0; i < nmeasurements; i++)
            if (measurements[i].dev == d && gs_ctx_use_locked(measurements[i].ctx)) {
                m = measurements[i];
                measurements[i] = measurements[--nmeasurements];
                break;
            }
        gs_unlock(GS_LOCK_GATE);
        if (!m.ctx)
            return;
        float ms = 0;
        bool done = false, pushed = gs_ctx_push(m.ctx);
        if (pushed) {
            CUresult q = GS_REAL(cuEventQuery)(m.end);
            done = q != CUDA_ERROR_NOT_READY;
            if (q == CUDA_SUCCESS && GS_REAL(cuEventElapsedTime)(&ms, m.start, m.end) != CUDA_SUCCESS)
                ms = 0;
            if (done) {
                gs_ctx_event_give(m.ctx, m.start, true);
                gs_ctx_event_give(m.ctx, m.end, true);
            }
            gs_ctx_pop();
        }
        gs_lock(GS_LOCK_GATE);
        bool again = !done && pushed && nmeasurements < MAX_MEASUREMENTS;
        if (again)
            measurements[nmeasurements++] = m; /* not finished: later */
        else if (!done) {
            /* Dropped unfinished: its events go back to the pool (recorded
             * again, they are simply reused). */
            gs_unlock(GS_LOCK_GATE);
            gs_ctx_event_give(m.ctx, m.start, true);
            gs_ctx_event_give(m.ctx, m.end, true);
            gs_lock(GS_LOCK_GATE);
        }
        struct graph_cost *cost = m.exec && ms > 0 ? cost_of_locked(m.exec, false) : NULL;
        if (cost) {
            uint64_t ns = (uint64_t)((double)ms * 1e6);
            cost->est_ns = cost->est_ns ? (cost->est_ns + ns) / 2 : ns;
        }
        gs_ctx_unuse_locked(m.ctx);
        gs_unlock(GS_LOCK_GATE);
        if (!done)
            return;
    }
}

void gs_graphcost_forget_ctx_locked(struct gs_ctx *ctx)
{
    for (int i = 0; i < nmeasurements; i++)
        if (measurements[i].ctx == ctx)
            measurements[i--] = measurements[--nmeasurements];
}

void gs_graphcost_after_fork_child(void)
{
    /* Executable graphs belong to the parent's contexts. */
    ncosts = 0;
    nmeasurements = 0;
}
