/*
 * Graph launches: the wrappers of cuGraphLaunch (and _ptsz) and
 * cuGraphExecDestroy.
 *
 * A graph is admitted against its own measured device time
 * (gs_graphcost.c), not as one launch: only if its estimate fits in what
 * is left of the slice after the work already queued, and any graph at
 * the start of a slice, on an empty queue (a graph longer than a slice
 * must still run; its overrun is charged to its tenant). A graph not
 * measured yet waits for such a start; while a graph waits that cannot
 * fit, its slice is given back as soon as its queue is empty, so that the
 * graph starts the next one (gs_slice.c). Its allocation nodes' memory is
 * counted around its first launch (gs_graphmem.c).
 *
 * Owns nothing.
 */
#include "gs_capture.h"
#include "gs_contexts.h"
#include "gs_graphcost.h"
#include "gs_graphmem.h"
#include "gs_launch.h"
#include "gs_locks.h"
#include "gs_lookup.h"

static CUresult graph_launch(CUgraphExec exec, CUstream stream, int ptsz, CUresult (*real)(CUgraphExec, CUstream))
{
    /* Into a capturing stream, a graph becomes a node of the new graph. */
    uint32_t handles_gen = atomic_load(&gs_handles_gen);
    struct gs_launch_target t;
    if (gs_capture_stream_is_capturing(stream, ptsz) || gs_lookup_stream(stream, ptsz, &t) != CUDA_SUCCESS)
        return real(exec, stream);
    struct gs_admit admit = {.dev = t.dev};
    if (t.kind == GS_STREAM_PER_THREAD && !(admit.mark = gs_drain_thread_mark(t.ctx, t.dev)))
        t.kind = GS_STREAM_LEGACY, t.stream = CU_STREAM_LEGACY;

    gs_lock(GS_LOCK_GATE);
    uint64_t est_ns = gs_graphcost_estimate_locked(exec);
    gs_launch_wait_admission_locked(t.dev, true, est_ns);
    gs_launch_track_stream_locked(&t);
    uint32_t set_gen = atomic_load(&t.dev->stream_set_gen);
    bool measure = gs_graphcost_launching_locked(exec, t.ctx);
    gs_unlock(GS_LOCK_GATE);
    /* A synchronization on this stream then knows its GPU: it can find
     * the work finished, begin an idle spell and give a latency tenant's
     * slice back (gs_sync.c), as after a kernel launch. */
    gs_launch_remember(stream, ptsz, t.dev, admit.mark, set_gen, handles_gen);

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
        start = end = NULL;
    }
    if (pushed)
        gs_ctx_pop();

    atomic_fetch_add(&t.dev->slice.graphs_submitted, 1);
    atomic_fetch_add(&t.dev->slice.graph_ns_submitted, est_ns);
    if (measure)
        gs_graphcost_measured(t.dev, t.ctx, exec, start, end);
    gs_launch_exit(&admit, rc);
    return rc;
}

/* A graph launch with its allocation nodes' memory counted around it. */
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
        gs_lock(GS_LOCK_GATE);
        gs_graphcost_forget_exec_locked(exec);
        gs_unlock(GS_LOCK_GATE);
    }
    return rc;
}
