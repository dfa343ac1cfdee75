/*
 * Stream capture (see gs_capture.h): the wrappers of cuStreamBeginCapture
 * (all variants), cuStreamEndCapture, cuStreamWaitEvent and
 * cuStreamDestroy, and the question "is this stream capturing?".
 *
 * NVIDIA's rules (CUDA Programming Guide, "Prohibited and Unhandled
 * Operations"; cuThreadExchangeStreamCaptureMode) that shape this file:
 *   - synchronizing or querying a capturing stream, or a context or device
 *     that encompasses one, invalidates the capture, in any mode;
 *   - in global mode, potentially unsafe calls from *other threads*
 *     invalidate it too, unless those threads set themselves relaxed;
 *   - using the legacy stream while a blocking stream of its context
 *     captures is an implicit dependency, and invalid;
 *   - an event recorded into a capturing stream becomes part of the graph.
 * So the shim never synchronizes a context, its own threads run relaxed
 * and wait only on events they recorded outside any capture, and before a
 * stream starts capturing (or joins a capture through cuStreamWaitEvent,
 * or is destroyed) the application's thread records, on the shim's
 * behalf, the events the drainer will need for the work already admitted
 * there. gs_capture_lock keeps a drainer's "not capturing? then record"
 * from interleaving with those calls.
 */
#include "gs_capture.h"
#include "gs_contexts.h"
#include "gs_gate.h"
#include "gs_hooks.h"
#include "gs_memory.h"
#include "gs_log.h"

_Atomic int gs_captures_active;
pthread_mutex_t gs_capture_lock = PTHREAD_MUTEX_INITIALIZER;

/* Captures begun through the shim and not yet seen ended; guarded by
 * gs_capture_lock. A per-thread default stream is named by its thread. */
#define MAX_CAPTURES 256
static struct capture_origin {
    CUstream stream;
    pthread_t thread;
} origins[MAX_CAPTURES];
static int norigins;

/* The stream handle a non-_ptsz call must be given to name the same
 * stream as `stream` passed to a _ptsz one. */
static CUstream plain_handle(CUstream stream, int ptsz)
{
    return ptsz && stream == NULL ? CU_STREAM_PER_THREAD : stream;
}

static bool status_unrecordable(CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!GS_REAL(cuStreamIsCapturing))
        return false;
    CUresult rc = GS_REAL(cuStreamIsCapturing)(stream, &status);
    /* CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: the legacy stream while a
     * blocking stream captures (the capture is not invalidated by asking). */
    return rc != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool gs_capture_stream_is_capturing(CUstream stream, int ptsz)
{
    if (atomic_load(&gs_captures_active) == 0)
        return false;
    return status_unrecordable(plain_handle(stream, ptsz));
}

bool gs_capture_unrecordable(CUstream stream)
{
    return atomic_load(&gs_captures_active) != 0 && status_unrecordable(stream);
}

CUstreamCaptureMode gs_capture_relax_thread(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (GS_REAL(cuThreadExchangeStreamCaptureMode) &&
        GS_REAL(cuThreadExchangeStreamCaptureMode)(&mode) != CUDA_SUCCESS)
        mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    return mode;
}

void gs_capture_restore_thread(CUstreamCaptureMode mode)
{
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED && GS_REAL(cuThreadExchangeStreamCaptureMode))
        GS_REAL(cuThreadExchangeStreamCaptureMode)(&mode);
}

/* Records events for the work admitted to `stream` (and to its context's
 * legacy stream) while both can still be recorded into. Called with
 * gs_capture_lock held. */
static void flush_before(CUstream stream, int ptsz, bool with_legacy)
{
    struct gs_launch_target t;
    if (gs_gate_resolve_stream(stream, ptsz, &t) == CUDA_SUCCESS)
        gs_drain_flush(&t, with_legacy);
}

/* ---- beginning and ending a capture ---------------------------------------- */

static void begin_prepare(CUstream stream, int ptsz)
{
    pthread_mutex_lock(&gs_capture_lock);
    atomic_fetch_add(&gs_captures_active, 1);
    /* A blocking stream that captures makes its context's legacy stream
     * unusable until the capture ends: flush that too. */
    flush_before(stream, ptsz, true);
}

static CUresult begin_finish(CUstream stream, int ptsz, CUresult rc)
{
    if (rc == CUDA_SUCCESS && norigins < MAX_CAPTURES) {
        origins[norigins++] = (struct capture_origin){plain_handle(stream, ptsz), pthread_self()};
    } else {
        if (rc == CUDA_SUCCESS)
            gs_log(GS_LOG_WARN, "more than %d captures at once: launches stay ungated while any is open", MAX_CAPTURES);
        else
            atomic_fetch_sub(&gs_captures_active, 1);
    }
    pthread_mutex_unlock(&gs_capture_lock);
    return rc;
}

