/*
 * The ledger of stream-ordered pools (see gs_pools.h). What each pool
 * holds on the device is counted, used or not: a pool keeps freed memory
 * up to its release threshold (PyTorch's cudaMallocAsync backend sets it
 * to UINT64_MAX), so counting allocations would miss what the pool holds
 * after cuMemFreeAsync. Per pool the shim counts the driver's
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, read again on cuMemPoolTrimTo,
 * cuMemPoolSetAttribute and cuMemGetInfo (gs_mempools.c, gs_memory.c) and
 * by the gate thread every tick after a free.
 *
 * Owns `pools` (guarded by the pools lock, which comes before the gate
 * lock: gs_locks.h; the gate thread only ever tries it) and `pools_dirty`.
 */
#include "gs_pools.h"
#include "gs_conn.h"
#include "gs_lease.h"
#include "gs_locks.h"

#include <stdatomic.h>

#define MAX_POOLS 256

static struct gs_pool pools[MAX_POOLS];
static _Atomic int pools_dirty; /* a free was queued since the last settle */

static struct gs_pool *lookup(CUmemoryPool handle)
{
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i].handle == handle)
            return &pools[i];
    return NULL;
}

uint64_t gs_pool_reserved(CUmemoryPool handle, uint64_t fallback)
{
    cuuint64_t value;
    if (!GS_REAL(cuMemPoolGetAttribute) ||
        GS_REAL(cuMemPoolGetAttribute)(handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) != CUDA_SUCCESS)
        return fallback;
    return value;
}

struct gs_pool *gs_pool_find_locked(CUmemoryPool handle, struct gs_dev *d)
{
    struct gs_pool *p = lookup(handle);
    if (!p && d && (p = lookup(NULL))) {
        p->handle = handle;
        p->dev = d;
        p->counted = gs_pool_reserved(handle, 0);
        if (p->counted) /* memory it held before the shim saw it */
            gs_lease_take_anyway(d, p->counted);
    }
    return p;
}

void gs_pool_settle_locked(struct gs_pool *p, uint64_t reserved)
{
    if (reserved > p->counted)
        gs_lease_take_anyway(p->dev, reserved - p->counted);
    else if (reserved < p->counted)
        gs_lease_give(p->dev, p->counted - reserved);
    p->counted = reserved;
}

void gs_pool_forget_locked(CUmemoryPool handle, uint64_t used)
{
    struct gs_pool *p = lookup(handle);
    if (!p)
        return;
    if (p->counted > used)
        gs_lease_give(p->dev, p->counted - used);
    p->handle = NULL;
    p->counted = 0;
}

void gs_pools_settle(bool blocking)
{
    if (blocking)
        gs_lock(GS_LOCK_POOLS);
    else if (!gs_trylock(GS_LOCK_POOLS))
        return;
    atomic_store(&pools_dirty, 0);
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i].handle)
            gs_pool_settle_locked(&pools[i], gs_pool_reserved(pools[i].handle, pools[i].counted));
    gs_unlock(GS_LOCK_POOLS);
}

void gs_pools_touched(void)
{
    if (atomic_exchange(&pools_dirty, 1) == 0)
        gs_conn_wake_gate_thread(); /* it ticks and reads them */
}

bool gs_pools_pending(void)
{
    return atomic_load(&pools_dirty) != 0;
}

void gs_pools_after_fork_child(void)
{
    /* The child holds none of the parent's pools. */
    for (int i = 0; i < MAX_POOLS; i++)
        pools[i] = (struct gs_pool){0};
    atomic_store(&pools_dirty, 0);
}
