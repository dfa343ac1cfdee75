/*
 * Stream-ordered pools: what each holds on the device is counted, used or
 * not. A pool keeps freed memory up to its release threshold (PyTorch's
 * cudaMallocAsync backend sets it to UINT64_MAX), so counting allocations
 * would miss what the pool holds after cuMemFreeAsync.
 *
 * Per pool the shim counts the driver's CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT.
 * Before an allocation from a pool it reserves the allocation's size
 * rounded up to POOL_GRANULE (the most the pool can grow by for it), so a
 * pool that would grow past the cap fails with CUDA_ERROR_OUT_OF_MEMORY
 * before the driver takes the memory; after it, the count is settled to
 * what the pool reserves. The pool gives memory back at moments only the
 * driver knows (a synchronization, a trim), so pools are read again: on
 * cuMemPoolTrimTo, cuMemPoolSetAttribute and cuMemGetInfo, and by the gate
 * thread every tick after a free (gs_memory_tick).
 *
 * A pool destroyed with allocations left stays counted at what it used
 * then (the driver frees it later, when those are freed; it can no longer
 * be asked): the count errs high, never low.
 *
 * This file owns `pools` (guarded by pools_lock, which may be held while
 * waiting for the server; the gate thread only ever tries it) and
 * `pools_dirty`.
 */
#include "gs_glibc_compat.h"
#include "gs_hooks.h"
#include "gs_log.h"
#include "gs_memory.h"

#include <stdatomic.h>

#define MAX_POOLS 256
#define POOL_GRANULE (2ull << 20)

struct pool {
    CUmemoryPool handle;     /* NULL: free entry */
    struct gs_dev *dev;
    uint64_t counted;        /* its reserved bytes, as last read */
};

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool pools[MAX_POOLS];
static _Atomic int pools_dirty; /* a free was queued since the last settle */

static struct pool *find_locked(CUmemoryPool handle)
{
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i].handle == handle)
            return &pools[i];
    return NULL;
}

static uint64_t reserved_of(CUmemoryPool handle, uint64_t fallback)
{
    cuuint64_t value;
    if (!GS_REAL(cuMemPoolGetAttribute) || GS_REAL(cuMemPoolGetAttribute)(handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) != CUDA_SUCCESS)
        return fallback;
    return value;
}

/* Counts what p reserves now: more taken anyway (the driver has it), less
 * given back. pools_lock held. */
static void settle_locked(struct pool *p, uint64_t reserved)
{
    if (reserved > p->counted)
        gs_lease_take_anyway(p->dev, reserved - p->counted);
    else if (reserved < p->counted)
        gs_lease_give(p->dev, p->counted - reserved);
    p->counted = reserved;
}

CUresult gs_pool_alloc(struct gs_dev *d, CUmemoryPool handle, uint64_t bytes, CUdeviceptr *dptr,
                       CUresult (*real)(void *), void *args)
{
    if (!handle && (!GS_REAL(cuDeviceGetMemPool) || GS_REAL(cuDeviceGetMemPool)(&handle, d->ordinal) != CUDA_SUCCESS))
        return real(args); /* the driver answers; there is no pool to count */
    uint64_t reserve = bytes > UINT64_MAX - POOL_GRANULE ? bytes : (bytes + POOL_GRANULE - 1) & ~(POOL_GRANULE - 1);
    pthread_mutex_lock(&pools_lock);
    struct pool *p = find_locked(handle);
    if (!p && (p = find_locked(NULL))) {
        p->handle = handle;
        p->dev = d;
        p->counted = reserved_of(handle, 0);
        if (p->counted) /* memory it held before the shim saw it */
            gs_lease_take_anyway(d, p->counted);
    }
    if (!p) {
        /* No room to follow another pool: count this allocation by its
         * size, given back by its free (gs_memory.c). */
        pthread_mutex_unlock(&pools_lock);
        CUresult rc = gs_lease_take(d, bytes);
        if (rc == CUDA_SUCCESS && (rc = real(args)) != CUDA_SUCCESS)
            gs_lease_give(d, bytes);
        if (rc == CUDA_SUCCESS && !gs_mem_track(GS_K_PTR, *dptr, d, bytes, NULL))
            gs_log(GS_LOG_ERROR, "out of memory for the allocation table: %llu bytes stay counted",
                   (unsigned long long)bytes);
        return rc;
    }
    CUresult rc = gs_lease_take(p->dev, reserve);
    if (rc == CUDA_SUCCESS) {
        rc = real(args);
        /* Settle: the pool's growth stays counted out of the reservation. */
        uint64_t reserved = reserved_of(handle, p->counted + (rc == CUDA_SUCCESS ? bytes : 0));
        uint64_t growth = reserved > p->counted ? reserved - p->counted : 0;
        uint64_t shrink = reserved < p->counted ? p->counted - reserved : 0;
        if (growth <= reserve)
            gs_lease_give(p->dev, reserve - growth + shrink);
        else
            gs_lease_take_anyway(p->dev, growth - reserve);
        p->counted = reserved;
    }
    pthread_mutex_unlock(&pools_lock);
    return rc;
}

void gs_pools_settle(bool blocking)
{
    if (blocking)
        pthread_mutex_lock(&pools_lock);
    else if (pthread_mutex_trylock(&pools_lock) != 0)
        return;
    atomic_store(&pools_dirty, 0);
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i].handle)
            settle_locked(&pools[i], reserved_of(pools[i].handle, pools[i].counted));
    pthread_mutex_unlock(&pools_lock);
}

void gs_pools_touched(void)
{
    if (atomic_exchange(&pools_dirty, 1) == 0)
        gs_client_wake(); /* the gate thread ticks and reads them */
}

bool gs_pools_pending(void)
{
    return atomic_load(&pools_dirty) != 0;
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
    pthread_mutex_lock(&pools_lock);
    struct pool *p = find_locked(handle);
    cuuint64_t used = 0;
    if (p && (!GS_REAL(cuMemPoolGetAttribute) ||
              GS_REAL(cuMemPoolGetAttribute)(handle, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS))
        used = p->counted;
    CUresult rc = GS_REAL(cuMemPoolDestroy)(handle);
    if (p && rc == CUDA_SUCCESS) {
        /* What it still uses stays counted for good (see the top). */
        if (p->counted > used)
            gs_lease_give(p->dev, p->counted - used);
        p->handle = NULL;
        p->counted = 0;
    }
    pthread_mutex_unlock(&pools_lock);
    return rc;
}

void gs_pools_after_fork_child(void)
{
    /* The child holds none of the parent's pools. */
    pthread_mutex_init(&pools_lock, NULL);
    for (int i = 0; i < MAX_POOLS; i++)
        pools[i] = (struct pool){0};
    atomic_store(&pools_dirty, 0);
}
