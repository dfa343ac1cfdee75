/*
 * The wrappers of the stream calls that change what the drainer can
 * record into: beginning a capture (every variant), ending one, joining
 * one (cuStreamWaitEvent on an event recorded in a capture), and
 * destroying a stream.
 *
 * Before a stream starts capturing (and before it joins a capture, or is
 * destroyed) the application's thread records, for the drainer, a flush
 * mark on it and, for a capture, on its context's legacy stream, which a
 * blocking stream's capture makes unusable (gs_drain_flush). After that no
 * admitted work can land on it until the capture ends, so the drainer
 * skips it. Each call takes the capture lock (gs_locks.h) once, around
 * the flush and the real call, so that no shim thread records into the
 * stream in between; a flush mark that finds no room is waited for with
 * the lock let go, before the call. Every GPU's slice machine hears that
 * a capture began or ended (no idle spell is counted meanwhile).
 *
 * Owns nothing: the captures are gs_capture.c's.
 */
#include "gs_capture.h"
#include "gs_contexts.h"
#include "gs_dispatch.h"
#include "gs_drain.h"
#include "gs_graphmem.h"
#include "gs_locks.h"
#include "gs_lookup.h"

/* Every slice machine hears that a capture began or ended. */
static void tell_slices(enum gs_slice_event_type type)
{
    struct gs_slice_event ev = {.type = type};
    gs_lock(GS_LOCK_GATE);
    gs_dispatch_all_locked(&ev, gs_now_ns());
    gs_unlock(GS_LOCK_GATE);
}

/* Records events for the work admitted to `stream` (and, with_legacy, to
 * its context's legacy stream) while both can still be recorded into; the
 * capture lock is held, and is let go while marks that found no room are
 * waited for. */
static void flush_before(CUstream stream, int ptsz, bool with_legacy)
{
    struct gs_launch_target t;
    if (gs_lookup_stream(stream, ptsz, &t) != CUDA_SUCCESS)
        return;
    struct gs_unkept_marks unkept;
    gs_drain_flush(&t, with_legacy, &unkept);
    if (unkept.n > 0) {
        gs_unlock(GS_LOCK_CAPTURE);
        gs_drain_wait_unkept(&unkept);
        gs_lock(GS_LOCK_CAPTURE);
    }
}

/* ---- beginning and ending a capture ---------------------------------------- */

/* The real call of each variant. */
struct begin_args {
    int variant;             /* 0 plain, 1 _v2, 2 ToGraph */
    CUstream stream;
    CUstreamCaptureMode mode;
    CUgraph graph;
    const CUgraphNode *deps;
    const CUgraphEdgeData *edges;
    size_t ndeps;
};

static CUresult real_begin(const struct begin_args *a, int ptsz)
{
    switch (a->variant) {
    case 0:
        return ptsz ? GS_REAL(cuStreamBeginCapture_ptsz)(a->stream) : GS_REAL(cuStreamBeginCapture)(a->stream);
    case 1:
        return ptsz ? GS_REAL(cuStreamBeginCapture_v2_ptsz)(a->stream, a->mode)
                    : GS_REAL(cuStreamBeginCapture_v2)(a->stream, a->mode);
    default:
        return ptsz ? GS_REAL(cuStreamBeginCaptureToGraph_ptsz)(a->stream, a->graph, a->deps, a->edges, a->ndeps, a->mode)
                    : GS_REAL(cuStreamBeginCaptureToGraph)(a->stream, a->graph, a->deps, a->edges, a->ndeps, a->mode);
    }
}

static CUresult begin_capture(const struct begin_args *a, int ptsz)
{
    gs_lock(GS_LOCK_CAPTURE);
    gs_capture_beginning_locked();
    /* A blocking stream that captures makes its context's legacy stream
     * unusable until the capture ends: flush that too. */
    flush_before(a->stream, ptsz, true);
    CUresult rc = real_begin(a, ptsz);
    bool began = gs_capture_began_locked(a->stream, ptsz, rc);
    gs_unlock(GS_LOCK_CAPTURE);
    if (began)
        tell_slices(GS_SLICE_CAPTURE_BEGAN);
    /* A capture into a graph of its own (not ToGraph) allocates nothing yet. */
    if (rc == CUDA_SUCCESS && a->variant != 2)
        gs_graphmem_capture_began(a->stream, ptsz);
    return rc;
}

GS_EXPORT CUresult cuStreamBeginCapture(CUstream stream)
{
    GS_PROLOGUE(cuStreamBeginCapture);
    return begin_capture(&(struct begin_args){.variant = 0, .stream = stream}, 0);
}

