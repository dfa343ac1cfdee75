/*
 * fakecuda initialisation, devices and contexts: cuInit, the device
 * queries, primary and created contexts, each thread's context stack, and
 * what a forked child inherits (nothing: it must call cuInit again).
 */
#include "fc_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Process-wide driver state; guarded by proc_lock, except `initialized`,
 * which is also read without it (set last, under the lock). */
static pthread_mutex_t proc_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool initialized;
static struct fc_shared *shared;
static int self_slot = -1;
/* Destroyed contexts, kept so that stale streams and events that name them
 * fail cleanly instead of touching freed memory; guarded by proc_lock. */
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

uint64_t fc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fc_log(const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "fakecuda[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}

bool fc_parse_bytes(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || text[0] == '-')
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end != '\0' || (shift && v > (UINT64_MAX >> shift)))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

struct fc_shared *fc_shared_state(void) { return shared; }
int fc_self_slot(void) { return self_slot; }

CUresult fc_check_init(void)
{
    return atomic_load_explicit(&initialized, memory_order_acquire) ? CUDA_SUCCESS
                                                                   : CUDA_ERROR_NOT_INITIALIZED;
}

static void atfork_prepare(void)
{
    pthread_mutex_lock(&proc_lock);
    fc_mem_atfork_prepare();
    fc_handles_atfork_prepare();
}

static void atfork_parent(void)
{
    fc_handles_atfork_parent();
    fc_mem_atfork_parent();
    pthread_mutex_unlock(&proc_lock);
}

static void atfork_child(void)
{
    /* None of the parent's contexts or worker threads exist here. The
     * shared mapping stays; the child takes its own slot at cuInit. */
    fc_handles_atfork_child();
    fc_mem_atfork_child();
    if (!fc_state_after_fork_child())
        shared = NULL; /* cannot prove liveness: attach afresh at cuInit */
    memset(primaries, 0, sizeof primaries);
    ctx_depth = 0;
    self_slot = -1;
    atomic_store(&initialized, false);
    pthread_mutex_unlock(&proc_lock);
}

__attribute__((constructor)) static void fakecuda_load(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

FC_API CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&proc_lock);
    if (atomic_load(&initialized))
        goto out;
    const char *devices_env = getenv("FAKECUDA_DEVICES");
    const char *memory_env = getenv("FAKECUDA_MEMORY");
    uint64_t ndevices = 1, memory = 16ull << 30;
    if (devices_env && (!fc_parse_bytes(devices_env, &ndevices) || ndevices < 1 ||
                        ndevices > FC_MAX_DEVICES)) {
        fc_log("FAKECUDA_DEVICES=%s: expected a count from 1 to %d", devices_env, FC_MAX_DEVICES);
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (memory_env && (!fc_parse_bytes(memory_env, &memory) || memory == 0)) {
        fc_log("FAKECUDA_MEMORY=%s: expected bytes, e.g. 16G or 512M", memory_env);
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!shared) {
        char err[256];
        shared = fc_state_open(getenv("FAKECUDA_STATE"), (int)ndevices, memory, err, sizeof err);
        if (!shared) {
            fc_log("cannot attach simulated GPUs: %s", err);
            rc = CUDA_ERROR_OPERATING_SYSTEM;
            goto out;
        }
    }
    self_slot = fc_state_register(shared, getpid());
    if (self_slot < 0) {
        fc_log("all %d process slots of the state file belong to live processes", FC_MAX_PROCS);
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }
    atomic_store_explicit(&initialized, true, memory_order_release);
out:
    pthread_mutex_unlock(&proc_lock);
    return rc;
}

FC_API CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = FC_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- contexts ----------------------------------------------------------- */

