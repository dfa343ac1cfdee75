/*
 * fakecuda device memory: allocation on every path a real driver offers
 * (plain, pitched, managed, stream-ordered, pools, VMM, arrays) and the
 * cross-process accounting in the state file. Copies and sets are in
 * fc_copy.c. The allocations and frees that are not stream-ordered are
 * "potentially unsafe" during a stream capture (fc_capture.c);
 * cuMemAllocAsync into a capturing stream allocates at once, and
 * cuMemFreeAsync into one frees when the capture ends.
 *
 * Simulated device memory is host address space: each allocation is an
 * mmap(MAP_NORESERVE) region, so device pointers are real addresses that
 * copies can use, and untouched bytes cost nothing. Byte counts are exact
 * (no page rounding) so that tests can reason about limits to the byte.
 */
#include "fc_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum alloc_kind { ALLOC_DEVICE, ALLOC_RESERVE, ALLOC_GRAPH };

struct fc_alloc {
    uint64_t base, size;
    int device;
    enum alloc_kind kind;
    struct fc_ctx *ctx;
    struct fc_pool *pool;    /* stream-ordered: the pool it came from */
};

struct fc_counted {          /* an array, mipmapped array or VMM handle */
    uint64_t handle;
    int device;
    uint64_t bytes;
    unsigned maps;           /* VMM: live mappings of it (guarded by mem_lock) */
    bool released;           /* VMM: cuMemRelease'd; freed at the last unmap */
};

/* VMM mappings: which handle backs [base, base+size); guarded by mem_lock. */
static struct fc_mapping { uint64_t base, size; struct fc_counted *handle; } *mappings;
static size_t nmappings, mappings_cap;

/* This process's live device allocations, sorted by base; guarded by
 * mem_lock. */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_alloc *allocs;
static size_t alloc_count, alloc_cap;

#define FC_VMM_GRANULARITY (2ull << 20)

/* ---- accounting in the shared state ------------------------------------ */

CUresult fc_mem_account(int device, uint64_t bytes)
{
    struct fc_shared *s = fc_shared_state();
    int slot = fc_self_slot();
    struct fc_device_state *d = &s->dev[device];
    fc_state_lock(s);
    if (d->total_mem - d->used_mem < bytes)
        fc_state_reap_locked(s); /* a dead process's memory may be reclaimable */
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (d->total_mem - d->used_mem >= bytes) {
        d->used_mem += bytes;
        struct fc_proc_slot *p = &s->procs[slot];
        p->mem_used[device] += bytes;
        if (p->mem_used[device] > p->mem_peak[device])
            p->mem_peak[device] = p->mem_used[device];
        rc = CUDA_SUCCESS;
    }
    fc_state_unlock(s);
    return rc;
}

void fc_mem_unaccount(int device, uint64_t bytes)
{
    struct fc_shared *s = fc_shared_state();
    struct fc_proc_slot *p = &s->procs[fc_self_slot()];
    fc_state_lock(s);
    s->dev[device].used_mem -= bytes > s->dev[device].used_mem ? s->dev[device].used_mem : bytes;
    p->mem_used[device] -= bytes > p->mem_used[device] ? p->mem_used[device] : bytes;
    fc_state_unlock(s);
}

/* "The CUDA context ... uses device memory of its own" (the figure is the
 * driver's business): FAKECUDA_CONTEXT_BYTES, 300M by default. Read at
 * each context creation; nothing kept. */
uint64_t fc_mem_context_bytes(void)
{
    const char *v = getenv("FAKECUDA_CONTEXT_BYTES");
    uint64_t bytes = 300ull << 20;
    if (v && *v && !fc_parse_bytes(v, &bytes))
        bytes = 300ull << 20;
    return bytes;
}

/* ---- the allocation table --------------------------------------------- */

static size_t alloc_lower_bound(uint64_t addr)
{
    size_t lo = 0, hi = alloc_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid].base < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool alloc_insert(const struct fc_alloc *a)
{
    pthread_mutex_lock(&mem_lock);
    if (alloc_count == alloc_cap) {
        size_t cap = alloc_cap ? alloc_cap * 2 : 64;
        struct fc_alloc *grown = realloc(allocs, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&mem_lock);
            return false;
        }
        allocs = grown;
        alloc_cap = cap;
    }
    size_t at = alloc_lower_bound(a->base);
    memmove(&allocs[at + 1], &allocs[at], (alloc_count - at) * sizeof *allocs);
    allocs[at] = *a;
    alloc_count++;
    pthread_mutex_unlock(&mem_lock);
    return true;
}

