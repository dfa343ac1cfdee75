/*
 * fakecuda contexts: created and primary contexts, each thread's context
 * stack, cuCtxSynchronize, and what a destroyed context leaves behind.
 *
 * As the "cuCtxDestroy" reference says, a context destroyed while current
 * to other threads stays on their stacks, and their calls then fail with
 * CUDA_ERROR_CONTEXT_IS_DESTROYED; a destroyed context passed as an
 * argument is CUDA_ERROR_INVALID_CONTEXT. Its streams and events are
 * destroyed with it: their handles become stale (CUDA_ERROR_INVALID_HANDLE).
 * The CU_CTX_SCHED_* flags decide how its synchronizing calls wait
 * (fc_sync.c); a primary context takes cuDevicePrimaryCtxSetFlags's.
 */
#include "fc_internal.h"

#include <stdlib.h>
#include <string.h>

/* Primary contexts and destroyed contexts; guarded by ctx_lock. Destroyed
 * contexts stay allocated so that a stale pointer (a thread's stack, a
 * per-thread stream entry) never touches freed memory. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_ctx *retired_ctxs;
static struct primary_ctx {
    struct fc_ctx *ctx;
    unsigned refcount;
    unsigned flags;
} primaries[FC_MAX_DEVICES];

/* Each thread's context stack; owned by that thread alone. */
#define FC_CTX_STACK 64
static __thread uint64_t ctx_stack[FC_CTX_STACK];
static __thread int ctx_depth;

#define CTX_FLAGS (CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_COREDUMP_ENABLE | \
                   CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS)

static bool valid_flags(unsigned flags)
{
    unsigned sched = flags & CU_CTX_SCHED_MASK;
    return !(flags & ~(unsigned)CTX_FLAGS) &&
           (sched == CU_CTX_SCHED_AUTO || sched == CU_CTX_SCHED_SPIN || sched == CU_CTX_SCHED_YIELD ||
            sched == CU_CTX_SCHED_BLOCKING_SYNC);
}

void fc_ctx_atfork_prepare(void) { pthread_mutex_lock(&ctx_lock); }
void fc_ctx_atfork_parent(void) { pthread_mutex_unlock(&ctx_lock); }

void fc_ctx_atfork_child(void)
{
    memset(primaries, 0, sizeof primaries);
    ctx_depth = 0;
    pthread_mutex_unlock(&ctx_lock);
}

/* ---- lifetime ----------------------------------------------------------- */

static struct fc_ctx *ctx_new(int device, bool primary, unsigned flags, CUresult *err)
{
    uint64_t footprint = fc_mem_context_bytes();
    if (footprint && (*err = fc_mem_account(device, footprint)) != CUDA_SUCCESS)
        return NULL;
    struct fc_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        fc_mem_unaccount(device, footprint);
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    ctx->footprint = footprint;
    ctx->device = device;
    ctx->primary = primary;
    ctx->flags = flags;
    fc_ctx_exec_init(ctx);
    fc_exec_lock();
    ctx->legacy = fc_stream_new_locked(ctx, FC_STREAM_LEGACY, 0, 0);
    fc_exec_unlock();
    ctx->handle = ctx->legacy ? fc_handle_new(FC_H_CONTEXT, ctx) : 0;
    if (!ctx->handle) {
        /* Never used: stop it as any other, and keep it retired. */
        fc_ctx_stop(ctx);
        pthread_mutex_lock(&ctx_lock);
        ctx->retired_next = retired_ctxs;
        retired_ctxs = ctx;
        pthread_mutex_unlock(&ctx_lock);
        fc_mem_unaccount(device, footprint);
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    *err = CUDA_SUCCESS;
    return ctx;
}

static void ctx_destroy(struct fc_ctx *ctx)
{
    fc_handle_free(FC_H_CONTEXT, ctx->handle);
    fc_ctx_stop(ctx);
    fc_mem_release_ctx(ctx);
    fc_mem_unaccount(ctx->device, ctx->footprint);
    pthread_mutex_lock(&ctx_lock);
    ctx->retired_next = retired_ctxs;
    retired_ctxs = ctx;
    pthread_mutex_unlock(&ctx_lock);
}

struct fc_ctx *fc_ctx_from_handle(const char *call, CUcontext handle)
{
    return fc_handle_use(call, FC_H_CONTEXT, (uint64_t)(uintptr_t)handle);
}

struct fc_ctx *fc_current_ctx(const char *call, CUresult *err)
{
    *err = fc_check_init();
    if (*err != CUDA_SUCCESS)
        return NULL;
    if (ctx_depth == 0) {
        *err = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    bool stale;
    uint64_t handle = ctx_stack[ctx_depth - 1];
    struct fc_ctx *ctx = fc_handle_lookup(FC_H_CONTEXT, handle, &stale);
    if (!ctx) {
        if (stale)
            fc_stale_use(call, FC_H_CONTEXT, handle);
        *err = stale ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_ERROR_INVALID_CONTEXT;
    }
    return ctx;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx || !valid_flags(flags))
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx_depth == FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fc_ctx *ctx = ctx_new(dev, false, flags, &rc);
    if (!ctx)
        return rc;
    ctx_stack[ctx_depth++] = ctx->handle;
    *pctx = (CUcontext)(uintptr_t)ctx->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

FC_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

FC_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int nparams,
                               unsigned int flags, CUdevice dev)
{
    if (nparams < 0 || (nparams > 0 && !params))
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

FC_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                               CUdevice dev)
{
    (void)params;
    return ctx_create(pctx, flags, dev);
}

FC_API CUresult cuCtxDestroy_v2(CUcontext handle)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *ctx = fc_ctx_from_handle(__func__, handle);
    if (!ctx || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth > 0 && ctx_stack[ctx_depth - 1] == ctx->handle)
        ctx_depth--;
    ctx_destroy(ctx);
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxDestroy(CUcontext handle)
{
    return cuCtxDestroy_v2(handle);
}

/* ---- the current context ------------------------------------------------ */

FC_API CUresult cuCtxSetCurrent(CUcontext handle)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    struct fc_ctx *ctx = fc_ctx_from_handle(__func__, handle);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = ctx->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = NULL;
    if (ctx_depth > 0 && fc_handle_get(FC_H_CONTEXT, ctx_stack[ctx_depth - 1]))
        *pctx = (CUcontext)(uintptr_t)ctx_stack[ctx_depth - 1];
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent_v2(CUcontext handle)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *ctx = fc_ctx_from_handle(__func__, handle);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent(CUcontext handle) { return cuCtxPushCurrent_v2(handle); }

FC_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t top = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = (CUcontext)(uintptr_t)top;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }

