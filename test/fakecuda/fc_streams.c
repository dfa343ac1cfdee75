/*
 * fakecuda streams: the three kinds a stream argument can name, and the
 * stream calls.
 *   - NULL and CU_STREAM_LEGACY: the current context's legacy default
 *     stream, which waits for all prior work of the context's blocking
 *     streams and which they wait for ("Default Stream", CUDA Programming
 *     Guide);
 *   - CU_STREAM_PER_THREAD, and NULL in the _ptsz/_ptds entry points: the
 *     per-thread default stream of (calling thread, current context), a
 *     blocking stream that synchronizes with the legacy stream but not with
 *     other streams; it lives as long as its thread or its context;
 *   - a created stream, blocking unless created with CU_STREAM_NON_BLOCKING,
 *     which needs no current context.
 */
#include "fc_internal.h"

#include <stdlib.h>

/* Next cuStreamGetId value; guarded by the exec lock. */
static uint64_t next_stream_id = 1;

struct fc_stream *fc_stream_new_locked(struct fc_ctx *ctx, enum fc_stream_kind kind, unsigned flags,
                                       int priority)
{
    struct fc_stream *stream = calloc(1, sizeof *stream);
    if (!stream)
        return NULL;
    stream->ctx = ctx;
    stream->kind = kind;
    stream->flags = flags;
    stream->priority = priority;
    stream->id = next_stream_id++;
    stream->next = ctx->streams;
    if (ctx->streams)
        ctx->streams->prev = stream;
    ctx->streams = stream;
    return stream;
}

/* ---- per-thread default streams ---------------------------------------- */

/* The calling thread's per-thread default streams, one per context it
 * used one in; owned by that thread. The list is also the value of
 * per_thread_key, whose destructor retires the streams when the thread
 * exits. A context that stops frees its streams itself: entries of a
 * stopped context are never followed. */
struct per_thread_streams {
    unsigned count, cap;
    struct {
        struct fc_ctx *ctx;
        struct fc_stream *stream;
    } entry[];
};

static __thread struct per_thread_streams *per_thread;
static pthread_key_t per_thread_key;
static pthread_once_t per_thread_key_once = PTHREAD_ONCE_INIT;

static void retire_per_thread_streams(void *value)
{
    struct per_thread_streams *list = value;
    fc_exec_lock();
    for (unsigned i = 0; i < list->count; i++) {
        if (list->entry[i].ctx->stopping)
            continue;
        struct fc_stream *stream = list->entry[i].stream;
        stream->destroyed = true;
        fc_capture_stream_destroyed_locked("pthread_exit", stream);
        fc_stream_release_locked(stream);
    }
    fc_exec_unlock();
    free(list);
    per_thread = NULL;
}

static void make_per_thread_key(void)
{
    if (pthread_key_create(&per_thread_key, retire_per_thread_streams) != 0)
        fc_log("cannot create a thread key: per-thread streams outlive their threads");
}

static CUresult per_thread_stream_locked(struct fc_ctx *ctx, struct fc_stream **out)
{
    struct per_thread_streams *list = per_thread;
    for (unsigned i = 0; list && i < list->count; i++)
        if (list->entry[i].ctx == ctx) {
            *out = list->entry[i].stream;
            return CUDA_SUCCESS;
        }
    pthread_once(&per_thread_key_once, make_per_thread_key);
    if (!list || list->count == list->cap) {
        unsigned cap = list ? list->cap * 2 : 4;
        struct per_thread_streams *grown =
            realloc(list, sizeof *grown + cap * sizeof grown->entry[0]);
        if (!grown)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (!list)
            grown->count = 0;
        grown->cap = cap;
        per_thread = list = grown;
        if (pthread_setspecific(per_thread_key, list) != 0)
            fc_log("cannot register this thread's per-thread streams: they outlive it");
    }
    struct fc_stream *stream = fc_stream_new_locked(ctx, FC_STREAM_PER_THREAD, 0, 0);
    if (!stream)
        return CUDA_ERROR_OUT_OF_MEMORY;
    stream->owner = pthread_self();
    list->entry[list->count].ctx = ctx;
    list->entry[list->count].stream = stream;
    list->count++;
    *out = stream;
    return CUDA_SUCCESS;
}