/* Removes the allocation that starts exactly at base; false if none. */
static bool alloc_remove(uint64_t base, enum alloc_kind kind, struct fc_alloc *out)
{
    pthread_mutex_lock(&mem_lock);
    size_t at = alloc_lower_bound(base);
    bool found = at < alloc_count && allocs[at].base == base && allocs[at].kind == kind;
    if (found) {
        *out = allocs[at];
        memmove(&allocs[at], &allocs[at + 1], (alloc_count - at - 1) * sizeof *allocs);
        alloc_count--;
    }
    pthread_mutex_unlock(&mem_lock);
    return found;
}

bool fc_mem_range_valid(CUdeviceptr ptr, size_t bytes)
{
    pthread_mutex_lock(&mem_lock);
    size_t at = alloc_lower_bound((uint64_t)ptr + 1);
    bool ok = false;
    if (at > 0) {
        const struct fc_alloc *a = &allocs[at - 1];
        ok = ptr >= a->base && bytes <= a->size && ptr - a->base <= a->size - bytes;
    }
    pthread_mutex_unlock(&mem_lock);
    return ok;
}

bool fc_mem_is_graph_alloc(CUdeviceptr ptr)
{
    pthread_mutex_lock(&mem_lock);
    size_t at = alloc_lower_bound((uint64_t)ptr);
    bool graph = at < alloc_count && allocs[at].base == (uint64_t)ptr && allocs[at].kind == ALLOC_GRAPH;
    pthread_mutex_unlock(&mem_lock);
    return graph;
}

void fc_mem_release_ctx(struct fc_ctx *ctx)
{
    pthread_mutex_lock(&mem_lock);
    size_t kept = 0;
    for (size_t i = 0; i < alloc_count; i++) {
        struct fc_alloc a = allocs[i];
        if (a.ctx != ctx || a.kind != ALLOC_DEVICE || a.pool) {
            allocs[kept++] = a;
            continue;
        }
        munmap((void *)(uintptr_t)a.base, a.size);
        fc_mem_unaccount(a.device, a.size);
    }
    alloc_count = kept;
    pthread_mutex_unlock(&mem_lock);
}

void fc_mem_atfork_prepare(void) { pthread_mutex_lock(&mem_lock); }
void fc_mem_atfork_parent(void) { pthread_mutex_unlock(&mem_lock); }

void fc_mem_atfork_child(void)
{
    /* The parent's allocations are the parent's to count and free. */
    alloc_count = 0;
    nmappings = 0;
    pthread_mutex_unlock(&mem_lock);
    fc_pool_atfork_child();
    fc_graphmem_atfork_child();
}

/* ---- allocation and free ---------------------------------------------- */

/* Counts bytes on the device, or in the pool (which grows as needed). */
static CUresult take(struct fc_pool *pool, int device, uint64_t bytes)
{
    return pool ? fc_pool_take(pool, bytes) : fc_mem_account(device, bytes);
}

static void give(struct fc_pool *pool, int device, uint64_t bytes)
{
    if (pool)
        fc_pool_give(pool, bytes);
    else
        fc_mem_unaccount(device, bytes);
}

