/*
 * The device memory a context holds itself: hundreds of MiB on a real GPU
 * (its stacks, printf buffer, module images), counted against the cap
 * like an allocation, from its creation to its death (gs_contexts.c
 * reports deaths; gs_mem_context_died gives back the footprint with the
 * context's allocations).
 *
 * Before a context is created its footprint is reserved: the last one
 * measured on the device in this process, else GPUSLICE_CONTEXT_BYTES
 * (a byte count as gpuslice/rules.h writes one, "300M" or "300MiB", or
 * 0; 300 MiB by default). If the calling thread has a
 * context of the same device current, free memory is read before and after
 * the creation, and a difference larger than the reservation is what is
 * counted (and remembered for the next context); otherwise the estimate
 * stays. Free memory is the whole device's, so only a larger difference
 * can be trusted not to undercount: another process freeing meanwhile
 * makes it read low. A measured footprint
 * larger than the reservation that the cap cannot take makes the creation
 * fail with CUDA_ERROR_OUT_OF_MEMORY (the context is destroyed again).
 *
 * This file owns `measured` and `primaries`, guarded by the births lock
 * (gs_locks.h), which is held across a creation (context creations in a
 * process are serialised: two first retains of a primary context count it
 * once) but not across a reservation, which may ask the server: the
 * reservation is made first, and what the creation turns out to need
 * beyond it after.
 */
#include "gs_ctxmem.h"
#include "gs_contexts.h"
#include "gs_launch.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_lookup.h"
#include "gs_memory.h"
#include "gs_reserve.h"
#include "gs_settings.h"

#include "gpuslice/rules.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_CONTEXT_BYTES (300ull << 20)
#define MAX_PLAUSIBLE_FOOTPRINT (16ull << 30)

/* Around a context's creation: what was reserved for it, and what free
 * memory read before. */
struct birth {
    struct gs_dev *dev;
    bool counted;            /* a footprint was reserved */
    bool measurable;         /* free memory was read before */
    uint64_t reserved, free_before;
};

static uint64_t measured[GS_MAX_DEVICES];      /* by gs_devs slot; 0: none yet */
/* Each device's primary context, by ordinal, once retained. */
static struct primary { bool known; CUdevice dev; CUcontext ctx; } primaries[GS_MAX_DEVICES];

static struct primary *primary_of(CUdevice dev, bool add)
{
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        if (primaries[i].known && primaries[i].dev == dev)
            return &primaries[i];
    for (int i = 0; add && i < GS_MAX_DEVICES; i++)
        if (!primaries[i].known)
            return &primaries[i];
    return NULL;
}

/* GPUSLICE_CONTEXT_BYTES: a byte count as a tenant file writes one
 * (gpuslice/rules.h), or 0: contexts are counted as holding nothing. */
static uint64_t estimate(void)
{
    const char *v = gs_getenv("GPUSLICE_CONTEXT_BYTES");
    if (!v || !*v)
        return DEFAULT_CONTEXT_BYTES;
    uint64_t n;
    if (strcmp(v, "0") == 0)
        return 0;
    if (!gs_parse_bytes(v, &n)) {
        gs_log(GS_LOG_WARN, "GPUSLICE_CONTEXT_BYTES=%s is not a byte count; using %llu", v,
               (unsigned long long)DEFAULT_CONTEXT_BYTES);
        return DEFAULT_CONTEXT_BYTES;
    }
    return n;
}

/* Free memory on dev as the driver reports it, if a context of dev is
 * current on this thread. */
static bool free_on(CUdevice dev, uint64_t *free_bytes)
{
    CUcontext current = NULL;
    CUdevice current_dev;
    size_t f, t;
    if (GS_REAL(cuCtxGetCurrent)(&current) != CUDA_SUCCESS || !current ||
        GS_REAL(cuCtxGetDevice)(&current_dev) != CUDA_SUCCESS || current_dev != dev ||
        GS_REAL(cuMemGetInfo_v2)(&f, &t) != CUDA_SUCCESS)
        return false;
    *free_bytes = f;
    return true;
}

