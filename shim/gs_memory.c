/*
 * Device memory caps: every allocation path is counted against the
 * tenant's cap, summed over all of its processes, before the real
 * allocation is made, and every free gives back exactly what was counted.
 * cuMemGetInfo and cuDeviceTotalMem report the cap and the physical truth.
 *
 * - Over the cap: CUDA_ERROR_OUT_OF_MEMORY and nothing is allocated.
 * - A reservation whose real allocation fails is given back.
 * - A double or unknown free changes nothing and returns the driver's answer.
 * - Counting spends the process's lease of headroom (gs_lease.c): no round
 *   trip to the server while it lasts.
 * - cuMemCreate memory is held until its handle is released and its last
 *   mapping is gone; a context's allocations die with it.
 * - Process exit, SIGKILL included, returns everything: the server sees the
 *   socket close. After a reconnection the process declares what it holds.
 *
 * This file owns the table of counted allocations (alloc_table) and of VMM
 * mappings (mappings), both guarded by the table lock (gs_locks.h), which
 * is never held while another is taken.
 */
#include "gs_memory.h"
#include "gs_graphmem.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_lookup.h"
#include "gs_mempools.h"
#include "gs_pools.h"
#include "gs_reserve.h"
#include "gs_rpc.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct counted {
    uint64_t key;      /* device pointer, VMM handle, array handle or context */
    uint8_t kind;      /* enum gs_alloc_kind; 0 = empty, 0xff = deleted */
    uint8_t slot;      /* gs_devs index */
    bool released;     /* VMM: cuMemRelease'd, freed at its last unmap */
    uint32_t maps;     /* VMM: live mappings */
    uint64_t bytes;
    CUcontext ctx;     /* the context it dies with; NULL: none */
};

/* Open-addressing table of live counted allocations; guarded by the table lock. */
static struct counted *alloc_table;
static size_t table_cap, table_used;
/* VMM mappings: the handle behind [base, base+size); guarded by the table lock. */
static struct mapping { uint64_t base, size, handle; } *mappings;
static size_t nmappings, mappings_cap;

static size_t hash(uint64_t key, uint8_t kind)
{
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17);
}

static bool table_grow_locked(void)
{
    size_t cap = table_cap ? table_cap * 2 : 1024;
    struct counted *fresh = calloc(cap, sizeof *fresh);
    if (!fresh)
        return false;
    for (size_t i = 0; i < table_cap; i++) {
        struct counted *e = &alloc_table[i];
        if (e->kind == 0 || e->kind == 0xff)
            continue;
        size_t j = hash(e->key, e->kind) & (cap - 1);
        while (fresh[j].kind)
            j = (j + 1) & (cap - 1);
        fresh[j] = *e;
    }
    free(alloc_table);
    alloc_table = fresh;
    table_cap = cap;
    return true;
}

/* The live entry of (kind, key), or NULL; the table lock held. */
static struct counted *find_locked(enum gs_alloc_kind kind, uint64_t key)
{
    if (!table_cap)
        return NULL;
    size_t j = hash(key, (uint8_t)kind) & (table_cap - 1);
    for (size_t n = 0; n < table_cap && alloc_table[j].kind; n++, j = (j + 1) & (table_cap - 1))
        if (alloc_table[j].kind == kind && alloc_table[j].key == key)
            return &alloc_table[j];
    return NULL;
}

bool gs_mem_track(enum gs_alloc_kind kind, uint64_t key, const struct gs_dev *d, uint64_t bytes, CUcontext ctx)
{
    gs_lock(GS_LOCK_TABLE);
    bool ok = (table_used + 1) * 2 <= table_cap || table_grow_locked();
    if (ok) {
        size_t j = hash(key, (uint8_t)kind) & (table_cap - 1);
        while (alloc_table[j].kind && alloc_table[j].kind != 0xff)
            j = (j + 1) & (table_cap - 1);
        alloc_table[j] = (struct counted){key, (uint8_t)kind, (uint8_t)d->slot, false, 0, bytes, ctx};
        table_used++;
    }
    gs_unlock(GS_LOCK_TABLE);
    return ok;
}