static CUresult device_alloc(struct fc_ctx *ctx, int device, struct fc_pool *pool, CUdeviceptr *dptr,
                             uint64_t bytes)
{
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = take(pool, device, bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        give(pool, device, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct fc_alloc a = {(uint64_t)(uintptr_t)p, bytes, device, ALLOC_DEVICE, ctx, pool};
    if (!alloc_insert(&a)) {
        munmap(p, bytes);
        give(pool, device, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

void fc_mem_release_now(void *base, size_t size, int device)
{
    munmap(base, size);
    give(fc_pool_take_freeing((uint64_t)(uintptr_t)base), device, size);
}

/* cuMemFree: synchronizes the allocation's context first, as queued work
 * may still touch the memory. */
static CUresult device_free(const char *call, CUdeviceptr dptr)
{
    struct fc_alloc a;
    if (!alloc_remove((uint64_t)dptr, ALLOC_DEVICE, &a))
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_fence **fences = NULL;
    long n = fc_ctx_sync_fences_locked(a.ctx, &fences);
    if (n > 0)
        fc_wait_fences_locked(fences, (size_t)n, fc_ctx_wait_policy_locked(a.ctx));
    free(fences);
    fc_exec_unlock();
    (void)call;
    munmap((void *)(uintptr_t)a.base, a.size);
    give(a.pool, a.device, a.size);
    return CUDA_SUCCESS;
}

void fc_mem_free_deferred(CUdeviceptr ptr)
{
    device_free("cuMemFreeAsync", ptr);
}

/* The current context for an allocation that is not stream-ordered. */
static struct fc_ctx *unsafe_alloc_ctx(const char *call, CUresult *rc)
{
    struct fc_ctx *ctx = fc_current_ctx(call, rc);
    if (ctx && (*rc = fc_capture_check_unsafe(call)) != CUDA_SUCCESS)
        return NULL;
    return ctx;
}

FC_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult rc;
    struct fc_ctx *ctx = unsafe_alloc_ctx(__func__, &rc);
    if (!ctx)
        return rc;
    return device_alloc(ctx, ctx->device, NULL, dptr, bytesize);
}

FC_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned int element_size)
{
    CUresult rc;
    struct fc_ctx *ctx = unsafe_alloc_ctx(__func__, &rc);
    if (!ctx)
        return rc;
    if (!pitch || width == 0 || height == 0 ||
        (element_size != 4 && element_size != 8 && element_size != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t row = (width + 511) & ~(size_t)511;
    if (row < width || height > SIZE_MAX / row)
        return CUDA_ERROR_INVALID_VALUE;
    rc = device_alloc(ctx, ctx->device, NULL, dptr, (uint64_t)row * height);
    if (rc == CUDA_SUCCESS)
        *pitch = row;
    return rc;
}

FC_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUresult rc;
    struct fc_ctx *ctx = unsafe_alloc_ctx(__func__, &rc);
    if (!ctx)
        return rc;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return device_alloc(ctx, ctx->device, NULL, dptr, bytesize);
}

FC_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = fc_capture_check_unsafe(__func__)) != CUDA_SUCCESS)
        return rc;
    return device_free(__func__, dptr);
}

/* The context of a stream-ordered allocation's stream; refused on the
 * legacy stream while a blocking stream captures. */
static CUresult async_stream_ctx(const char *call, CUstream hstream, enum fc_null_stream null_means,
                                 struct fc_ctx **ctx)
{
    fc_exec_lock();
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc == CUDA_SUCCESS)
        rc = fc_capture_check_legacy_locked(call, stream);
    if (rc == CUDA_SUCCESS)
        *ctx = stream->ctx;
    fc_exec_unlock();
    return rc;
}

/* cuMemAllocAsync into a capturing stream: an allocation node. Its address
 * is valid from now on; its memory is taken at the graph's first launch
 * (fc_graphmem.c). The address range is the graph's for good. */
static CUresult graph_alloc(const char *call, CUdeviceptr *dptr, size_t bytesize, CUstream hstream,
                            enum fc_null_stream null_means, bool *captured)
{
    *captured = false;
    if (!dptr || bytesize == 0)
        return CUDA_SUCCESS; /* the usual path answers */
    fc_exec_lock();
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc != CUDA_SUCCESS || !stream->capture) {
        fc_exec_unlock();
        return CUDA_SUCCESS;
    }
    *captured = true;
    void *p = mmap(NULL, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    struct fc_alloc a = {(uint64_t)(uintptr_t)p, bytesize, stream->ctx->device, ALLOC_GRAPH, NULL, NULL};
    struct fc_work work = {.kind = FC_WORK_MEMALLOC, .dst = p, .bytes = bytesize};
    if (p == MAP_FAILED) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (!alloc_insert(&a)) {
        munmap(p, bytesize);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if ((rc = fc_stream_submit_locked(call, stream, &work)) == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr)(uintptr_t)p;
    }
    fc_exec_unlock();
    return rc;
}

