/*
 * fakecuda events: create, record, query, synchronize, elapsed time,
 * destroy, and cuStreamWaitEvent. An event stands for the completion of
 * the op its last record queued (a fence). Recorded in a capturing stream,
 * it stands for a place in the capture instead (see fc_capture.c).
 * cuEventSynchronize waits as the context's CU_CTX_SCHED_* flags say,
 * except that an event created with CU_EVENT_BLOCKING_SYNC always blocks
 * ("cuEventCreate"); one created with CU_EVENT_DISABLE_TIMING has no time
 * (cuEventElapsedTime: CUDA_ERROR_INVALID_HANDLE).
 */
#include "fc_internal.h"

#include <stdlib.h>

#define EVENT_FLAGS (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)

static struct fc_event *event_use(const char *call, CUevent hevent)
{
    return fc_handle_use(call, FC_H_EVENT, (uint64_t)(uintptr_t)hevent);
}

FC_API CUresult cuEventCreate(CUevent *phevent, unsigned int flags)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx(__func__, &rc);
    if (!ctx)
        return rc;
    if (!phevent || (flags & ~(unsigned)EVENT_FLAGS) ||
        ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_event *event = calloc(1, sizeof *event);
    if (!event)
        return CUDA_ERROR_OUT_OF_MEMORY;
    event->ctx = ctx;
    event->flags = flags;
    fc_exec_lock();
    event->handle = fc_handle_new(FC_H_EVENT, event);
    if (event->handle) {
        event->next = ctx->events;
        if (ctx->events)
            ctx->events->prev = event;
        ctx->events = event;
    }
    fc_exec_unlock();
    if (!event->handle) {
        free(event);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phevent = (CUevent)(uintptr_t)event->handle;
    return CUDA_SUCCESS;
}

CUresult fc_event_record(const char *call, CUevent hevent, CUstream hstream, enum fc_null_stream null_means,
                         unsigned flags)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_event *event = event_use(call, hevent);
    struct fc_stream *stream = NULL;
    if (!event)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc == CUDA_SUCCESS && stream->ctx != event->ctx)
        rc = CUDA_ERROR_INVALID_HANDLE; /* "must be from the same context" */
    if (rc == CUDA_SUCCESS)
        rc = fc_capture_check_legacy_locked(call, stream);
    if (rc == CUDA_SUCCESS && stream->capture) {
        rc = fc_capture_record_locked(stream, event, flags);
    } else if (rc == CUDA_SUCCESS && (flags & CU_EVENT_RECORD_EXTERNAL)) {
        rc = CUDA_ERROR_INVALID_VALUE; /* "invalid outside of stream capture" */
    } else if (rc == CUDA_SUCCESS) {
        struct fc_work work = {.kind = FC_WORK_RECORD};
        struct fc_fence *fence = NULL;
        rc = fc_enqueue_locked(stream, &work, NULL, &fence);
        if (rc == CUDA_SUCCESS) {
            fc_fence_unref(event->fence);
            event->fence = fence;
            event->capture_id = 0;
        }
    }
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuEventRecord(CUevent hevent, CUstream hstream)
{
    return fc_event_record(__func__, hevent, hstream, FC_NULL_LEGACY, 0);
}

FC_API CUresult cuEventRecordWithFlags(CUevent hevent, CUstream hstream, unsigned int flags)
{
    return fc_event_record(__func__, hevent, hstream, FC_NULL_LEGACY, flags);
}

FC_API CUresult cuEventQuery(CUevent hevent)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_event *event = event_use(__func__, hevent);
    if (!event)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = fc_capture_check_event_locked(__func__, event);
    /* Never recorded: an empty set of work, complete. */
    if (rc == CUDA_SUCCESS && event->fence && !atomic_load(&event->fence->done))
        rc = CUDA_ERROR_NOT_READY;
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuEventSynchronize(CUevent hevent)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_event *event = event_use(__func__, hevent);
    if (!event)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = fc_capture_check_event_locked(__func__, event);
    if (rc == CUDA_SUCCESS && event->fence && !atomic_load(&event->fence->done)) {
        struct fc_fence *fence = fc_fence_ref(event->fence);
        enum fc_wait_policy policy = (event->flags & CU_EVENT_BLOCKING_SYNC)
                                         ? FC_WAIT_BLOCK
                                         : fc_ctx_wait_policy_locked(event->ctx);
        fc_wait_fences_locked(&fence, 1, policy);
    }
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuEventElapsedTime(float *ms, CUevent hstart, CUevent hend)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_event *start = event_use(__func__, hstart), *end = event_use(__func__, hend);
    if (!start || !end || ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) || !start->fence ||
        !end->fence)
        rc = CUDA_ERROR_INVALID_HANDLE; /* no timing, or not recorded */
    else if (!atomic_load(&start->fence->done) || !atomic_load(&end->fence->done))
        rc = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)((double)(int64_t)(end->fence->time_ns - start->fence->time_ns) / 1e6);
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuEventElapsedTime_v2(float *ms, CUevent hstart, CUevent hend)
{
    return cuEventElapsedTime(ms, hstart, hend);
}

FC_API CUresult cuEventDestroy_v2(CUevent hevent)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_event *event = event_use(__func__, hevent);
    if (event) {
        /* A pending record completes without it: the fence outlives it. */
        fc_handle_free(FC_H_EVENT, event->handle);
        if (event->prev)
            event->prev->next = event->next;
        else
            event->ctx->events = event->next;
        if (event->next)
            event->next->prev = event->prev;
        fc_fence_unref(event->fence);
        free(event);
    }
    fc_exec_unlock();
    return event ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FC_API CUresult cuEventDestroy(CUevent hevent) { return cuEventDestroy_v2(hevent); }

CUresult fc_stream_wait_event(const char *call, CUstream hstream, CUevent hevent, enum fc_null_stream null_means,
                              unsigned flags)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_stream *stream = NULL;
    struct fc_event *event = NULL;
    rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc == CUDA_SUCCESS && !(event = event_use(call, hevent)))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS)
        rc = fc_capture_check_legacy_locked(call, stream);
    bool handled = false;
    if (rc == CUDA_SUCCESS)
        rc = fc_capture_wait_locked(call, stream, event, flags, &handled);
    if (rc == CUDA_SUCCESS && !handled && event->fence && !atomic_load(&event->fence->done)) {
        struct fc_work work = {.kind = FC_WORK_WAIT};
        rc = fc_enqueue_locked(stream, &work, event->fence, NULL);
    }
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuStreamWaitEvent(CUstream hstream, CUevent hevent, unsigned int flags)
{
    return fc_stream_wait_event(__func__, hstream, hevent, FC_NULL_LEGACY, flags);
}