FC_API CUresult cuCtxGetDevice(CUdevice *device)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx(__func__, &rc);
    if (!ctx)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext handle)
{
    if (!handle)
        return cuCtxGetDevice(device);
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *ctx = fc_ctx_from_handle(__func__, handle);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx(__func__, &rc);
    if (!ctx)
        return rc;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    *flags = ctx->flags;
    fc_exec_unlock();
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSynchronize(void)
{
    CUresult rc;
    fc_exec_lock();
    struct fc_ctx *ctx = fc_current_ctx(__func__, &rc);
    if (ctx)
        rc = fc_capture_check_ctx_sync_locked(__func__, ctx);
    if (rc == CUDA_SUCCESS) {
        struct fc_fence **fences = NULL;
        long n = fc_ctx_sync_fences_locked(ctx, &fences);
        if (n < 0)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if (n > 0)
            fc_wait_fences_locked(fences, (size_t)n, fc_ctx_wait_policy_locked(ctx));
        free(fences);
    }
    fc_exec_unlock();
    return rc;
}

/* ---- primary contexts -------------------------------------------------- */

FC_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    struct primary_ctx *p = &primaries[dev];
    if (!p->ctx)
        p->ctx = ctx_new(dev, true, p->flags, &rc);
    if (p->ctx) {
        p->refcount++;
        *pctx = (CUcontext)(uintptr_t)p->ctx->handle;
    }
    pthread_mutex_unlock(&ctx_lock);
    return rc;
}

static CUresult primary_release(CUdevice dev, bool reset)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *dying = NULL;
    pthread_mutex_lock(&ctx_lock);
    struct primary_ctx *p = &primaries[dev];
    if (!reset && p->refcount == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        p->refcount = reset ? 0 : p->refcount - 1;
        if (p->refcount == 0) {
            dying = p->ctx;
            p->ctx = NULL;
        }
    }
    pthread_mutex_unlock(&ctx_lock);
    if (dying)
        ctx_destroy(dying);
    return rc;
}

FC_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev, false); }
FC_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev, false); }
FC_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_release(dev, true); }
FC_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_release(dev, true); }

FC_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    *flags = primaries[dev].flags;
    *active = primaries[dev].ctx != NULL;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

/* Applies to the primary context from now on, active or not (since CUDA
 * 11.0, "cuDevicePrimaryCtxSetFlags"). */
FC_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!valid_flags(flags))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    primaries[dev].flags = flags;
    if (primaries[dev].ctx) {
        fc_exec_lock();
        primaries[dev].ctx->flags = flags;
        fc_exec_unlock();
    }
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
