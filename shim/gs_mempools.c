/*
 * Stream-ordered allocations and the pool calls (see gs_mempools.h; the
 * pools' ledger is gs_pools.c). Before an allocation from a pool the shim
 * reserves the allocation's size rounded up to POOL_GRANULE (the most the
 * pool can grow by for it), so a pool that would grow past the cap fails
 * with CUDA_ERROR_OUT_OF_MEMORY before the driver takes the memory; after
 * it, the count is settled to what the pool reserves. The reservation may
 * ask the server: it is made before the pools lock is taken.
 *
 * A pool destroyed with allocations left stays counted at what it used
 * then (the driver frees it later, when those are freed; it can no longer
 * be asked): the count errs high, never low.
 *
 * Owns nothing: the pools are gs_pools.c's.
 */
#include "gs_mempools.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_pools.h"
#include "gs_reserve.h"

#define POOL_GRANULE (2ull << 20)

CUresult gs_pool_alloc(const char *what, struct gs_dev *d, CUmemoryPool handle, uint64_t bytes, CUresult (*real)(void *), void *args,
                       bool *by_size)
{
    *by_size = false;
    if (!handle && (!GS_REAL(cuDeviceGetMemPool) || GS_REAL(cuDeviceGetMemPool)(&handle, d->ordinal) != CUDA_SUCCESS))
        return real(args); /* the driver answers; there is no pool to count */
    gs_lock(GS_LOCK_POOLS);
    bool followed = gs_pool_find_locked(handle, d) != NULL;
    gs_unlock(GS_LOCK_POOLS);
    if (!followed) {
        /* No room to follow another pool: count this allocation by its
         * size, given back by its free. */
        CUresult rc = gs_reserve(d, bytes, what, bytes);
        if (rc == CUDA_SUCCESS && (rc = real(args)) != CUDA_SUCCESS)
            gs_lease_give(d, bytes);
        *by_size = rc == CUDA_SUCCESS;
        return rc;
    }
    uint64_t reserve = bytes > UINT64_MAX - POOL_GRANULE ? bytes : (bytes + POOL_GRANULE - 1) & ~(POOL_GRANULE - 1);
    CUresult rc = gs_reserve(d, reserve, what, bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    gs_lock(GS_LOCK_POOLS);
    struct gs_pool *p = gs_pool_find_locked(handle, NULL);
    if (!p) {
        /* destroyed meanwhile by another thread: the driver answers */
        gs_unlock(GS_LOCK_POOLS);
        gs_lease_give(d, reserve);
        return real(args);
    }
    rc = real(args);
    /* Settle: the pool's growth stays counted out of the reservation. */
    uint64_t reserved = gs_pool_reserved(handle, p->counted + (rc == CUDA_SUCCESS ? bytes : 0));
    uint64_t growth = reserved > p->counted ? reserved - p->counted : 0;
    uint64_t shrink = reserved < p->counted ? p->counted - reserved : 0;
    if (growth <= reserve)
        gs_lease_give(p->dev, reserve - growth + shrink);
    else
        gs_lease_take_anyway(p->dev, growth - reserve);
    p->counted = reserved;
    gs_unlock(GS_LOCK_POOLS);
    return rc;
}

GS_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    GS_PROLOGUE(cuMemPoolTrimTo);
    CUresult rc = GS_REAL(cuMemPoolTrimTo)(pool, keep);
    gs_pools_settle(true);
    return rc;
}

GS_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    GS_PROLOGUE(cuMemPoolSetAttribute);
    CUresult rc = GS_REAL(cuMemPoolSetAttribute)(pool, attr, value);
    gs_pools_settle(true);
    return rc;
}

GS_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool handle)
{
    GS_PROLOGUE(cuMemPoolDestroy);
    gs_lock(GS_LOCK_POOLS);
    struct gs_pool *p = gs_pool_find_locked(handle, NULL);
    cuuint64_t used = 0;
    if (p && (!GS_REAL(cuMemPoolGetAttribute) ||
              GS_REAL(cuMemPoolGetAttribute)(handle, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS))
        used = p->counted;
    CUresult rc = GS_REAL(cuMemPoolDestroy)(handle);
    if (p && rc == CUDA_SUCCESS)
        gs_pool_forget_locked(handle, used); /* what it still uses stays counted for good */
    gs_unlock(GS_LOCK_POOLS);
    return rc;
}
