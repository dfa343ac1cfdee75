/*
 * Stream capture, as the shim knows it (see gs_capture.h): the count of
 * captures under way and where each began, and the question "is this
 * stream capturing?".
 *
 * NVIDIA's rules (CUDA Programming Guide, "Prohibited and Unhandled
 * Operations"; cuThreadExchangeStreamCaptureMode) that shape the shim:
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
 * there (gs_streams.c). The capture lock (gs_locks.h) keeps a drainer's
 * "not capturing? then record" from interleaving with those calls.
 *
 * Owns gs_captures_active (atomic) and `origins` (guarded by the capture
 * lock).
 */
#include "gs_capture.h"
#include "gs_log.h"

#include <pthread.h>

_Atomic int gs_captures_active;

/* Captures begun through the shim and not yet seen ended. A per-thread
 * default stream is named by its thread. */
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

void gs_capture_beginning_locked(void)
{
    atomic_fetch_add(&gs_captures_active, 1);
}

bool gs_capture_began_locked(CUstream stream, int ptsz, CUresult rc)
{
    if (rc == CUDA_SUCCESS && norigins < MAX_CAPTURES) {
        origins[norigins++] = (struct capture_origin){plain_handle(stream, ptsz), pthread_self()};
        return true;
    }
    if (rc == CUDA_SUCCESS)
        gs_log(GS_LOG_WARN, "more than %d captures at once: launches stay ungated while any is open", MAX_CAPTURES);
    else
        atomic_fetch_sub(&gs_captures_active, 1);
    return rc == CUDA_SUCCESS;
}

bool gs_capture_ended_locked(CUstream stream, int ptsz)
{
    CUstream plain = plain_handle(stream, ptsz);
    for (int i = 0; i < norigins; i++) {
        struct capture_origin *o = &origins[i];
        if (o->stream != plain || (plain == CU_STREAM_PER_THREAD && !pthread_equal(o->thread, pthread_self())))
            continue;
        /* Ended, whether it succeeded or was invalidated; still open only
         * if the call was refused (wrong thread, wrong stream). */
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        if (GS_REAL(cuStreamIsCapturing)(plain, &status) != CUDA_SUCCESS || status == CU_STREAM_CAPTURE_STATUS_NONE) {
            *o = origins[--norigins];
            atomic_fetch_sub(&gs_captures_active, 1);
            return true;
        }
        return false;
    }
    return false;
}

void gs_capture_after_fork_child(void)
{
    /* A child has no captures: they belong to the parent's contexts. */
    atomic_store(&gs_captures_active, 0);
    norigins = 0;
}