GS_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream stream)
{
    GS_PROLOGUE(cuStreamBeginCapture_ptsz);
    return begin_capture(&(struct begin_args){.variant = 0, .stream = stream}, 1);
}

GS_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode)
{
    GS_PROLOGUE(cuStreamBeginCapture_v2);
    return begin_capture(&(struct begin_args){.variant = 1, .stream = stream, .mode = mode}, 0);
}

GS_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode)
{
    GS_PROLOGUE(cuStreamBeginCapture_v2_ptsz);
    return begin_capture(&(struct begin_args){.variant = 1, .stream = stream, .mode = mode}, 1);
}

GS_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                               const CUgraphEdgeData *edges, size_t ndeps, CUstreamCaptureMode mode)
{
    GS_PROLOGUE(cuStreamBeginCaptureToGraph);
    return begin_capture(&(struct begin_args){2, stream, mode, graph, deps, edges, ndeps}, 0);
}

GS_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                                    const CUgraphEdgeData *edges, size_t ndeps,
                                                    CUstreamCaptureMode mode)
{
    GS_PROLOGUE(cuStreamBeginCaptureToGraph_ptsz);
    return begin_capture(&(struct begin_args){2, stream, mode, graph, deps, edges, ndeps}, 1);
}

static CUresult end_capture(CUstream stream, int ptsz, CUresult rc)
{
    gs_lock(GS_LOCK_CAPTURE);
    bool ended = gs_capture_ended_locked(stream, ptsz);
    gs_unlock(GS_LOCK_CAPTURE);
    if (ended)
        tell_slices(GS_SLICE_CAPTURE_ENDED);
    return rc;
}

GS_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph)
{
    GS_PROLOGUE(cuStreamEndCapture);
    return end_capture(stream, 0, GS_REAL(cuStreamEndCapture)(stream, graph));
}

GS_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph *graph)
{
    GS_PROLOGUE(cuStreamEndCapture_ptsz);
    return end_capture(stream, 1, GS_REAL(cuStreamEndCapture_ptsz)(stream, graph));
}

/* ---- joining a capture, and stream lifetimes -------------------------------- */

/* A wait on an event recorded inside a capture makes the waiting stream
 * join it: flush the stream first. No capture under way, nothing to do. */
static CUresult wait_event(CUstream stream, int ptsz, CUevent event, unsigned flags,
                           CUresult (*real)(CUstream, CUevent, unsigned))
{
    if (atomic_load(&gs_captures_active) == 0)
        return real(stream, event, flags);
    gs_lock(GS_LOCK_CAPTURE);
    flush_before(stream, ptsz, false);
    CUresult rc = real(stream, event, flags);
    gs_unlock(GS_LOCK_CAPTURE);
    return rc;
}

GS_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
    GS_PROLOGUE(cuStreamWaitEvent);
    return wait_event(stream, 0, event, flags, GS_REAL(cuStreamWaitEvent));
}

GS_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned int flags)
{
    GS_PROLOGUE(cuStreamWaitEvent_ptsz);
    return wait_event(stream, 1, event, flags, GS_REAL(cuStreamWaitEvent_ptsz));
}

/* Work queued on a destroyed stream still runs: record its mark while the
 * stream can be named, then forget the stream. */
static CUresult stream_destroy(CUstream stream, CUresult (*real)(CUstream))
{
    gs_lock(GS_LOCK_CAPTURE);
    struct gs_launch_target t;
    bool known = gs_lookup_stream(stream, 0, &t) == CUDA_SUCCESS && t.kind == GS_STREAM_CREATED;
    if (known)
        flush_before(stream, 0, false);
    CUresult rc = real(stream);
    if (known && rc == CUDA_SUCCESS) {
        gs_lock(GS_LOCK_GATE);
        gs_drain_forget_stream_locked(stream, t.ctx);
        gs_unlock(GS_LOCK_GATE);
        atomic_fetch_add(&gs_handles_gen, 1);
    }
    gs_unlock(GS_LOCK_CAPTURE);
    return rc;
}

GS_EXPORT CUresult cuStreamDestroy(CUstream stream)
{
    GS_PROLOGUE(cuStreamDestroy);
    return stream_destroy(stream, GS_REAL(cuStreamDestroy));
}

GS_EXPORT CUresult cuStreamDestroy_v2(CUstream stream)
{
    GS_PROLOGUE(cuStreamDestroy_v2);
    return stream_destroy(stream, GS_REAL(cuStreamDestroy_v2));
}
