/*
 * Which GPU a call concerns (see gs_lookup.h). A launch's device is the
 * device of its stream: a created stream's own context (cuStreamGetCtx),
 * or for the legacy and per-thread default streams the calling thread's
 * current context. So a CUkernel from cuLibraryGetKernel, launched on a
 * stream with no current context, is gated on the stream's device; so is
 * cuMemAllocAsync.
 *
 * Owns the calling thread's cached current GPU (its own); the table of
 * GPUs is gs_dispatch.c's, guarded by the gate lock.
 */
#include "gs_lookup.h"
#include "gs_conn.h"
#include "gs_contexts.h"
#include "gs_dispatch.h"
#include "gs_drain.h"
#include "gs_gate_thread.h"
#include "gs_locks.h"

#include <string.h>

static __thread struct gs_dev *current_dev;

struct gs_dev *gs_lookup_current_known(void)
{
    return current_dev;
}

void gs_lookup_forget_current(void)
{
    current_dev = NULL;
}

/* The GPU of a device by ordinal, made on first use: its drainer and the
 * gate thread started, then its slice machine told how things stand. */
CUresult gs_lookup_ordinal(CUdevice ordinal, struct gs_dev **out)
{
    CUuuid uuid;
    CUresult rc = GS_REAL(cuDeviceGetUuid_v2) ? GS_REAL(cuDeviceGetUuid_v2)(&uuid, ordinal)
                                              : GS_REAL(cuDeviceGetUuid)(&uuid, ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Sent with the device's declaration: the server warns of a memory
     * cap larger than the GPU. Not on any launch's path. */
    size_t total = 0;
    if (!GS_REAL(cuDeviceTotalMem_v2) || GS_REAL(cuDeviceTotalMem_v2)(&total, ordinal) != CUDA_SUCCESS)
        total = 0;
    gs_lock(GS_LOCK_GATE);
    struct gs_dev *found = NULL, *free_slot = NULL;
    for (int i = 0; i < GS_MAX_DEVICES && !found; i++) {
        struct gs_dev *d = &gs_devs[i];
        if (d->used && memcmp(d->uuid, uuid.bytes, 16) == 0)
            found = d;
        else if (!d->used && !free_slot)
            free_slot = d;
    }
    bool added = !found && free_slot;
    if (added) {
        found = free_slot;
        found->used = true;
        found->slot = (int)(found - gs_devs);
        found->ordinal = ordinal;
        memcpy(found->uuid, uuid.bytes, 16);
        found->total_mem = total;
    }
    if (found) {
        /* a no-op once they run; their start may have failed before */
        gs_drain_start_locked(found);
        gs_gate_thread_start_locked();
    }
    if (added) {
        /* After the gate thread's start: while it connects, launches wait
         * for its WELCOME (gs_slice.c). */
        struct gs_slice_event ev = {.type = GS_SLICE_ADDED, .connected = gs_conn_connected_locked(),
                                    .connecting = gs_conn_connecting_locked(),
                                    .policy_open = gs_conn_policy_open_locked()};
        struct gs_slice_actions actions;
        gs_dispatch_locked(found, &ev, gs_now_ns(), &actions);
    }
    gs_unlock(GS_LOCK_GATE);
    if (!found)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = found;
    return CUDA_SUCCESS;
}

/* The GPU and registry entry of a context. */
static CUresult context_gpu(CUcontext handle, struct gs_ctx **ctx_out, struct gs_dev **dev_out)
{
    gs_lock(GS_LOCK_GATE);
    struct gs_ctx *c = gs_ctx_get_locked(handle);
    struct gs_dev *d = c ? c->dev : NULL;
    /* A context another thread is releasing lives on unless that release
     * is its last: its device is known, and nothing of the context is
     * touched here, so its work is gated and its memory counted like any
     * other (gs_ctx_use_locked refuses a closing context). */
    if (c && d && !c->dead) {
        gs_unlock(GS_LOCK_GATE);
        *ctx_out = c;
        *dev_out = d;
        return CUDA_SUCCESS;
    }
    bool usable = gs_ctx_use_locked(c);
    gs_unlock(GS_LOCK_GATE);
    if (!usable)
        return c ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = CUDA_SUCCESS;
    if (!d) {
        CUdevice ordinal;
        if ((rc = gs_ctx_device(c, &ordinal)) == CUDA_SUCCESS)
            rc = gs_lookup_ordinal(ordinal, &d);
    }
    gs_lock(GS_LOCK_GATE);
    if (rc == CUDA_SUCCESS)
        c->dev = d;
    gs_ctx_unuse_locked(c);
    gs_unlock(GS_LOCK_GATE);
    *ctx_out = c;
    *dev_out = d;
    return rc;
}

CUresult gs_lookup_current(struct gs_dev **out)
{
    if (current_dev) {
        *out = current_dev;
        return CUDA_SUCCESS;
    }
    CUcontext ctx = NULL;
    CUresult rc = GS_REAL(cuCtxGetCurrent)(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct gs_ctx *c;
    if ((rc = context_gpu(ctx, &c, out)) == CUDA_SUCCESS)
        current_dev = *out;
    return rc;
}

struct gs_dev *gs_lookup_known(bool any_stream, CUstream stream)
{
    if (current_dev && (any_stream || !stream || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD))
        return current_dev;
    CUcontext ctx = NULL;
    bool created = !any_stream && stream && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD;
    CUresult rc = created && GS_REAL(cuStreamGetCtx) ? GS_REAL(cuStreamGetCtx)(stream, &ctx)
                                                     : GS_REAL(cuCtxGetCurrent)(&ctx);
    if (rc != CUDA_SUCCESS || !ctx)
        return NULL;
    gs_lock(GS_LOCK_GATE);
    struct gs_ctx *c = gs_ctx_get_locked(ctx);
    struct gs_dev *d = c && !c->dead ? c->dev : NULL;
    gs_unlock(GS_LOCK_GATE);
    return d;
}

CUresult gs_lookup_stream(CUstream stream, int ptsz, struct gs_launch_target *t)
{
    uintptr_t value = (uintptr_t)stream;
    CUcontext ctx = NULL;
    CUresult rc;
    if (value == 0)
        t->kind = ptsz ? GS_STREAM_PER_THREAD : GS_STREAM_LEGACY;
    else if (value == (uintptr_t)CU_STREAM_LEGACY)
        t->kind = GS_STREAM_LEGACY;
    else if (value == (uintptr_t)CU_STREAM_PER_THREAD)
        t->kind = GS_STREAM_PER_THREAD;
    else
        t->kind = GS_STREAM_CREATED;
    t->stream = t->kind == GS_STREAM_LEGACY ? CU_STREAM_LEGACY
              : t->kind == GS_STREAM_PER_THREAD ? CU_STREAM_PER_THREAD : stream;
    /* A created stream carries its context, with or without a current one
     * (a CUkernel launch needs none); a default stream is the current
     * context's. */
    if (t->kind == GS_STREAM_CREATED && GS_REAL(cuStreamGetCtx))
        rc = GS_REAL(cuStreamGetCtx)(stream, &ctx);
    else
        rc = GS_REAL(cuCtxGetCurrent)(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return context_gpu(ctx, &t->ctx, &t->dev);
}
