/*
 * Context bookkeeping (see gs_contexts.h): the registry of contexts, their
 * uses and their event pools. (The wrappers of the calls that end a
 * context's life are gs_lifetimes.c's.)
 *
 * The registry is a list of entries that are never freed (a process has a
 * handful of contexts), guarded by the gate lock (gs_locks.h); ctx_cv
 * wakes a closer waiting for the last use; gs_handles_gen is bumped (no
 * lock) whenever a context or stream dies.
 */
#include "gs_contexts.h"
#include "gs_locks.h"
#include "gs_log.h"

#include <stdlib.h>

/* The registry; guarded by the gate lock. */
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
    gs_lock(GS_LOCK_GATE);
    if (timed && c->ntimed_events > 0)
        event = c->timed_events[--c->ntimed_events];
    else if (!timed && c->nevents > 0)
        event = c->events[--c->nevents];
    gs_unlock(GS_LOCK_GATE);
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

CUevent gs_ctx_probe(struct gs_ctx *c, CUstream stream)
{
    CUevent probe = gs_ctx_event_take(c, true);
    if (probe && GS_REAL(cuEventRecord)(probe, stream) != CUDA_SUCCESS) {
        gs_ctx_event_give(c, probe, true);
        probe = NULL;
    }
    return probe;
}

uint64_t gs_ctx_probe_age_ns(struct gs_ctx *c, CUevent probe, CUevent ended)
{
    if (!probe)
        return 0;
    gs_locks_check_none("a probe event");
    float ms = 0;
    bool ok = GS_REAL(cuEventSynchronize)(probe) == CUDA_SUCCESS &&
              GS_REAL(cuEventElapsedTime)(&ms, ended, probe) == CUDA_SUCCESS && ms > 0 && ms < 1000;
    gs_ctx_event_give(c, probe, true);
    return ok ? (uint64_t)((double)ms * 1e6) : 0;
}

void gs_ctx_event_give(struct gs_ctx *c, CUevent event, bool timed)
{
    if (!event)
        return;
    bool kept = false;
    gs_lock(GS_LOCK_GATE);
    if (timed && c->ntimed_events < GS_CTX_EVENT_POOL) {
        c->timed_events[c->ntimed_events++] = event;
        kept = true;
    } else if (!timed && c->nevents < GS_CTX_EVENT_POOL) {
        c->events[c->nevents++] = event;
        kept = true;
    }
    gs_unlock(GS_LOCK_GATE);
    if (!kept)
        GS_REAL(cuEventDestroy_v2)(event);
}

CUresult gs_ctx_device(struct gs_ctx *c, CUdevice *out)
{
    gs_lock(GS_LOCK_GATE);
    bool known = c->device_known;
    CUdevice device = c->device;
    gs_unlock(GS_LOCK_GATE);
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
    gs_lock(GS_LOCK_GATE);
    c->device = device;
    c->device_known = true;
    gs_unlock(GS_LOCK_GATE);
    *out = device;
    return CUDA_SUCCESS;
}

/* ---- lifetimes ---------------------------------------------------------------- */

struct gs_ctx *gs_ctx_begin_close(CUcontext handle, bool primary, CUdevice device)
{
    gs_lock(GS_LOCK_GATE);
    struct gs_ctx *found = NULL;
    for (struct gs_ctx *c = contexts; c && !found; c = c->next)
        if (!c->dead && (primary ? c->primary && c->device_known && c->device == device : c->handle == handle))
            found = c;
    if (found) {
        found->closing = true;
        while (found->uses > 0)
            pthread_cond_wait(&ctx_cv, gs_lock_mutex(GS_LOCK_GATE));
    }
    gs_unlock(GS_LOCK_GATE);
    return found;
}

void gs_ctx_died_locked(struct gs_ctx *c)
{
    c->dead = true;
    c->nevents = c->ntimed_events = 0; /* destroyed with the context */
    atomic_fetch_add(&gs_handles_gen, 1);
}

void gs_ctx_end_close_locked(struct gs_ctx *c)
{
    c->closing = false;
}

void gs_ctx_retained(CUcontext handle, CUdevice device)
{
    gs_lock(GS_LOCK_GATE);
    struct gs_ctx *c = gs_ctx_get_locked(handle);
    if (c) {
        c->primary = true;
        c->device = device;
        c->device_known = true;
    }
    gs_unlock(GS_LOCK_GATE);
}

void gs_contexts_after_fork_child(void)
{
    /* The parent's contexts do not exist in the child. The entries leak:
     * another thread of the parent may have been walking the list. */
    contexts = NULL;
    pthread_cond_init(&ctx_cv, NULL);
}