static struct fc_ctx *ctx_new(int device, bool primary, unsigned flags, CUresult *err)
{
    struct fc_ctx *ctx = calloc(1, sizeof *ctx);
    struct fc_stream *stream = calloc(1, sizeof *stream);
    if (!ctx || !stream) {
        free(ctx);
        free(stream);
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    ctx->device = device;
    ctx->primary = primary;
    ctx->flags = flags;
    stream->ctx = ctx;
    ctx->default_stream = stream;
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_cond_init(&ctx->work, NULL);
    pthread_cond_init(&ctx->space, NULL);
    pthread_cond_init(&ctx->done, NULL);
    ctx->handle = fc_handle_new(FC_H_CONTEXT, ctx);
    *err = ctx->handle ? fc_ctx_start(ctx) : CUDA_ERROR_OUT_OF_MEMORY;
    if (*err != CUDA_SUCCESS) {
        fc_handle_free(FC_H_CONTEXT, ctx->handle);
        free(stream);
        free(ctx);
        return NULL;
    }
    return ctx;
}

static void ctx_destroy(struct fc_ctx *ctx)
{
    fc_handle_free(FC_H_CONTEXT, ctx->handle);
    fc_ctx_stop(ctx);
    fc_mem_release_ctx(ctx);
    /* The object stays allocated: streams and events created in it may
     * still be named by the application and must fail cleanly, not crash.
     * They find the context stopped. */
    pthread_mutex_lock(&proc_lock);
    ctx->retired_next = retired_ctxs;
    retired_ctxs = ctx;
    pthread_mutex_unlock(&proc_lock);
}

static struct fc_ctx *ctx_from_handle(CUcontext handle)
{
    return fc_handle_get(FC_H_CONTEXT, (uint64_t)(uintptr_t)handle);
}

struct fc_ctx *fc_current_ctx(CUresult *err)
{
    *err = fc_check_init();
    if (*err != CUDA_SUCCESS)
        return NULL;
    if (ctx_depth == 0) {
        *err = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    struct fc_ctx *ctx = fc_handle_get(FC_H_CONTEXT, ctx_stack[ctx_depth - 1]);
    if (!ctx)
        *err = CUDA_ERROR_INVALID_CONTEXT;
    return ctx;
}

CUresult fc_resolve_stream(CUstream hstream, struct fc_stream **out)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    uintptr_t value = (uintptr_t)hstream;
    if (value == 0 || value == (uintptr_t)CU_STREAM_LEGACY || value == (uintptr_t)CU_STREAM_PER_THREAD) {
        struct fc_ctx *ctx = fc_current_ctx(&rc);
        if (!ctx)
            return rc;
        *out = ctx->default_stream;
        return CUDA_SUCCESS;
    }
    struct fc_stream *stream = fc_handle_get(FC_H_STREAM, value);
    if (!stream)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = stream;
    return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
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
    struct fc_ctx *ctx = ctx_from_handle(handle);
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
    struct fc_ctx *ctx = ctx_from_handle(handle);
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
    struct fc_ctx *ctx = ctx_from_handle(handle);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == FC_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx->handle;
    return CUDA_SUCCESS;
}

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

FC_API CUresult cuCtxGetDevice(CUdevice *device)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx(&rc);
    if (!ctx)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSynchronize(void)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx(&rc);
    if (!ctx)
        return rc;
    fc_ctx_drain(ctx);
    return CUDA_SUCCESS;
}

/* ---- primary contexts -------------------------------------------------- */

FC_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&proc_lock);
    struct primary_ctx *p = &primaries[dev];
    if (!p->ctx)
        p->ctx = ctx_new(dev, true, p->flags, &rc);
    if (p->ctx) {
        p->refcount++;
        *pctx = (CUcontext)(uintptr_t)p->ctx->handle;
    }
    pthread_mutex_unlock(&proc_lock);
    return rc;
}

static CUresult primary_release(CUdevice dev, bool reset)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_ctx *dying = NULL;
    pthread_mutex_lock(&proc_lock);
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
    pthread_mutex_unlock(&proc_lock);
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
    pthread_mutex_lock(&proc_lock);
    *flags = primaries[dev].flags;
    *active = primaries[dev].ctx != NULL;
    pthread_mutex_unlock(&proc_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&proc_lock);
    primaries[dev].flags = flags;
    pthread_mutex_unlock(&proc_lock);
    return CUDA_SUCCESS;
}