/* Gives back what back[] collected for each device (the table lock not held). */
static void give_back_all(const uint64_t back[GS_MAX_DEVICES])
{
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        if (back[i])
            gs_lease_give(&gs_devs[i], back[i]);
}

/* Removes entry e from the table (the table lock held). */
static void forget_locked(struct counted *e)
{
    e->kind = 0xff;
    table_used--;
}

static bool untrack(enum gs_alloc_kind kind, uint64_t key, struct counted *out)
{
    gs_lock(GS_LOCK_TABLE);
    struct counted *e = find_locked(kind, key);
    if (e) {
        *out = *e;
        forget_locked(e);
    }
    gs_unlock(GS_LOCK_TABLE);
    return e != NULL;
}

void gs_mem_context_died(CUcontext ctx)
{
    uint64_t back[GS_MAX_DEVICES] = {0};
    gs_lock(GS_LOCK_TABLE);
    for (size_t i = 0; i < table_cap; i++) {
        struct counted *e = &alloc_table[i];
        if (e->kind == 0 || e->kind == 0xff || e->ctx != ctx || !ctx)
            continue;
        back[e->slot] += e->bytes;
        forget_locked(e);
    }
    gs_unlock(GS_LOCK_TABLE);
    give_back_all(back);
}

/* ---- reservations ------------------------------------------------------- */

/* The tenant's cap and count on d; false when there is no cap (or no
 * server, under the open policy). */
static bool query_cap(struct gs_dev *d, uint64_t *cap, uint64_t *used)
{
    struct gs_msg_mem_result result;
    if (gs_rpc_mem_query(d, &result) != 0 || result.cap == 0)
        return false;
    *cap = result.cap;
    *used = result.used;
    return true;
}

/* The calling thread's current context: what a plain allocation dies with. */
static CUcontext current_ctx(void)
{
    CUcontext ctx = NULL;
    if (GS_REAL(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS)
        return NULL;
    return ctx;
}

/* Reserve, allocate, and count the result under `key` (dying with
 * context `ctx`); or give the reservation back if the driver fails. */
#define COUNTED_ALLOC(dev, bytes, kind, call, key_expr, ctx)                \
    do {                                                                    \
        CUresult r_ = gs_reserve(dev, bytes, __func__, bytes);                 \
        if (r_ != CUDA_SUCCESS)                                             \
            return r_;                                                      \
        r_ = (call);                                                        \
        if (r_ != CUDA_SUCCESS) {                                           \
            gs_lease_give(dev, bytes);                                          \
            return r_;                                                      \
        }                                                                   \
        if (!gs_mem_track(kind, (uint64_t)(key_expr), dev, bytes, ctx))            \
            gs_log(GS_LOG_ERROR, "out of memory for the allocation table: " \
                   "%llu bytes will stay counted until exit",               \
                   (unsigned long long)(bytes));                            \
        return r_;                                                          \
    } while (0)

/* Frees: forget the entry first (so that a new allocation at the same
 * address is not confused with it), free, then give the bytes back; put
 * the entry back if the driver refuses. */
static CUresult counted_free(enum gs_alloc_kind kind, uint64_t key, CUresult (*do_free)(uint64_t))
{
    struct counted e;
    bool known = untrack(kind, key, &e);
    CUresult rc = do_free(key);
    if (!known)
        return rc;
    if (rc == CUDA_SUCCESS)
        gs_lease_give(&gs_devs[e.slot], e.bytes);
    else
        gs_mem_track(kind, key, &gs_devs[e.slot], e.bytes, e.ctx);
    return rc;
}

/* The device of the calling thread's context; when there is none the
 * driver answers the call itself (no context, nothing to count). */
#define CURRENT_DEV_OR_PASS(d, call)                                        \
    struct gs_dev *d;                                                       \
    if (gs_lookup_current(&d) != CUDA_SUCCESS)                         \
        return (call)


/* ---- plain, pitched, managed, stream-ordered ------------------------------ */

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    GS_PROLOGUE(cuMemAlloc_v2);
    if (!dptr || bytes == 0)
        return GS_REAL(cuMemAlloc_v2)(dptr, bytes);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAlloc_v2)(dptr, bytes));
    COUNTED_ALLOC(d, bytes, GS_K_PTR, GS_REAL(cuMemAlloc_v2)(dptr, bytes), *dptr, current_ctx());
}

