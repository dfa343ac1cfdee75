/*
 * Graph launches: cuGraphLaunch and cuGraphLaunch_ptsz, and the table of
 * what each executable graph costs on the device.
 *
 * A decode step's graph can run for tens of milliseconds, so admitting it
 * as "one launch" near the end of a slice overruns by the whole graph.
 * Instead each CUgraphExec has a measured device time: its first launches
 * (and every MEASURE_EVERY-th after) are bracketed by two of the shim's
 * timed events, and the drainer reads their elapsed time. A graph is
 * admitted only if its estimate fits in what is left of the slice after
 * the work already queued, and any graph at the start of a slice, on an
 * empty queue (a graph longer than a slice must still run; its overrun is
 * charged to its tenant). A graph not measured yet waits for such a start. While a
 * graph waits, the gate thread gives the slice back as soon as the graph
 * cannot fit, so that it starts the next slice.
 *
 * The table and the pending measurements are guarded by gs_gate_lock.
 */
#include "gs_graph.h"
#include "gs_memory.h"
#include "gs_capture.h"
#include "gs_contexts.h"
#include "gs_gate.h"
#include "gs_hooks.h"
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

/* Guarded by gs_gate_lock. */
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

static CUresult graph_launch(CUgraphExec exec, CUstream stream, int ptsz, CUresult (*real)(CUgraphExec, CUstream))
{
    /* Into a capturing stream, a graph becomes a node of the new graph. */
    struct gs_launch_target t;
    if (gs_capture_stream_is_capturing(stream, ptsz) || gs_gate_resolve_stream(stream, ptsz, &t) != CUDA_SUCCESS)
        return real(exec, stream);
    struct gs_admit admit = {.dev = t.dev};
    if (t.kind == GS_STREAM_PER_THREAD && !(admit.mark = gs_drain_thread_mark(t.ctx, t.dev)))
        t.kind = GS_STREAM_LEGACY, t.stream = CU_STREAM_LEGACY;

    pthread_mutex_lock(&gs_gate_lock);
    struct graph_cost *cost = cost_of_locked(exec, true);
    uint64_t est_ns = cost ? cost->est_ns : 0;
    gs_gate_wait_admission_locked(t.dev, true, est_ns);
    gs_gate_track_stream_locked(&t);
    cost = cost_of_locked(exec, true);
    uint64_t n = cost ? cost->launches++ : 1;
    bool measure = cost && (n < MEASURE_FIRST || n % MEASURE_EVERY == 0) && nmeasurements < MAX_MEASUREMENTS &&
                   gs_ctx_use_locked(t.ctx);
    pthread_mutex_unlock(&gs_gate_lock);

    /* Timed events must live in the stream's context; it is current
     * unless the application launches with none (or another) current. */
    CUevent start = NULL, end = NULL;
    CUcontext current = NULL;
    bool pushed = false;
    if (measure) {
        pushed = GS_REAL(cuCtxGetCurrent)(&current) == CUDA_SUCCESS && current != t.ctx->handle &&
                 gs_ctx_push(t.ctx);
        start = gs_ctx_event_take(t.ctx, true);
        end = start ? gs_ctx_event_take(t.ctx, true) : NULL;
        if (start && end && GS_REAL(cuEventRecord)(start, t.stream) != CUDA_SUCCESS) {
            gs_ctx_event_give(t.ctx, start, true);
            gs_ctx_event_give(t.ctx, end, true);
            start = end = NULL;
        }
    }
    CUresult rc = real(exec, stream);
    bool recorded = start && end && rc == CUDA_SUCCESS && GS_REAL(cuEventRecord)(end, t.stream) == CUDA_SUCCESS;
    if (measure && !recorded) {
        gs_ctx_event_give(t.ctx, start, true);
        gs_ctx_event_give(t.ctx, end, true);
    }
    if (pushed)
        gs_ctx_pop();

    atomic_fetch_add(&t.dev->slice.graphs_submitted, 1);
    atomic_fetch_add(&t.dev->slice.graph_ns_submitted, est_ns);
    pthread_mutex_lock(&gs_gate_lock);
    bool kept = recorded && nmeasurements < MAX_MEASUREMENTS && !t.ctx->dead;
    if (kept)
        measurements[nmeasurements++] = (struct measurement){t.dev, t.ctx, exec, start, end};
    /* Not kept (the table filled meanwhile): the events go back to the
     * pool; measuring (a use of the context) kept it alive till here. */
    bool give_back = recorded && !kept;
    pthread_mutex_unlock(&gs_gate_lock);
    if (give_back) {
        gs_ctx_event_give(t.ctx, start, true);
        gs_ctx_event_give(t.ctx, end, true);
    }
    if (measure) {
        pthread_mutex_lock(&gs_gate_lock);
        gs_ctx_unuse_locked(t.ctx);
        pthread_mutex_unlock(&gs_gate_lock);
    }
    gs_hook_launch_exit(&admit, rc);
    return rc;
}