void fc_streams_atfork_child(void)
{
    /* The parent's contexts do not exist in the child. */
    if (per_thread)
        per_thread->count = 0;
}

/* ---- resolving a stream argument ---------------------------------------- */

CUresult fc_resolve_stream_locked(const char *call, CUstream hstream, enum fc_null_stream null_means,
                                  struct fc_stream **out)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    uintptr_t value = (uintptr_t)hstream;
    if (value == 0 || hstream == CU_STREAM_LEGACY || hstream == CU_STREAM_PER_THREAD) {
        struct fc_ctx *ctx = fc_current_ctx(call, &rc);
        if (!ctx)
            return rc;
        if (hstream == CU_STREAM_PER_THREAD || (value == 0 && null_means == FC_NULL_PER_THREAD))
            return per_thread_stream_locked(ctx, out);
        *out = ctx->legacy;
        return CUDA_SUCCESS;
    }
    struct fc_stream *stream = fc_handle_use(call, FC_H_STREAM, value);
    if (!stream)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = stream;
    return CUDA_SUCCESS;
}

/* ---- creation and destruction ------------------------------------------- */

static CUresult stream_create(CUstream *phstream, unsigned int flags, int priority)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx("cuStreamCreate", &rc);
    if (!ctx)
        return rc;
    if (!phstream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_stream *stream = fc_stream_new_locked(ctx, FC_STREAM_CREATED, flags,
                                                    priority > 0 ? 0 : priority < -5 ? -5 : priority);
    if (stream)
        stream->handle = fc_handle_new(FC_H_STREAM, stream);
    if (stream && !stream->handle) {
        stream->destroyed = true;
        fc_stream_release_locked(stream);
        stream = NULL;
    }
    fc_exec_unlock();
    if (!stream)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phstream = (CUstream)(uintptr_t)stream->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuStreamCreate(CUstream *phstream, unsigned int flags)
{
    return stream_create(phstream, flags, 0);
}

FC_API CUresult cuStreamCreateWithPriority(CUstream *phstream, unsigned int flags, int priority)
{
    return stream_create(phstream, flags, priority);
}

FC_API CUresult cuStreamDestroy_v2(CUstream hstream)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_stream *stream = fc_handle_use(__func__, FC_H_STREAM, (uint64_t)(uintptr_t)hstream);
    if (stream) {
        /* Work already queued still completes, as on a real device; the
         * stream goes when its queue has drained. */
        fc_handle_free(FC_H_STREAM, stream->handle);
        stream->handle = 0;
        stream->destroyed = true;
        fc_capture_stream_destroyed_locked(__func__, stream);
        fc_stream_release_locked(stream);
    }
    fc_exec_unlock();
    return stream ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FC_API CUresult cuStreamDestroy(CUstream hstream) { return cuStreamDestroy_v2(hstream); }

/* ---- synchronization ---------------------------------------------------- */

CUresult fc_stream_synchronize(const char *call, CUstream hstream, enum fc_null_stream null_means)
{
    fc_exec_lock();
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc == CUDA_SUCCESS)
        rc = fc_capture_check_sync_locked(call, stream);
    if (rc == CUDA_SUCCESS) {
        struct fc_fence **fences = NULL;
        long n = fc_stream_sync_fences_locked(stream, &fences);
        if (n < 0)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if (n > 0)
            fc_wait_fences_locked(fences, (size_t)n, fc_ctx_wait_policy_locked(stream->ctx));
        free(fences);
    }
    fc_exec_unlock();
    return rc;
}