GS_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytes)
{
    GS_PROLOGUE(cuMemAlloc);
    if (!dptr || bytes == 0)
        return GS_REAL(cuMemAlloc)(dptr, bytes);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAlloc)(dptr, bytes));
    COUNTED_ALLOC(d, bytes, GS_K_PTR, GS_REAL(cuMemAlloc)(dptr, bytes), *dptr, current_ctx());
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    GS_PROLOGUE(cuMemAllocManaged);
    if (!dptr || bytes == 0)
        return GS_REAL(cuMemAllocManaged)(dptr, bytes, flags);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAllocManaged)(dptr, bytes, flags));
    COUNTED_ALLOC(d, bytes, GS_K_PTR, GS_REAL(cuMemAllocManaged)(dptr, bytes, flags), *dptr, current_ctx());
}

/* Stream-ordered allocations come from a pool of the stream's device,
 * whatever the current context is: the pool's growth is what is counted
 * (gs_mempools.c). */
struct async_args {
    CUdeviceptr *dptr;
    size_t bytes;
    CUmemoryPool pool;
    CUstream stream;
    int variant;             /* 0 cuMemAllocAsync, 1 _ptsz, 2 FromPool, 3 FromPool_ptsz */
};

static CUresult real_async(void *p)
{
    struct async_args *a = p;
    switch (a->variant) {
    case 0: return GS_REAL(cuMemAllocAsync)(a->dptr, a->bytes, a->stream);
    case 1: return GS_REAL(cuMemAllocAsync_ptsz)(a->dptr, a->bytes, a->stream);
    case 2: return GS_REAL(cuMemAllocFromPoolAsync)(a->dptr, a->bytes, a->pool, a->stream);
    default: return GS_REAL(cuMemAllocFromPoolAsync_ptsz)(a->dptr, a->bytes, a->pool, a->stream);
    }
}

static CUresult async_alloc(struct async_args *a, int ptsz)
{
    struct gs_launch_target t;
    if (!a->dptr || a->bytes == 0 || (a->variant >= 2 && !a->pool) ||
        gs_lookup_stream(a->stream, ptsz, &t) != CUDA_SUCCESS)
        return real_async(a);
    if (gs_graphmem_captured(a->stream, ptsz, a->bytes))
        return real_async(a); /* an allocation node: taken at the graph's first launch */
    bool by_size;
    static const char *const names[] = {"cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
                                        "cuMemAllocFromPoolAsync_ptsz"};
    CUresult rc = gs_pool_alloc(names[a->variant & 3], t.dev, a->pool, a->bytes, real_async, a, &by_size);
    if (by_size && !gs_mem_track(GS_K_PTR, *a->dptr, t.dev, a->bytes, NULL))
        gs_log(GS_LOG_ERROR, "out of memory for the allocation table: %llu bytes stay counted",
               (unsigned long long)a->bytes);
    return rc;
}

GS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    GS_PROLOGUE(cuMemAllocAsync);
    struct async_args a = {dptr, bytes, NULL, s, 0};
    return async_alloc(&a, 0);
}

GS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
    GS_PROLOGUE(cuMemAllocAsync_ptsz);
    struct async_args a = {dptr, bytes, NULL, s, 1};
    return async_alloc(&a, 1);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool p, CUstream s)
{
    GS_PROLOGUE(cuMemAllocFromPoolAsync);
    struct async_args a = {dptr, bytes, p, s, 2};
    return async_alloc(&a, 0);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool p, CUstream s)
{
    GS_PROLOGUE(cuMemAllocFromPoolAsync_ptsz);
    struct async_args a = {dptr, bytes, p, s, 3};
    return async_alloc(&a, 1);
}

