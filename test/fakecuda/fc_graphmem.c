/*
 * fakecuda graph memory: what allocation nodes hold on the device.
 *
 * cuMemAllocAsync into a capturing stream makes an allocation node
 * (FC_WORK_MEMALLOC): its address is handed out at once, but no device
 * memory is taken until an executable graph holding the node is first
 * launched ("Graph memory nodes", CUDA Programming Guide: the memory is
 * allocated when the graph is launched and owned by the graph). Then the
 * device's graph memory pool grows by what the executable graph lacks, and
 * the graph keeps its memory while it exists. Memory of destroyed
 * executable graphs stays reserved in the pool, for reuse, until
 * cuDeviceGraphMemTrim ("Free unused memory that was cached on the
 * specified device for use with graphs back to the OS").
 * cuDeviceGetGraphMemAttribute reports USED_MEM_CURRENT (memory of live
 * executable graphs), RESERVED_MEM_CURRENT (what the pool holds: what the
 * meter counts) and their high-water marks, which
 * cuDeviceSetGraphMemAttribute resets (with 0).
 *
 * Owns the per-device counters, guarded by graphmem_lock.
 */
#include "fc_internal.h"

#include <string.h>

struct graph_pool {
    uint64_t reserved, used, reserved_high, used_high;
};

static pthread_mutex_t graphmem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct graph_pool pools[FC_MAX_DEVICES];

CUresult fc_graphmem_back(int device, uint64_t bytes)
{
    pthread_mutex_lock(&graphmem_lock);
    struct graph_pool *p = &pools[device];
    uint64_t spare = p->reserved - p->used, growth = bytes > spare ? bytes - spare : 0;
    CUresult rc = growth ? fc_mem_account(device, growth) : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {
        p->reserved += growth;
        p->used += bytes;
        if (p->reserved > p->reserved_high)
            p->reserved_high = p->reserved;
        if (p->used > p->used_high)
            p->used_high = p->used;
    }
    pthread_mutex_unlock(&graphmem_lock);
    return rc;
}

void fc_graphmem_unback(int device, uint64_t bytes)
{
    pthread_mutex_lock(&graphmem_lock);
    pools[device].used -= bytes > pools[device].used ? pools[device].used : bytes;
    pthread_mutex_unlock(&graphmem_lock);
}

void fc_graphmem_atfork_child(void)
{
    /* The parent's graphs are the parent's. */
    memset(pools, 0, sizeof pools);
    pthread_mutex_init(&graphmem_lock, NULL);
}

FC_API CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&graphmem_lock);
    struct graph_pool *p = &pools[dev];
    if (p->reserved > p->used) {
        fc_mem_unaccount(dev, p->reserved - p->used);
        p->reserved = p->used;
    }
    pthread_mutex_unlock(&graphmem_lock);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graphmem_lock);
    const struct graph_pool *p = &pools[dev];
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = p->reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = p->reserved_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    pthread_mutex_unlock(&graphmem_lock);
    return rc;
}

FC_API CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
    CUresult rc = fc_check_device(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!value || *(cuuint64_t *)value != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graphmem_lock);
    struct graph_pool *p = &pools[dev];
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        p->used_high = p->used;
    else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        p->reserved_high = p->reserved;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&graphmem_lock);
    return rc;
}
