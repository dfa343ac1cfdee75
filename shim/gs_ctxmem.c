/*
 * The device memory a context holds itself: hundreds of MiB on a real GPU
 * (its stacks, printf buffer, module images), counted against the cap
 * like an allocation, from its creation to its death (gs_contexts.c
 * reports deaths; gs_mem_context_died gives back the footprint with the
 * context's allocations).
 *
 * Before a context is created its footprint is reserved: the last one
 * measured on the device in this process, else GPUSLICE_CONTEXT_BYTES
 * (bytes, K/M/G suffixes; 300 MiB by default). If the calling thread has a
 * context of the same device current, free memory is read before and after
 * the creation, and a difference larger than the reservation is what is
 * counted (and remembered for the next context); otherwise the estimate
 * stays. Free memory is the whole device's, so only a larger difference
 * can be trusted not to undercount: another process freeing meanwhile
 * makes it read low. A measured footprint
 * larger than the reservation that the cap cannot take makes the creation
 * fail with CUDA_ERROR_OUT_OF_MEMORY (the context is destroyed again).
 *
 * This file owns `measured` and `primaries`, guarded by birth_lock,
 * which is held across a creation (context creations in a process are
 * serialised: two first retains of a primary context count it once).
 */
#include "gs_contexts.h"
#include "gs_hooks.h"
#include "gs_log.h"
#include "gs_memory.h"
#include "gs_settings.h"

#include <stdlib.h>

#define DEFAULT_CONTEXT_BYTES (300ull << 20)
#define MAX_PLAUSIBLE_FOOTPRINT (16ull << 30)

static pthread_mutex_t birth_lock = PTHREAD_MUTEX_INITIALIZER;
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

static uint64_t estimate(void)
{
    const char *v = gs_getenv("GPUSLICE_CONTEXT_BYTES");
    if (!v || !*v)
        return DEFAULT_CONTEXT_BYTES;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (end == v || (shift && end[1]) || (!shift && *end) || n > (UINT64_MAX >> shift)) {
        gs_log(GS_LOG_WARN, "GPUSLICE_CONTEXT_BYTES=%s is not a byte count; using %llu", v,
               (unsigned long long)DEFAULT_CONTEXT_BYTES);
        return DEFAULT_CONTEXT_BYTES;
    }
    return (uint64_t)n << shift;
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

CUresult gs_ctxmem_before(CUdevice dev, bool primary, struct gs_ctx_birth *b)
{
    *b = (struct gs_ctx_birth){0};
    pthread_mutex_lock(&birth_lock);
    unsigned flags;
    int active = 0;
    struct gs_dev *d;
    if (primary && GS_REAL(cuDevicePrimaryCtxGetState) &&
        GS_REAL(cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS && active)
        return CUDA_SUCCESS; /* nothing new to count */
    b->measurable = free_on(dev, &b->free_before);
    uint64_t guess = estimate();
    /* Nothing to count and nothing to measure: leave the device alone (the
     * gate learns of it at its first launch, as without a footprint). */
    if ((!guess && !b->measurable) || gs_gate_device_by_ordinal(dev, &d) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    b->dev = d;
    b->reserved = measured[d->slot] ? measured[d->slot] : guess;
    CUresult rc = gs_lease_take(d, b->reserved);
    if (rc != CUDA_SUCCESS) {
        pthread_mutex_unlock(&birth_lock);
        return rc;
    }
    b->counted = true;
    return CUDA_SUCCESS;
}

CUresult gs_ctxmem_after(struct gs_ctx_birth *b, CUresult rc, CUcontext ctx, bool primary, CUdevice dev)
{
    struct gs_dev *d = b->dev;
    struct primary *p = rc == CUDA_SUCCESS && primary ? primary_of(dev, true) : NULL;
    if (p)
        *p = (struct primary){true, dev, ctx};
    if (!b->counted) {
        pthread_mutex_unlock(&birth_lock);
        return rc;
    }
    if (rc != CUDA_SUCCESS) {
        gs_lease_give(d, b->reserved);
        pthread_mutex_unlock(&birth_lock);
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
    if (footprint < b->reserved) {
        gs_lease_give(d, b->reserved - footprint);
    } else if (footprint > b->reserved && gs_lease_take(d, footprint - b->reserved) != CUDA_SUCCESS) {
        /* The context is larger than its reservation and the cap cannot
         * take the difference: undo the creation. */
        gs_lease_give(d, b->reserved);
        pthread_mutex_unlock(&birth_lock);
        CUresult undo = primary ? GS_REAL(cuDevicePrimaryCtxRelease_v2)(dev) : GS_REAL(cuCtxDestroy_v2)(ctx);
        if (undo != CUDA_SUCCESS)
            gs_log(GS_LOG_WARN, "cannot undo a context over the memory cap: %d", (int)undo);
        gs_hook_context_changed();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!gs_mem_track(GS_K_CTX, (uint64_t)(uintptr_t)ctx, d, footprint, ctx))
        gs_log(GS_LOG_ERROR, "out of memory for the allocation table: a context's %llu bytes stay counted",
               (unsigned long long)footprint);
    pthread_mutex_unlock(&birth_lock);
    return rc;
}

void gs_ctxmem_primary_died(CUdevice dev)
{
    pthread_mutex_lock(&birth_lock);
    struct primary *p = primary_of(dev, false);
    CUcontext ctx = p ? p->ctx : NULL;
    if (p)
        p->known = false;
    pthread_mutex_unlock(&birth_lock);
    if (ctx)
        gs_mem_context_died(ctx);
}

/* ---- created contexts ---------------------------------------------------- */

#define CTX_CREATE(name, params, call, dev_arg)                              \
    GS_EXPORT CUresult name params                                           \
    {                                                                        \
        GS_PROLOGUE(name);                                                   \
        struct gs_ctx_birth birth;                                           \
        if (!pctx)                                                           \
            return GS_REAL(name) call;                                       \
        CUresult rc_ = gs_ctxmem_before(dev_arg, false, &birth);             \
        if (rc_ != CUDA_SUCCESS)                                             \
            return rc_;                                                      \
        rc_ = GS_REAL(name) call;                                            \
        rc_ = gs_ctxmem_after(&birth, rc_, rc_ == CUDA_SUCCESS ? *pctx : NULL, false, dev_arg); \
        gs_hook_context_changed();                                           \
        return rc_;                                                          \
    }

CTX_CREATE(cuCtxCreate, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v3,
           (CUcontext *pctx, CUexecAffinityParam *params, int nparams, unsigned int flags, CUdevice dev),
           (pctx, params, nparams, flags, dev), dev)
CTX_CREATE(cuCtxCreate_v4, (CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev),
           (pctx, params, flags, dev), dev)

void gs_ctxmem_after_fork_child(void)
{
    /* The child has no contexts; what was measured still holds. */
    pthread_mutex_init(&birth_lock, NULL);
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        primaries[i].known = false;
}