/* Pitched: the driver picks the pitch. Reserve a 512-byte-aligned
 * estimate, make the allocation, then settle on pitch x height. `real`
 * makes the allocation and reports its address and pitch; `release` frees
 * it again if the settled size does not fit. */
static CUresult pitched_alloc(const char *what, struct gs_dev *d, uint64_t width, uint64_t height,
                              CUresult (*real)(void *args, uint64_t *ptr, uint64_t *pitch), void *args,
                              CUresult (*release)(uint64_t ptr))
{
    uint64_t estimate = ((width + 511) & ~511ull) * height;
    CUresult rc = gs_reserve(d, estimate, what, estimate);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t ptr, pitch;
    if ((rc = real(args, &ptr, &pitch)) != CUDA_SUCCESS) {
        gs_lease_give(d, estimate);
        return rc;
    }
    uint64_t actual = pitch * height;
    if (actual > estimate && gs_reserve(d, actual - estimate, what, actual) != CUDA_SUCCESS) {
        release(ptr);
        gs_lease_give(d, estimate);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < estimate)
        gs_lease_give(d, estimate - actual);
    gs_mem_track(GS_K_PTR, ptr, d, actual, current_ctx());
    return CUDA_SUCCESS;
}

struct pitch_args_v2 { CUdeviceptr *dptr; size_t *pitch; size_t width, height; unsigned int elem; };
struct pitch_args_v1 { CUdeviceptr_v1 *dptr; unsigned int *pitch, width, height, elem; };

static CUresult real_pitch_v2(void *args, uint64_t *ptr, uint64_t *pitch)
{
    struct pitch_args_v2 *a = args;
    CUresult rc = GS_REAL(cuMemAllocPitch_v2)(a->dptr, a->pitch, a->width, a->height, a->elem);
    *ptr = *a->dptr;
    *pitch = *a->pitch;
    return rc;
}

static CUresult real_pitch_v1(void *args, uint64_t *ptr, uint64_t *pitch)
{
    struct pitch_args_v1 *a = args;
    CUresult rc = GS_REAL(cuMemAllocPitch)(a->dptr, a->pitch, a->width, a->height, a->elem);
    *ptr = *a->dptr;
    *pitch = *a->pitch;
    return rc;
}

static CUresult real_free_v2(uint64_t key);
static CUresult real_free_v1(uint64_t key);

GS_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                      unsigned int elem)
{
    GS_PROLOGUE(cuMemAllocPitch_v2);
    if (!dptr || !pitch || width == 0 || height == 0 || width > SIZE_MAX - 511 ||
        height > SIZE_MAX / ((width + 511) & ~(size_t)511))
        return GS_REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem));
    struct pitch_args_v2 args = {dptr, pitch, width, height, elem};
    return pitched_alloc(__func__, d, width, height, real_pitch_v2, &args, real_free_v2);
}

GS_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width,
                                   unsigned int height, unsigned int elem)
{
    GS_PROLOGUE(cuMemAllocPitch);
    if (!dptr || !pitch || width == 0 || height == 0)
        return GS_REAL(cuMemAllocPitch)(dptr, pitch, width, height, elem);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAllocPitch)(dptr, pitch, width, height, elem));
    struct pitch_args_v1 args = {dptr, pitch, width, height, elem};
    return pitched_alloc(__func__, d, width, height, real_pitch_v1, &args, real_free_v1);
}

/* ---- frees -------------------------------------------------------------- */

static CUresult real_free_v2(uint64_t key) { return GS_REAL(cuMemFree_v2)((CUdeviceptr)key); }
static CUresult real_free_v1(uint64_t key) { return GS_REAL(cuMemFree)((CUdeviceptr_v1)key); }

/* cuMemFreeAsync's stream, for the duration of one call: the free callback
 * takes only the key. Owned by the calling thread. */
static __thread CUstream free_stream;
static __thread bool free_ptsz;