CUresult fc_mem_alloc_async(const char *call, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool hpool,
                            CUstream hstream, enum fc_null_stream null_means)
{
    bool captured;
    CUresult grc = graph_alloc(call, dptr, bytesize, hstream, null_means, &captured);
    if (captured)
        return grc;
    struct fc_ctx *ctx;
    CUresult rc = async_stream_ctx(call, hstream, null_means, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_pool *pool = fc_pool_of(call, hpool, ctx->device, &rc);
    if (!pool)
        return rc;
    return device_alloc(ctx, fc_pool_device(pool), pool, dptr, bytesize);
}

CUresult fc_mem_free_async(const char *call, CUdeviceptr dptr, CUstream hstream, enum fc_null_stream null_means)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_stream *stream;
    rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc == CUDA_SUCCESS)
        rc = fc_capture_check_legacy_locked(call, stream);
    if (rc == CUDA_SUCCESS && stream->capture) {
        if (!fc_mem_range_valid(dptr, 1))
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (!fc_capture_defer_free_locked(stream, dptr))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        fc_exec_unlock();
        return rc;
    }
    struct fc_alloc a;
    if (rc == CUDA_SUCCESS && fc_mem_is_graph_alloc(dptr)) {
        fc_exec_unlock();
        return CUDA_SUCCESS; /* the graph's memory: it goes with the graph */
    }
    if (rc == CUDA_SUCCESS && !alloc_remove((uint64_t)dptr, ALLOC_DEVICE, &a))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        /* Freed in stream order, once the work queued before it is done. */
        struct fc_work work = {.kind = FC_WORK_FREE, .dst = (void *)(uintptr_t)a.base, .bytes = a.size,
                               .value = (uint32_t)a.device};
        if (a.pool && !fc_pool_note_freeing(a.base, a.pool)) {
            alloc_insert(&a);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((rc = fc_enqueue_locked(stream, &work, NULL, NULL)) != CUDA_SUCCESS) {
            fc_mem_release_now((void *)(uintptr_t)a.base, a.size, a.device);
        }
    }
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hstream)
{
    return fc_mem_alloc_async(__func__, dptr, bytesize, NULL, hstream, FC_NULL_LEGACY);
}

FC_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hstream)
{
    return fc_mem_free_async(__func__, dptr, hstream, FC_NULL_LEGACY);
}

FC_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx(__func__, &rc);
    if (!ctx)
        return rc;
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_shared *s = fc_shared_state();
    fc_state_lock(s);
    fc_state_reap_locked(s);
    *total_bytes = s->dev[ctx->device].total_mem;
    *free_bytes = s->dev[ctx->device].total_mem - s->dev[ctx->device].used_mem;
    fc_state_unlock(s);
    return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_shared *s = fc_shared_state();
    if (dev < 0 || (uint32_t)dev >= s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = s->dev[dev].total_mem;
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool hpool,
                                        CUstream hstream)
{
    if (!hpool)
        return CUDA_ERROR_INVALID_VALUE;
    return fc_mem_alloc_async(__func__, dptr, bytesize, hpool, hstream, FC_NULL_LEGACY);
}

/* ---- virtual memory management ----------------------------------------- */

FC_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    (void)option;
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = FC_VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

static CUresult counted_new(enum fc_handle_type type, int device, uint64_t bytes, uint64_t *handle)
{
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_counted *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fc_mem_account(device, bytes);
    if (rc != CUDA_SUCCESS) {
        free(c);
        return rc;
    }
    c->device = device;
    c->bytes = bytes;
    c->handle = fc_handle_new(type, c);
    if (!c->handle) {
        fc_mem_unaccount(device, bytes);
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = c->handle;
    return CUDA_SUCCESS;
}

static CUresult counted_free(enum fc_handle_type type, uint64_t handle)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_counted *c = fc_handle_use("cuMemRelease", type, handle);
    if (!c)
        return type == FC_H_ARRAY || type == FC_H_MIPMAP ? CUDA_ERROR_INVALID_HANDLE
                                                         : CUDA_ERROR_INVALID_VALUE;
    fc_handle_free(type, handle);
    /* "cuMemRelease": the memory of a handle still mapped is freed when
     * its last mapping goes (cuMemUnmap). */
    pthread_mutex_lock(&mem_lock);
    bool mapped = c->maps > 0;
    c->released = true;
    pthread_mutex_unlock(&mem_lock);
    if (!mapped) {
        fc_mem_unaccount(c->device, c->bytes);
        free(c);
    }
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!handle || !prop || flags != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || size % FC_VMM_GRANULARITY != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id < 0 || (uint32_t)prop->location.id >= fc_shared_state()->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    uint64_t h;
    rc = counted_new(FC_H_MEMHANDLE, prop->location.id, size, &h);
    if (rc == CUDA_SUCCESS)
        *handle = h;
    return rc;
}

FC_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    return counted_free(FC_H_MEMHANDLE, handle);
}

