/*
 * Context bookkeeping and context lifetimes (see gs_contexts.h): the
 * registry of contexts, their event pools, and the wrappers of
 * cuCtxDestroy, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease and
 * cuDevicePrimaryCtxReset.
 *
 * The registry is a list of entries that are never freed (a process has a
 * handful of contexts), guarded by gs_gate_lock like the rest of the
 * gate's cold state; ctx_cv wakes a closer waiting for the last use.
 */
#include "gs_contexts.h"
#include "gs_memory.h"
#include "gs_gate.h"
#include "gs_hooks.h"
#include "gs_log.h"

#include <stdlib.h>

/* The registry; guarded by gs_gate_lock. */
static struct gs_ctx *contexts;
static pthread_cond_t ctx_cv = PTHREAD_COND_INITIALIZER;

_Atomic uint32_t gs_handles_gen;

struct gs_ctx *gs_ctx_get_locked(CUcontext handle)
{
    struct gs_ctx *dead = NULL;
    for (struct gs_ctx *c = contexts; c; c = c->next) {
        if (c->handle != handle)
            continue;
        if (!c->dead)
            return c;
        dead = c;
    }
    struct gs_ctx *c = dead;
    if (!c) {
        if (!(c = calloc(1, sizeof *c)))
            return NULL;
        c->next = contexts;
        contexts = c;
    } else {
        struct gs_ctx *next = c->next;
        *c = (struct gs_ctx){0};
        c->next = next;
    }
    c->handle = handle;
    return c;
}

bool gs_ctx_use_locked(struct gs_ctx *c)
{
    if (!c || c->closing || c->dead)
        return false;
    c->uses++;
    return true;
}

void gs_ctx_unuse_locked(struct gs_ctx *c)
{
    if (--c->uses == 0)
        pthread_cond_broadcast(&ctx_cv);
}

bool gs_ctx_push(struct gs_ctx *c)
{
    return GS_REAL(cuCtxPushCurrent_v2)(c->handle) == CUDA_SUCCESS;
}

void gs_ctx_pop(void)
{
    CUcontext popped;
    if (GS_REAL(cuCtxPopCurrent_v2)(&popped) != CUDA_SUCCESS)
        gs_log(GS_LOG_WARN, "cuCtxPopCurrent failed after the shim's own push");
}

CUevent gs_ctx_event_take(struct gs_ctx *c, bool timed)
{
    CUevent event = NULL;
    pthread_mutex_lock(&gs_gate_lock);
    if (timed && c->ntimed_events > 0)
        event = c->timed_events[--c->ntimed_events];
    else if (!timed && c->nevents > 0)
        event = c->events[--c->nevents];
    pthread_mutex_unlock(&gs_gate_lock);
    if (event)
        return event;
    /* Both kinds block: the drainer waits on timed ones too (gs_drain.c). */
    unsigned flags = timed ? CU_EVENT_BLOCKING_SYNC : CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING;
    CUresult rc = GS_REAL(cuEventCreate)(&event, flags);
    if (rc != CUDA_SUCCESS) {
        gs_log(GS_LOG_WARN, "cuEventCreate for the drainer failed (%d)", (int)rc);
        return NULL;
    }
    return event;
}

uint64_t gs_ctx_event_age_ns(struct gs_ctx *c, CUstream stream, CUevent ended)
{
    CUevent probe = gs_ctx_event_take(c, true);
    float ms = 0;
    bool ok = probe && GS_REAL(cuEventRecord)(probe, stream) == CUDA_SUCCESS &&
              GS_REAL(cuEventSynchronize)(probe) == CUDA_SUCCESS &&
              GS_REAL(cuEventElapsedTime)(&ms, ended, probe) == CUDA_SUCCESS && ms > 0 && ms < 1000;
    gs_ctx_event_give(c, probe, true);
    return ok ? (uint64_t)((double)ms * 1e6) : 0;
}