static CUresult real_free_async(uint64_t key)
{
    return free_ptsz ? GS_REAL(cuMemFreeAsync_ptsz)((CUdeviceptr)key, free_stream)
                     : GS_REAL(cuMemFreeAsync)((CUdeviceptr)key, free_stream);
}

GS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    GS_PROLOGUE(cuMemFree_v2);
    CUresult rc = counted_free(GS_K_PTR, dptr, real_free_v2);
    gs_pools_touched(); /* it may be stream-ordered memory */
    return rc;
}

GS_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    GS_PROLOGUE(cuMemFree);
    return counted_free(GS_K_PTR, dptr, real_free_v1);
}

GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    GS_PROLOGUE(cuMemFreeAsync);
    free_stream = stream;
    free_ptsz = false;
    CUresult rc = counted_free(GS_K_PTR, dptr, real_free_async);
    gs_pools_touched();
    return rc;
}

GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    GS_PROLOGUE(cuMemFreeAsync_ptsz);
    free_stream = stream;
    free_ptsz = true;
    CUresult rc = counted_free(GS_K_PTR, dptr, real_free_async);
    gs_pools_touched();
    return rc;
}

/* ---- virtual memory management ------------------------------------------- */

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    GS_PROLOGUE(cuMemCreate);
    struct gs_dev *d;
    if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        gs_lookup_ordinal(prop->location.id, &d) != CUDA_SUCCESS)
        return GS_REAL(cuMemCreate)(handle, size, prop, flags); /* host memory, or invalid */
    COUNTED_ALLOC(d, size, GS_K_VMM, GS_REAL(cuMemCreate)(handle, size, prop, flags), *handle, NULL);
}

/* "cuMemRelease": memory still mapped is freed when its last mapping goes,
 * so it stays counted until then. */
GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    GS_PROLOGUE(cuMemRelease);
    /* Forget or mark the entry first, so that a new handle with the same
     * value is not confused with it; undo if the driver refuses. */
    struct counted freed = {0};
    bool marked = false;
    gs_lock(GS_LOCK_TABLE);
    struct counted *e = find_locked(GS_K_VMM, handle);
    if (e && e->maps == 0) {
        freed = *e;
        forget_locked(e);
    } else if (e && !e->released) {
        e->released = marked = true;
    }
    gs_unlock(GS_LOCK_TABLE);
    CUresult rc = GS_REAL(cuMemRelease)(handle);
    if (rc == CUDA_SUCCESS) {
        if (freed.kind)
            gs_lease_give(&gs_devs[freed.slot], freed.bytes);
    } else if (freed.kind) {
        gs_mem_track(GS_K_VMM, handle, &gs_devs[freed.slot], freed.bytes, NULL);
    } else if (marked) {
        gs_lock(GS_LOCK_TABLE);
        if ((e = find_locked(GS_K_VMM, handle)))
            e->released = false;
        gs_unlock(GS_LOCK_TABLE);
    }
    return rc;
}