CUresult fc_stream_query(const char *call, CUstream hstream, enum fc_null_stream null_means)
{
    fc_exec_lock();
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc == CUDA_SUCCESS)
        rc = fc_capture_check_sync_locked(call, stream);
    if (rc == CUDA_SUCCESS) {
        struct fc_fence **fences = NULL;
        long n = fc_stream_sync_fences_locked(stream, &fences);
        if (n < 0) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            rc = n == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
            for (long i = 0; i < n; i++)
                fc_fence_unref(fences[i]);
        }
        free(fences);
    }
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuStreamSynchronize(CUstream hstream)
{
    return fc_stream_synchronize(__func__, hstream, FC_NULL_LEGACY);
}

FC_API CUresult cuStreamQuery(CUstream hstream)
{
    return fc_stream_query(__func__, hstream, FC_NULL_LEGACY);
}

/* ---- queries ------------------------------------------------------------ */

/* The stream a query names, or an error. */
static CUresult query_stream(const char *call, CUstream hstream, enum fc_null_stream null_means,
                             const void *out, struct fc_stream **stream)
{
    fc_exec_lock();
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, stream);
    if (rc == CUDA_SUCCESS && !out)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        fc_exec_unlock();
    return rc; /* on success the exec lock is held */
}

CUresult fc_stream_get_ctx(const char *call, CUstream hstream, enum fc_null_stream null_means,
                           CUcontext *pctx)
{
    struct fc_stream *stream;
    CUresult rc = query_stream(call, hstream, null_means, pctx, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    *pctx = (CUcontext)(uintptr_t)stream->ctx->handle;
    fc_exec_unlock();
    return CUDA_SUCCESS;
}

CUresult fc_stream_get_device(const char *call, CUstream hstream, enum fc_null_stream null_means,
                              CUdevice *device)
{
    struct fc_stream *stream;
    CUresult rc = query_stream(call, hstream, null_means, device, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    *device = stream->ctx->device;
    fc_exec_unlock();
    return CUDA_SUCCESS;
}

CUresult fc_stream_get_flags(const char *call, CUstream hstream, enum fc_null_stream null_means,
                             unsigned int *flags)
{
    struct fc_stream *stream;
    CUresult rc = query_stream(call, hstream, null_means, flags, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    *flags = stream->flags;
    fc_exec_unlock();
    return CUDA_SUCCESS;
}

CUresult fc_stream_get_priority(const char *call, CUstream hstream, enum fc_null_stream null_means,
                                int *priority)
{
    struct fc_stream *stream;
    CUresult rc = query_stream(call, hstream, null_means, priority, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    *priority = stream->priority;
    fc_exec_unlock();
    return CUDA_SUCCESS;
}

CUresult fc_stream_get_id(const char *call, CUstream hstream, enum fc_null_stream null_means,
                          unsigned long long *id)
{
    struct fc_stream *stream;
    CUresult rc = query_stream(call, hstream, null_means, id, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    *id = stream->id;
    fc_exec_unlock();
    return CUDA_SUCCESS;
}

FC_API CUresult cuStreamGetCtx(CUstream hstream, CUcontext *pctx)
{
    return fc_stream_get_ctx(__func__, hstream, FC_NULL_LEGACY, pctx);
}

FC_API CUresult cuStreamGetCtx_v2(CUstream hstream, CUcontext *pctx, CUgreenCtx *pgreen)
{
    if (!pgreen)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = fc_stream_get_ctx(__func__, hstream, FC_NULL_LEGACY, pctx);
    if (rc == CUDA_SUCCESS)
        *pgreen = NULL;
    return rc;
}

FC_API CUresult cuStreamGetDevice(CUstream hstream, CUdevice *device)
{
    return fc_stream_get_device(__func__, hstream, FC_NULL_LEGACY, device);
}

FC_API CUresult cuStreamGetFlags(CUstream hstream, unsigned int *flags)
{
    return fc_stream_get_flags(__func__, hstream, FC_NULL_LEGACY, flags);
}

FC_API CUresult cuStreamGetPriority(CUstream hstream, int *priority)
{
    return fc_stream_get_priority(__func__, hstream, FC_NULL_LEGACY, priority);
}

FC_API CUresult cuStreamGetId(CUstream hstream, unsigned long long *id)
{
    return fc_stream_get_id(__func__, hstream, FC_NULL_LEGACY, id);
}