void gs_ctx_event_give(struct gs_ctx *c, CUevent event, bool timed)
{
    if (!event)
        return;
    bool kept = false;
    pthread_mutex_lock(&gs_gate_lock);
    if (timed && c->ntimed_events < GS_CTX_EVENT_POOL) {
        c->timed_events[c->ntimed_events++] = event;
        kept = true;
    } else if (!timed && c->nevents < GS_CTX_EVENT_POOL) {
        c->events[c->nevents++] = event;
        kept = true;
    }
    pthread_mutex_unlock(&gs_gate_lock);
    if (!kept)
        GS_REAL(cuEventDestroy_v2)(event);
}

CUresult gs_ctx_device(struct gs_ctx *c, CUdevice *out)
{
    pthread_mutex_lock(&gs_gate_lock);
    bool known = c->device_known;
    CUdevice device = c->device;
    pthread_mutex_unlock(&gs_gate_lock);
    if (known) {
        *out = device;
        return CUDA_SUCCESS;
    }
    CUcontext current = NULL;
    CUresult rc = GS_REAL(cuCtxGetCurrent)(&current);
    if (rc != CUDA_SUCCESS)
        return rc;
    bool pushed = current != c->handle;
    if (pushed && !gs_ctx_push(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    rc = GS_REAL(cuCtxGetDevice)(&device);
    if (pushed)
        gs_ctx_pop();
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&gs_gate_lock);
    c->device = device;
    c->device_known = true;
    pthread_mutex_unlock(&gs_gate_lock);
    *out = device;
    return CUDA_SUCCESS;
}

/* ---- lifetimes --------------------------------------------------------- */

/* Marks the context closing and waits until no shim thread uses it. */
static struct gs_ctx *begin_close(CUcontext handle, bool primary, CUdevice device)
{
    pthread_mutex_lock(&gs_gate_lock);
    struct gs_ctx *found = NULL;
    for (struct gs_ctx *c = contexts; c && !found; c = c->next)
        if (!c->dead && (primary ? c->primary && c->device_known && c->device == device : c->handle == handle))
            found = c;
    if (found) {
        found->closing = true;
        while (found->uses > 0)
            pthread_cond_wait(&ctx_cv, &gs_gate_lock);
    }
    pthread_mutex_unlock(&gs_gate_lock);
    return found;
}

/* After the real call: the context died, or lives on. */
static void end_close(struct gs_ctx *c, bool died)
{
    if (c) {
        pthread_mutex_lock(&gs_gate_lock);
        if (died) {
            gs_drain_forget_ctx_locked(c);
            c->dead = true;
            c->nevents = c->ntimed_events = 0; /* destroyed with the context */
            atomic_fetch_add(&gs_handles_gen, 1);
        }
        c->closing = false;
        pthread_mutex_unlock(&gs_gate_lock);
    }
    gs_hook_context_changed();
}

static CUresult ctx_destroy(CUcontext handle, CUresult (*real)(CUcontext))
{
    struct gs_ctx *c = begin_close(handle, false, 0);
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

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    GS_PROLOGUE(cuDevicePrimaryCtxRetain);
    struct gs_ctx_birth birth;
    CUresult rc = pctx ? gs_ctxmem_before(dev, true, &birth) : CUDA_SUCCESS;
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = GS_REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (pctx)
        rc = gs_ctxmem_after(&birth, rc, rc == CUDA_SUCCESS ? *pctx : NULL, true, dev);
    if (rc == CUDA_SUCCESS && pctx && *pctx) {
        pthread_mutex_lock(&gs_gate_lock);
        struct gs_ctx *c = gs_ctx_get_locked(*pctx);
        if (c) {
            c->primary = true;
            c->device = dev;
            c->device_known = true;
        }
        pthread_mutex_unlock(&gs_gate_lock);
    }
    return rc;
}

/* A release destroys the primary context when it drops the last
 * reference; a reset always does. Whether it died is the driver's answer. */
static CUresult primary_release(CUdevice dev, bool reset, CUresult (*real)(CUdevice))
{
    struct gs_ctx *c = begin_close(NULL, true, dev);
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

void gs_contexts_after_fork_child(void)
{
    /* The parent's contexts do not exist in the child. The entries leak:
     * another thread of the parent may have been walking the list. */
    contexts = NULL;
    pthread_cond_init(&ctx_cv, NULL);
}