GS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags)
{
    GS_PROLOGUE(cuMemMap);
    CUresult rc = GS_REAL(cuMemMap)(ptr, size, offset, handle, flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    gs_lock(GS_LOCK_TABLE);
    struct counted *e = find_locked(GS_K_VMM, handle);
    if (e && nmappings == mappings_cap) {
        size_t cap = mappings_cap ? mappings_cap * 2 : 64;
        struct mapping *grown = realloc(mappings, cap * sizeof *grown);
        if (grown) {
            mappings = grown;
            mappings_cap = cap;
        }
    }
    if (e && nmappings < mappings_cap) {
        mappings[nmappings++] = (struct mapping){(uint64_t)ptr, size, handle};
        e->maps++;
    } else if (e) {
        gs_log(GS_LOG_ERROR, "out of memory for the mapping table: a handle's memory stays counted until exit");
        e->maps = UINT32_MAX;
    }
    gs_unlock(GS_LOCK_TABLE);
    return rc;
}

GS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    GS_PROLOGUE(cuMemUnmap);
    CUresult rc = GS_REAL(cuMemUnmap)(ptr, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t back[GS_MAX_DEVICES] = {0};
    gs_lock(GS_LOCK_TABLE);
    for (size_t i = 0; i < nmappings;) {
        struct mapping *m = &mappings[i];
        if (m->base < (uint64_t)ptr || m->base - (uint64_t)ptr >= size) {
            i++;
            continue;
        }
        struct counted *e = find_locked(GS_K_VMM, m->handle);
        *m = mappings[--nmappings];
        if (e && e->maps != UINT32_MAX && --e->maps == 0 && e->released) {
            back[e->slot] += e->bytes;
            forget_locked(e);
        }
    }
    gs_unlock(GS_LOCK_TABLE);
    give_back_all(back);
    return rc;
}

/* ---- arrays ------------------------------------------------------------- */

/* Bytes per element of an array format; 0 for formats not sized here. */
static uint64_t element_bytes(CUarray_format format, unsigned channels)
{
    uint64_t size;
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1:
        size = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1:
        size = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT:
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2:
        size = 4; break;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4:
        size = 8; break;
    default:
        return 0;
    }
    return channels == 1 || channels == 2 || channels == 4 ? size * channels : 0;
}

/* width x max(height,1) x max(depth,1) elements; 0 if it cannot be sized. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t depth, uint64_t elem)
{
    uint64_t dims[3] = {w, h ? h : 1, depth ? depth : 1}, bytes = elem;
    for (int i = 0; i < 3 && bytes; i++)
        bytes = dims[i] && dims[i] <= UINT64_MAX / bytes ? bytes * dims[i] : 0;
    return bytes;
}

#define ARRAY_CREATE(name, desc_type, depth_expr)                                      \
    GS_EXPORT CUresult name(CUarray *handle, const desc_type *desc)                    \
    {                                                                                  \
        GS_PROLOGUE(name);                                                                \
        uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, depth_expr,     \
                                            element_bytes(desc->Format, desc->NumChannels)) : 0; \
        if (!handle || bytes == 0)                                                     \
            return GS_REAL(name)(handle, desc);                                        \
        CURRENT_DEV_OR_PASS(d, GS_REAL(name)(handle, desc));                           \
        COUNTED_ALLOC(d, bytes, GS_K_ARRAY, GS_REAL(name)(handle, desc), (uintptr_t)*handle, current_ctx()); \
    }

ARRAY_CREATE(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR, 0)
ARRAY_CREATE(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1, 0)
ARRAY_CREATE(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR, desc->Depth)
ARRAY_CREATE(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1, desc->Depth)

static CUresult real_array_destroy(uint64_t key) { return GS_REAL(cuArrayDestroy)((CUarray)(uintptr_t)key); }

GS_EXPORT CUresult cuArrayDestroy(CUarray handle)
{
    GS_PROLOGUE(cuArrayDestroy);
    return counted_free(GS_K_ARRAY, (uintptr_t)handle, real_array_destroy);
}

GS_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                          unsigned int levels)
{
    GS_PROLOGUE(cuMipmappedArrayCreate);
    uint64_t total = 0;
    if (desc && levels > 0 && levels <= 32) {
        uint64_t elem = element_bytes(desc->Format, desc->NumChannels);
        uint64_t w = desc->Width, h = desc->Height, depth = desc->Depth;
        for (unsigned i = 0; i < levels; i++) {
            uint64_t b = array_bytes(w, h, depth, elem);
            if (b == 0 || total > UINT64_MAX - b) {
                total = 0;
                break;
            }
            total += b;
            w = w > 1 ? w / 2 : 1;
            h = h > 1 ? h / 2 : h;
            depth = depth > 1 ? depth / 2 : depth;
        }
    }
    if (!handle || total == 0)
        return GS_REAL(cuMipmappedArrayCreate)(handle, desc, levels);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMipmappedArrayCreate)(handle, desc, levels));
    COUNTED_ALLOC(d, total, GS_K_MIPMAP, GS_REAL(cuMipmappedArrayCreate)(handle, desc, levels), (uintptr_t)*handle,
                  current_ctx());
}

static CUresult real_mipmap_destroy(uint64_t key)
{
    return GS_REAL(cuMipmappedArrayDestroy)((CUmipmappedArray)(uintptr_t)key);
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle)
{
    GS_PROLOGUE(cuMipmappedArrayDestroy);
    return counted_free(GS_K_MIPMAP, (uintptr_t)handle, real_mipmap_destroy);
}

/* ---- what the application is told ---------------------------------------- */