/* A graph launch with its allocation nodes' memory counted around it
 * (gs_graphmem.c). */
static CUresult graph_launch_counted(CUgraphExec exec, CUstream stream, int ptsz,
                                     CUresult (*real)(CUgraphExec, CUstream))
{
    struct gs_graph_launch mem;
    CUresult rc = gs_graphmem_before_launch(exec, stream, ptsz, &mem);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = graph_launch(exec, stream, ptsz, real);
    gs_graphmem_after_launch(exec, &mem, rc);
    return rc;
}

GS_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream)
{
    GS_PROLOGUE(cuGraphLaunch);
    return graph_launch_counted(exec, stream, 0, GS_REAL(cuGraphLaunch));
}

GS_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream)
{
    GS_PROLOGUE(cuGraphLaunch_ptsz);
    return graph_launch_counted(exec, stream, 1, GS_REAL(cuGraphLaunch_ptsz));
}

GS_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    GS_PROLOGUE(cuGraphExecDestroy);
    CUresult rc = GS_REAL(cuGraphExecDestroy)(exec);
    if (rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&gs_gate_lock);
        struct graph_cost *cost = cost_of_locked(exec, false);
        if (cost)
            *cost = costs[--ncosts];
        for (int i = 0; i < nmeasurements; i++)
            if (measurements[i].exec == exec)
                measurements[i].exec = NULL; /* its events still go back to the pool */
        pthread_mutex_unlock(&gs_gate_lock);
    }
    return rc;
}

void gs_graph_measure(struct gs_dev *d)
{
    for (;;) {
        struct measurement m = {0};
        pthread_mutex_lock(&gs_gate_lock);
        for (int i = 0; i < nmeasurements; i++)
            if (measurements[i].dev == d && gs_ctx_use_locked(measurements[i].ctx)) {
                m = measurements[i];
                measurements[i] = measurements[--nmeasurements];
                break;
            }
        pthread_mutex_unlock(&gs_gate_lock);
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
        pthread_mutex_lock(&gs_gate_lock);
        bool again = !done && pushed && nmeasurements < MAX_MEASUREMENTS;
        if (again)
            measurements[nmeasurements++] = m; /* not finished: later */
        else if (!done) {
            /* Dropped unfinished: its events go back to the pool (recorded
             * again, they are simply reused). */
            pthread_mutex_unlock(&gs_gate_lock);
            gs_ctx_event_give(m.ctx, m.start, true);
            gs_ctx_event_give(m.ctx, m.end, true);
            pthread_mutex_lock(&gs_gate_lock);
        }
        struct graph_cost *cost = m.exec && ms > 0 ? cost_of_locked(m.exec, false) : NULL;
        if (cost) {
            uint64_t ns = (uint64_t)((double)ms * 1e6);
            cost->est_ns = cost->est_ns ? (cost->est_ns + ns) / 2 : ns;
        }
        gs_ctx_unuse_locked(m.ctx);
        pthread_mutex_unlock(&gs_gate_lock);
        if (!done)
            return;
    }
}

void gs_graph_forget_ctx_locked(struct gs_ctx *ctx)
{
    for (int i = 0; i < nmeasurements; i++)
        if (measurements[i].ctx == ctx)
            measurements[i--] = measurements[--nmeasurements];
}

void gs_graph_after_fork_child(void)
{
    /* Executable graphs belong to the parent's contexts. */
    ncosts = 0;
    nmeasurements = 0;
}
