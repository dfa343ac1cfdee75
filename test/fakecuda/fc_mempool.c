/*
 * fakecuda stream-ordered memory pools: the default and the current pool of
 * each device, created pools, and what a pool holds on the device.
 *
 * A pool reserves device memory when an allocation does not fit in what it
 * already holds, and keeps memory freed into it up to its release
 * threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0 by default): a free that
 * leaves it holding more than max(used, threshold) gives the excess back to
 * the device. cuMemPoolTrimTo gives back all but max(used, minBytesToKeep).
 * The reserved bytes are what the state file counts for the process
 * (fc_mem_account). A pool's free bytes are one bag (no fragmentation).
 *
 * Owns every pool's counters (guarded by pool_lock) and the table of pool
 * allocations whose stream-ordered free is queued (freeing, same lock).
 */
#include "fc_internal.h"

#include <stdlib.h>
#include <string.h>

struct fc_pool {
    uint64_t handle;
    int device;
    uint64_t reserved, used, reserved_high, used_high, threshold;
    bool destroyed;          /* destroyed with allocations left: freed with the last */
};

/* All pool state; guarded by pool_lock. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_pool *default_pools[FC_MAX_DEVICES];
static struct fc_pool *current_pools[FC_MAX_DEVICES];
static struct freeing { uint64_t base; struct fc_pool *pool; } *freeing;
static size_t nfreeing, freeing_cap;

static struct fc_pool *pool_new(int device)
{
    struct fc_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return NULL;
    pool->device = device;
    pool->handle = fc_handle_new(FC_H_MEMPOOL, pool);
    if (!pool->handle) {
        free(pool);
        return NULL;
    }
    return pool;
}

/* Gives back what the pool holds beyond max(used, keep). */
static void trim_locked(struct fc_pool *pool, uint64_t keep)
{
    if (keep < pool->used)
        keep = pool->used;
    if (pool->reserved > keep) {
        fc_mem_unaccount(pool->device, pool->reserved - keep);
        pool->reserved = keep;
    }
}

static struct fc_pool *default_pool_locked(int dev)
{
    if (!default_pools[dev])
        default_pools[dev] = pool_new(dev);
    return default_pools[dev];
}

struct fc_pool *fc_pool_of(const char *call, CUmemoryPool hpool, int device, CUresult *rc)
{
    struct fc_pool *pool;
    *rc = CUDA_SUCCESS;
    if (hpool) {
        pool = fc_handle_use(call, FC_H_MEMPOOL, (uint64_t)(uintptr_t)hpool);
        if (!pool)
            *rc = CUDA_ERROR_INVALID_VALUE;
        return pool;
    }
    pthread_mutex_lock(&pool_lock);
    pool = current_pools[device] ? current_pools[device] : default_pool_locked(device);
    pthread_mutex_unlock(&pool_lock);
    if (!pool)
        *rc = CUDA_ERROR_OUT_OF_MEMORY;
    return pool;
}

int fc_pool_device(const struct fc_pool *pool) { return pool->device; }

CUresult fc_pool_take(struct fc_pool *pool, uint64_t bytes)
{
    pthread_mutex_lock(&pool_lock);
    uint64_t spare = pool->reserved - pool->used;
    uint64_t growth = bytes > spare ? bytes - spare : 0;
    CUresult rc = growth ? fc_mem_account(pool->device, growth) : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {
        pool->reserved += growth;
        pool->used += bytes;
        if (pool->reserved > pool->reserved_high)
            pool->reserved_high = pool->reserved;
        if (pool->used > pool->used_high)
            pool->used_high = pool->used;
    }
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

void fc_pool_give(struct fc_pool *pool, uint64_t bytes)
{
    pthread_mutex_lock(&pool_lock);
    pool->used -= bytes > pool->used ? pool->used : bytes;
    trim_locked(pool, pool->destroyed ? 0 : pool->threshold);
    bool gone = pool->destroyed && pool->used == 0;
    pthread_mutex_unlock(&pool_lock);
    if (gone)
        free(pool);
}

bool fc_pool_note_freeing(uint64_t base, struct fc_pool *pool)
{
    pthread_mutex_lock(&pool_lock);
    bool ok = true;
    if (nfreeing == freeing_cap) {
        size_t cap = freeing_cap ? freeing_cap * 2 : 64;
        struct freeing *grown = realloc(freeing, cap * sizeof *grown);
        if (grown) {
            freeing = grown;
            freeing_cap = cap;
        } else {
            ok = false;
        }
    }
    if (ok)
        freeing[nfreeing++] = (struct freeing){base, pool};
    pthread_mutex_unlock(&pool_lock);
    return ok;
}

struct fc_pool *fc_pool_take_freeing(uint64_t base)
{
    struct fc_pool *pool = NULL;
    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < nfreeing; i++)
        if (freeing[i].base == base) {
            pool = freeing[i].pool;
            freeing[i] = freeing[--nfreeing];
            break;
        }
    pthread_mutex_unlock(&pool_lock);
    return pool;
}