/* total = min(cap, physical total); free = min(total - the tenant's count,
 * physically free), never below zero. The tenant's count leaves out this
 * process's own headroom, which it can spend. */
static void apply_cap(uint64_t cap, uint64_t used, uint64_t *free_bytes, uint64_t *total_bytes)
{
    uint64_t total = cap < *total_bytes ? cap : *total_bytes;
    uint64_t room = used < total ? total - used : 0;
    *total_bytes = total;
    if (room < *free_bytes)
        *free_bytes = room;
}

/* The capped view of the calling thread's device: false when there is no
 * cap (or no context, or no server under the open policy). */
static bool capped_info(uint64_t *free_bytes, uint64_t *total_bytes)
{
    struct gs_dev *d;
    uint64_t cap, used;
    if (gs_lookup_current(&d) != CUDA_SUCCESS)
        return false;
    gs_pools_settle(true);
    if (!query_cap(d, &cap, &used))
        return false;
    uint64_t headroom = gs_lease_headroom(d);
    apply_cap(cap, used > headroom ? used - headroom : 0, free_bytes, total_bytes);
    return true;
}

/* The cap of a device by ordinal, if it is below *total. */
static void capped_total(CUdevice dev, uint64_t *total)
{
    struct gs_dev *d;
    uint64_t cap, used;
    if (gs_lookup_ordinal(dev, &d) == CUDA_SUCCESS && query_cap(d, &cap, &used) && cap < *total)
        *total = cap;
}

GS_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    GS_PROLOGUE(cuMemGetInfo_v2);
    CUresult rc = GS_REAL(cuMemGetInfo_v2)(free_bytes, total_bytes);
    uint64_t f, t;
    if (rc == CUDA_SUCCESS && (f = *free_bytes, t = *total_bytes, capped_info(&f, &t))) {
        *free_bytes = (size_t)f;
        *total_bytes = (size_t)t;
    }
    return rc;
}

GS_EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes)
{
    GS_PROLOGUE(cuMemGetInfo);
    CUresult rc = GS_REAL(cuMemGetInfo)(free_bytes, total_bytes);
    uint64_t f, t;
    if (rc == CUDA_SUCCESS && (f = *free_bytes, t = *total_bytes, capped_info(&f, &t))) {
        *free_bytes = (unsigned int)(f > UINT_MAX ? UINT_MAX : f);
        *total_bytes = (unsigned int)(t > UINT_MAX ? UINT_MAX : t);
    }
    return rc;
}

GS_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    GS_PROLOGUE(cuDeviceTotalMem_v2);
    CUresult rc = GS_REAL(cuDeviceTotalMem_v2)(bytes, dev);
    if (rc == CUDA_SUCCESS) {
        uint64_t t = *bytes;
        capped_total(dev, &t);
        *bytes = (size_t)t;
    }
    return rc;
}

GS_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    GS_PROLOGUE(cuDeviceTotalMem);
    CUresult rc = GS_REAL(cuDeviceTotalMem)(bytes, dev);
    if (rc == CUDA_SUCCESS) {
        uint64_t t = *bytes;
        capped_total(dev, &t);
        *bytes = (unsigned int)t;
    }
    return rc;
}

void gs_memory_after_fork_child(void)
{
    /* The child holds none of the parent's device memory. The tables leak:
     * another thread of the parent may have been growing them. */
    alloc_table = NULL;
    table_cap = table_used = 0;
    mappings = NULL;
    nmappings = mappings_cap = 0;
}