static CUresult end_finish(CUstream stream, int ptsz, CUresult rc)
{
    CUstream plain = plain_handle(stream, ptsz);
    pthread_mutex_lock(&gs_capture_lock);
    for (int i = 0; i < norigins; i++) {
        struct capture_origin *o = &origins[i];
        if (o->stream != plain || (plain == CU_STREAM_PER_THREAD && !pthread_equal(o->thread, pthread_self())))
            continue;
        /* Ended, whether it succeeded or was invalidated; still open only
         * if the call was refused (wrong thread, wrong stream). */
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        if (GS_REAL(cuStreamIsCapturing)(plain, &status) != CUDA_SUCCESS ||
            status == CU_STREAM_CAPTURE_STATUS_NONE) {
            *o = origins[--norigins];
            atomic_fetch_sub(&gs_captures_active, 1);
        }
        break;
    }
    pthread_mutex_unlock(&gs_capture_lock);
    return rc;
}

/* After a capture into a graph of its own began (not ToGraph). */
static CUresult new_graph_began(CUstream stream, int ptsz, CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        gs_graphmem_capture_began(stream, ptsz);
    return rc;
}

GS_EXPORT CUresult cuStreamBeginCapture(CUstream stream)
{
    GS_PROLOGUE(cuStreamBeginCapture);
    begin_prepare(stream, 0);
    return new_graph_began(stream, 0, begin_finish(stream, 0, GS_REAL(cuStreamBeginCapture)(stream)));
}

GS_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream stream)
{
    GS_PROLOGUE(cuStreamBeginCapture_ptsz);
    begin_prepare(stream, 1);
    return new_graph_began(stream, 1, begin_finish(stream, 1, GS_REAL(cuStreamBeginCapture_ptsz)(stream)));
}

GS_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode)
{
    GS_PROLOGUE(cuStreamBeginCapture_v2);
    begin_prepare(stream, 0);
    return new_graph_began(stream, 0, begin_finish(stream, 0, GS_REAL(cuStreamBeginCapture_v2)(stream, mode)));
}

GS_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode)
{
    GS_PROLOGUE(cuStreamBeginCapture_v2_ptsz);
    begin_prepare(stream, 1);
    return new_graph_began(stream, 1, begin_finish(stream, 1, GS_REAL(cuStreamBeginCapture_v2_ptsz)(stream, mode)));
}

GS_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                               const CUgraphEdgeData *edges, size_t ndeps, CUstreamCaptureMode mode)
{
    GS_PROLOGUE(cuStreamBeginCaptureToGraph);
    begin_prepare(stream, 0);
    return begin_finish(stream, 0, GS_REAL(cuStreamBeginCaptureToGraph)(stream, graph, deps, edges, ndeps, mode));
}

GS_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                                    const CUgraphEdgeData *edges, size_t ndeps,
                                                    CUstreamCaptureMode mode)
{
    GS_PROLOGUE(cuStreamBeginCaptureToGraph_ptsz);
    begin_prepare(stream, 1);
    return begin_finish(stream, 1,
                        GS_REAL(cuStreamBeginCaptureToGraph_ptsz)(stream, graph, deps, edges, ndeps, mode));
}

GS_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph)
{
    GS_PROLOGUE(cuStreamEndCapture);
    return end_finish(stream, 0, GS_REAL(cuStreamEndCapture)(stream, graph));
}

GS_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph *graph)
{
    GS_PROLOGUE(cuStreamEndCapture_ptsz);
    return end_finish(stream, 1, GS_REAL(cuStreamEndCapture_ptsz)(stream, graph));
}

/* ---- joining a capture, and stream lifetimes -------------------------------- */

/* A wait on an event recorded inside a capture makes the waiting stream
 * join it: flush the stream first. No capture under way, nothing to do. */
static CUresult wait_event(CUstream stream, int ptsz, CUevent event, unsigned flags,
                           CUresult (*real)(CUstream, CUevent, unsigned))
{
    if (atomic_load(&gs_captures_active) == 0)
        return real(stream, event, flags);
    pthread_mutex_lock(&gs_capture_lock);
    flush_before(stream, ptsz, false);
    CUresult rc = real(stream, event, flags);
    pthread_mutex_unlock(&gs_capture_lock);
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
    pthread_mutex_lock(&gs_capture_lock);
    struct gs_launch_target t;
    bool known = gs_gate_resolve_stream(stream, 0, &t) == CUDA_SUCCESS && t.kind == GS_STREAM_CREATED;
    if (known)
        gs_drain_flush(&t, false);
    CUresult rc = real(stream);
    if (known && rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&gs_gate_lock);
        gs_drain_forget_stream_locked(stream, t.ctx);
        pthread_mutex_unlock(&gs_gate_lock);
        atomic_fetch_add(&gs_handles_gen, 1);
    }
    pthread_mutex_unlock(&gs_capture_lock);
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

void gs_capture_after_fork_child(void)
{
    /* A child has no captures: they belong to the parent's contexts. */
    pthread_mutex_init(&gs_capture_lock, NULL);
    atomic_store(&gs_captures_active, 0);
    norigins = 0;
}