static bool primary_active(CUdevice dev)
{
    unsigned flags;
    int active = 0;
    return GS_REAL(cuDevicePrimaryCtxGetState) &&
           GS_REAL(cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS && active;
}

/* Before a context's creation: reserves its footprint (the last one
 * measured on the device, else GPUSLICE_CONTEXT_BYTES) and reads free
 * memory if it can. Returns with the births lock held, but on failure
 * (CUDA_ERROR_OUT_OF_MEMORY: the cap leaves no room). */
static CUresult before(CUdevice dev, bool primary, struct birth *b)
{
    *b = (struct birth){0};
    gs_lock(GS_LOCK_BIRTHS);
    if (primary && primary_active(dev))
        return CUDA_SUCCESS; /* nothing new to count */
    uint64_t guess = estimate();
    struct gs_dev *d;
    /* Nothing to count and nothing to measure: leave the device alone (the
     * gate learns of it at its first launch, as without a footprint). */
    uint64_t free_now;
    if ((!guess && !free_on(dev, &free_now)) || gs_lookup_ordinal(dev, &d) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    uint64_t reserved = measured[d->slot] ? measured[d->slot] : guess;
    gs_unlock(GS_LOCK_BIRTHS); /* the reservation may ask the server */
    CUresult rc = gs_reserve(d, reserved, primary ? "cuDevicePrimaryCtxRetain (the context's own memory)"
                                                  : "cuCtxCreate (the context's own memory)", reserved);
    if (rc != CUDA_SUCCESS)
        return rc;
    gs_lock(GS_LOCK_BIRTHS);
    if (primary && primary_active(dev)) {
        /* another thread retained it meanwhile: counted once, there */
        gs_lease_give(d, reserved);
        return CUDA_SUCCESS;
    }
    b->dev = d;
    b->reserved = reserved;
    b->counted = true;
    b->measurable = free_on(dev, &b->free_before);
    return CUDA_SUCCESS;
}

/* After it (rc: the creation's result; the births lock held): what the
 * caller returns. On CUDA_ERROR_OUT_OF_MEMORY the context has been
 * destroyed again. The lock is let go. */
static CUresult after(struct birth *b, CUresult rc, CUcontext ctx, bool primary, CUdevice dev)
{
    struct gs_dev *d = b->dev;
    struct primary *p = rc == CUDA_SUCCESS && primary ? primary_of(dev, true) : NULL;
    if (p)
        *p = (struct primary){true, dev, ctx};
    if (!b->counted) {
        gs_unlock(GS_LOCK_BIRTHS);
        return rc;
    }
    if (rc != CUDA_SUCCESS) {
        gs_unlock(GS_LOCK_BIRTHS);
        gs_lease_give(d, b->reserved);
        return rc;
    }
    uint64_t footprint = b->reserved, free_after;
    /* Free memory is the whole device's: another process freeing during
     * the creation makes the difference read low, so a measurement only
     * ever raises the count (one allocating makes it read high: the count
     * errs on the safe side). */
    if (b->measurable && free_on(dev, &free_after) && free_after <= b->free_before &&
        b->free_before - free_after <= MAX_PLAUSIBLE_FOOTPRINT && b->free_before - free_after > footprint) {
        footprint = b->free_before - free_after;
        measured[d->slot] = footprint;
    }
    gs_unlock(GS_LOCK_BIRTHS);
    if (footprint < b->reserved) {
        gs_lease_give(d, b->reserved - footprint);
    } else if (footprint > b->reserved && gs_reserve(d, footprint - b->reserved, primary ? "cuDevicePrimaryCtxRetain (the context's own memory)"
                                                                       : "cuCtxCreate (the context's own memory)",
                                  footprint) != CUDA_SUCCESS) {
        /* The context is larger than its reservation and the cap cannot
         * take the difference: undo the creation. */
        gs_lease_give(d, b->reserved);
        CUresult undo = primary ? GS_REAL(cuDevicePrimaryCtxRelease_v2)(dev) : GS_REAL(cuCtxDestroy_v2)(ctx);
        if (undo != CUDA_SUCCESS)
            gs_log(GS_LOG_WARN, "cannot undo a context over the memory cap: %d", (int)undo);
        gs_launch_context_changed();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!gs_mem_track(GS_K_CTX, (uint64_t)(uintptr_t)ctx, d, footprint, ctx))
        gs_log(GS_LOG_ERROR, "out of memory for the allocation table: a context's %llu bytes stay counted",
               (unsigned long long)footprint);
    return rc;
}

void gs_ctxmem_primary_died(CUdevice dev)
{
    gs_lock(GS_LOCK_BIRTHS);
    struct primary *p = primary_of(dev, false);
    CUcontext ctx = p ? p->ctx : NULL;
    if (p)
        p->known = false;
    gs_unlock(GS_LOCK_BIRTHS);
    if (ctx)
        gs_mem_context_died(ctx);
}

/* ---- created contexts ---------------------------------------------------- */

#define CTX_CREATE(name, params, call, dev_arg)                              \
    GS_EXPORT CUresult name params                                           \
    {                                                                        \
        GS_PROLOGUE(name);                                                   \
        struct birth birth;                                                  \
        if (!pctx)                                                           \
            return GS_REAL(name) call;                                       \
        CUresult rc_ = before(dev_arg, false, &birth);                       \
        if (rc_ != CUDA_SUCCESS)                                             \
            return rc_;                                                      \
        rc_ = GS_REAL(name) call;                                            \
        rc_ = after(&birth, rc_, rc_ == CUDA_SUCCESS ? *pctx : NULL, false, dev_arg); \
        gs_launch_context_changed();                                         \
        return rc_;                                                          \
    }

CTX_CREATE(cuCtxCreate, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v3,
           (CUcontext *pctx, CUexecAffinityParam *params, int nparams, unsigned int flags, CUdevice dev),
           (pctx, params, nparams, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v4, (CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev),
           (pctx, params, flags, dev), dev)

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    GS_PROLOGUE(cuDevicePrimaryCtxRetain);
    struct birth birth;
    CUresult rc = pctx ? before(dev, true, &birth) : CUDA_SUCCESS;
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = GS_REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (pctx)
        rc = after(&birth, rc, rc == CUDA_SUCCESS ? *pctx : NULL, true, dev);
    if (rc == CUDA_SUCCESS && pctx && *pctx)
        gs_ctx_retained(*pctx, dev);
    return rc;
}

void gs_ctxmem_after_fork_child(void)
{
    /* The child has no contexts; what was measured still holds. */
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        primaries[i].known = false;
}