void fc_pool_atfork_child(void)
{
    /* The parent's pools are the parent's. */
    memset(default_pools, 0, sizeof default_pools);
    memset(current_pools, 0, sizeof current_pools);
    nfreeing = 0;
    pthread_mutex_init(&pool_lock, NULL);
}

/* ---- entry points ------------------------------------------------------ */

FC_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dev < 0 || (uint32_t)dev >= fc_shared_state()->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct fc_pool *pool = default_pool_locked(dev);
    pthread_mutex_unlock(&pool_lock);
    if (!pool)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)(uintptr_t)pool->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dev < 0 || (uint32_t)dev >= fc_shared_state()->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    struct fc_pool *pool = current_pools[dev] ? current_pools[dev] : default_pool_locked(dev);
    pthread_mutex_unlock(&pool_lock);
    if (!pool)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)(uintptr_t)pool->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool hpool)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dev < 0 || (uint32_t)dev >= fc_shared_state()->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    struct fc_pool *pool = fc_handle_use(__func__, FC_H_MEMPOOL, (uint64_t)(uintptr_t)hpool);
    if (!pool || pool->device != dev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    current_pools[dev] = pool;
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolCreate(CUmemoryPool *pool_out, const CUmemPoolProps *props)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool_out || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.id < 0 || (uint32_t)props->location.id >= fc_shared_state()->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    struct fc_pool *pool = pool_new(props->location.id);
    if (!pool)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)(uintptr_t)pool->handle;
    return CUDA_SUCCESS;
}

/* "cuMemPoolDestroy": a pool with allocations left is released once they
 * are freed; the memory it holds unused goes back now. */
FC_API CUresult cuMemPoolDestroy(CUmemoryPool hpool)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_pool *pool = fc_handle_use(__func__, FC_H_MEMPOOL, (uint64_t)(uintptr_t)hpool);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    bool is_default = default_pools[pool->device] == pool;
    bool gone = false;
    if (!is_default) {
        if (current_pools[pool->device] == pool)
            current_pools[pool->device] = NULL;
        fc_handle_free(FC_H_MEMPOOL, pool->handle);
        pool->destroyed = true;
        trim_locked(pool, 0);
        gone = pool->used == 0;
    }
    pthread_mutex_unlock(&pool_lock);
    if (is_default)
        return CUDA_ERROR_INVALID_VALUE;
    if (gone)
        free(pool);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolTrimTo(CUmemoryPool hpool, size_t keep)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_pool *pool = fc_handle_use(__func__, FC_H_MEMPOOL, (uint64_t)(uintptr_t)hpool);
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    trim_locked(pool, keep);
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemPoolSetAttribute(CUmemoryPool hpool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_pool *pool = fc_handle_use(__func__, FC_H_MEMPOOL, (uint64_t)(uintptr_t)hpool);
    if (!pool || !value)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_SUCCESS;
    pthread_mutex_lock(&pool_lock);
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: /* only 0 resets them */
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            pool->reserved_high = pool->reserved;
        else
            pool->used_high = pool->used;
        break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        break; /* reuse policies: accepted, nothing to simulate */
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
    pthread_mutex_unlock(&pool_lock);
    return rc;
}

FC_API CUresult cuMemPoolGetAttribute(CUmemoryPool hpool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_pool *pool = fc_handle_use(__func__, FC_H_MEMPOOL, (uint64_t)(uintptr_t)hpool);
    if (!pool || !value)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_SUCCESS;
    pthread_mutex_lock(&pool_lock);
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = pool->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = pool->used_high; break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = 1;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
    pthread_mutex_unlock(&pool_lock);
    return rc;
}