FC_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags)
{
    (void)alignment;
    (void)addr;
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ptr || size == 0 || flags != 0 || size % FC_VMM_GRANULARITY != 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fc_alloc a = {(uint64_t)(uintptr_t)p, size, 0, ALLOC_RESERVE, NULL, NULL};
    if (!alloc_insert(&a)) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_alloc a;
    if (!alloc_remove((uint64_t)ptr, ALLOC_RESERVE, &a))
        return CUDA_ERROR_INVALID_VALUE;
    (void)size;
    munmap((void *)(uintptr_t)a.base, a.size);
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_counted *c = fc_handle_use(__func__, FC_H_MEMHANDLE, handle);
    if (!c)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0 || offset != 0 || size == 0 || size > c->bytes || !fc_mem_range_valid(ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    bool ok = nmappings < mappings_cap;
    if (!ok) {
        size_t cap = mappings_cap ? mappings_cap * 2 : 64;
        struct fc_mapping *grown = realloc(mappings, cap * sizeof *grown);
        if (grown) {
            mappings = grown;
            mappings_cap = cap;
            ok = true;
        }
    }
    if (ok && mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE) == 0) {
        mappings[nmappings++] = (struct fc_mapping){(uint64_t)ptr, size, c};
        c->maps++;
    } else {
        rc = ok ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&mem_lock);
    return rc;
}

FC_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (size == 0 || !fc_mem_range_valid(ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    /* Fresh, inaccessible pages: the data goes with the mapping. */
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_INVALID_VALUE;
    /* The mappings inside the range go; a released handle's memory with
     * its last one. */
    struct fc_counted *freed[16];
    size_t nfreed = 0;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < nmappings;) {
        struct fc_mapping *m = &mappings[i];
        if (m->base < (uint64_t)ptr || m->base - (uint64_t)ptr >= size) {
            i++;
            continue;
        }
        struct fc_counted *c = m->handle;
        *m = mappings[--nmappings];
        if (--c->maps == 0 && c->released && nfreed < 16)
            freed[nfreed++] = c;
    }
    pthread_mutex_unlock(&mem_lock);
    for (size_t i = 0; i < nfreed; i++) {
        fc_mem_unaccount(freed[i]->device, freed[i]->bytes);
        free(freed[i]);
    }
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!desc || count == 0 || !fc_mem_range_valid(ptr, size))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ---- arrays ------------------------------------------------------------- */

static uint64_t format_bytes(CUarray_format format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
        return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
        return 8;
    default:
        return 0;
    }
}

/* Bytes of one level: width x height x depth elements (0 stands for 1). */
static uint64_t level_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format format, unsigned channels)
{
    uint64_t elem = format_bytes(format);
    if (elem == 0 || (channels != 1 && channels != 2 && channels != 4) || w == 0)
        return 0;
    uint64_t dims[3] = {w, h ? h : 1, d ? d : 1};
    uint64_t bytes = elem * channels;
    for (int i = 0; i < 3; i++) {
        if (dims[i] > UINT64_MAX / bytes)
            return 0;
        bytes *= dims[i];
    }
    return bytes;
}

static CUresult array_create(enum fc_handle_type type, uint64_t bytes, uint64_t *handle)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx("cuArrayCreate", &rc);
    if (!ctx)
        return rc;
    if (!handle || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return counted_new(type, ctx->device, bytes, handle);
}

FC_API CUresult cuArrayCreate_v2(CUarray *handle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    uint64_t bytes = desc ? level_bytes(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels) : 0;
    return array_create(FC_H_ARRAY, bytes, (uint64_t *)handle);
}

FC_API CUresult cuArray3DCreate_v2(CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    uint64_t bytes = desc ? level_bytes(desc->Width, desc->Height, desc->Depth, desc->Format,
                                        desc->NumChannels) : 0;
    return array_create(FC_H_ARRAY, bytes, (uint64_t *)handle);
}

FC_API CUresult cuArrayDestroy(CUarray handle)
{
    return counted_free(FC_H_ARRAY, (uint64_t)(uintptr_t)handle);
}

FC_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels)
{
    uint64_t total = 0;
    if (desc && levels > 0 && levels <= 32) {
        uint64_t w = desc->Width, h = desc->Height, d = desc->Depth;
        for (unsigned i = 0; i < levels; i++) {
            uint64_t b = level_bytes(w, h, d, desc->Format, desc->NumChannels);
            if (b == 0) {
                total = 0;
                break;
            }
            total += b;
            w = w > 1 ? w / 2 : 1;
            h = h > 1 ? h / 2 : h;
            d = d > 1 ? d / 2 : d;
        }
    }
    return array_create(FC_H_MIPMAP, total, (uint64_t *)handle);
}

FC_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle)
{
    return counted_free(FC_H_MIPMAP, (uint64_t)(uintptr_t)handle);
}
