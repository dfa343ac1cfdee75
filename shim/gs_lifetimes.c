/*
 * The ends of contexts' lives: the wrappers of cuCtxDestroy,
 * cuDevicePrimaryCtxRelease and cuDevicePrimaryCtxReset.
 *
 * NVIDIA forbids touching a context after cuCtxDestroy, after the last
 * cuDevicePrimaryCtxRelease or after cuDevicePrimaryCtxReset. So each of
 * these marks the context closing and waits until no shim thread uses it
 * (gs_contexts.c), makes the real call, and then either forgets
 * everything the shim holds in the context (it died: its listed streams,
 * marks and flush marks, graph measurements, allocations and footprint)
 * or reopens it (a release that left it alive, per
 * cuDevicePrimaryCtxGetState).
 *
 * Owns nothing.
 */
#include "gs_contexts.h"
#include "gs_ctxmem.h"
#include "gs_drain.h"
#include "gs_graphcost.h"
#include "gs_launch.h"
#include "gs_locks.h"
#include "gs_memory.h"

/* After the real call: the context died, or lives on. */
static void end_close(struct gs_ctx *c, bool died)
{
    if (c) {
        gs_lock(GS_LOCK_GATE);
        if (died) {
            gs_drain_forget_ctx_locked(c);
            gs_graphcost_forget_ctx_locked(c);
            gs_ctx_died_locked(c);
        }
        gs_ctx_end_close_locked(c);
        gs_unlock(GS_LOCK_GATE);
    }
    gs_launch_context_changed();
}

static CUresult ctx_destroy(CUcontext handle, CUresult (*real)(CUcontext))
{
    struct gs_ctx *c = gs_ctx_begin_close(handle, false, 0);
    CUresult rc = real(handle);
    end_close(c, rc == CUDA_SUCCESS);
    if (rc == CUDA_SUCCESS)
        gs_mem_context_died(handle); /* its allocations and footprint */
    return rc;
}

GS_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    GS_PROLOGUE(cuCtxDestroy);
    return ctx_destroy(ctx, GS_REAL(cuCtxDestroy));
}

GS_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    GS_PROLOGUE(cuCtxDestroy_v2);
    return ctx_destroy(ctx, GS_REAL(cuCtxDestroy_v2));
}

/* A release destroys the primary context when it drops the last
 * reference; a reset always does. Whether it died is the driver's answer. */
static CUresult primary_release(CUdevice dev, bool reset, CUresult (*real)(CUdevice))
{
    struct gs_ctx *c = gs_ctx_begin_close(NULL, true, dev);
    CUresult rc = real(dev);
    bool died = false;
    if (rc == CUDA_SUCCESS) {
        unsigned flags;
        int active = 1;
        died = reset || (GS_REAL(cuDevicePrimaryCtxGetState) &&
                         GS_REAL(cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS && !active);
    }
    end_close(c, died);
    if (died)
        gs_ctxmem_primary_died(dev); /* its allocations and footprint */
    return rc;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    GS_PROLOGUE(cuDevicePrimaryCtxRelease);
    return primary_release(dev, false, GS_REAL(cuDevicePrimaryCtxRelease));
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    GS_PROLOGUE(cuDevicePrimaryCtxRelease_v2);
    return primary_release(dev, false, GS_REAL(cuDevicePrimaryCtxRelease_v2));
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    GS_PROLOGUE(cuDevicePrimaryCtxReset);
    return primary_release(dev, true, GS_REAL(cuDevicePrimaryCtxReset));
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    GS_PROLOGUE(cuDevicePrimaryCtxReset_v2);
    return primary_release(dev, true, GS_REAL(cuDevicePrimaryCtxReset_v2));
}
