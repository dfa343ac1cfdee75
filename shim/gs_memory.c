/*
 * Device memory caps: every allocation path is reserved with
 * gpuslice-server before the real allocation is made, against the tenant's
 * cap summed over all of its processes, and every free gives back exactly
 * what was counted. cuMemGetInfo and cuDeviceTotalMem report the cap.
 *
 * - Over the cap: CUDA_ERROR_OUT_OF_MEMORY and nothing is allocated.
 * - A reservation whose real allocation fails is given back.
 * - A double or unknown free changes nothing and returns the driver's answer.
 * - An allocation costs one round trip to the server; a free costs none.
 * - Process exit, SIGKILL included, returns everything: the server sees the
 *   socket close. After a reconnection the process declares what it holds.
 *
 * This file owns the table of counted allocations (alloc_table, guarded by
 * table_lock) and the per-device totals (gs_dev.mem_held, under
 * gs_gate_lock).
 */
#include "gs_gate.h"
#include "gs_hooks.h"
#include "gs_log.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum alloc_kind { K_PTR = 1, K_VMM, K_ARRAY, K_MIPMAP };

struct counted {
    uint64_t key;      /* device pointer, VMM handle or array handle */
    uint8_t kind;      /* enum alloc_kind; 0 = empty, 0xff = deleted */
    uint8_t slot;      /* gs_devs index */
    uint64_t bytes;
};

/* Open-addressing table of live counted allocations; guarded by table_lock. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct counted *alloc_table;
static size_t table_cap, table_used;

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

static bool track(enum alloc_kind kind, uint64_t key, const struct gs_dev *d, uint64_t bytes)
{
    pthread_mutex_lock(&table_lock);
    bool ok = (table_used + 1) * 2 <= table_cap || table_grow_locked();
    if (ok) {
        size_t j = hash(key, (uint8_t)kind) & (table_cap - 1);
        while (alloc_table[j].kind && alloc_table[j].kind != 0xff)
            j = (j + 1) & (table_cap - 1);
        alloc_table[j] = (struct counted){key, (uint8_t)kind, (uint8_t)d->slot, bytes};
        table_used++;
    }
    pthread_mutex_unlock(&table_lock);
    return ok;
}

static bool untrack(enum alloc_kind kind, uint64_t key, struct counted *out)
{
    bool found = false;
    pthread_mutex_lock(&table_lock);
    if (table_cap) {
        size_t j = hash(key, (uint8_t)kind) & (table_cap - 1);
        for (size_t n = 0; n < table_cap && alloc_table[j].kind; n++, j = (j + 1) & (table_cap - 1))
            if (alloc_table[j].kind == kind && alloc_table[j].key == key) {
                *out = alloc_table[j];
                alloc_table[j].kind = 0xff;
                table_used--;
                found = true;
                break;
            }
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

/* ---- reservations ------------------------------------------------------- */

static CUresult reserve(struct gs_dev *d, uint64_t bytes)
{
    struct gs_msg_mem_result result;
    pthread_mutex_lock(&gs_gate_lock);
    int rc = gs_client_mem_call_locked(d, GS_MSG_MEM_RESERVE, bytes, &result);
    bool ok = rc != 0 || result.ok; /* rc != 0: server down, policy open */
    if (ok)
        d->mem_held += bytes;
    if (rc == 0)
        d->mem_cap = result.cap;
    pthread_mutex_unlock(&gs_gate_lock);
    if (!ok)
        GS_DEBUG("allocation of %llu bytes refused: the tenant's cap is %llu, %llu in use",
                 (unsigned long long)bytes, (unsigned long long)result.cap, (unsigned long long)result.used);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void give_back(struct gs_dev *d, uint64_t bytes)
{
    pthread_mutex_lock(&gs_gate_lock);
    d->mem_held -= bytes > d->mem_held ? d->mem_held : bytes;
    if (gs_client_connected_locked())
        gs_client_mem_call_locked(d, GS_MSG_MEM_FREE, bytes, NULL);
    pthread_mutex_unlock(&gs_gate_lock);
}

/* The tenant's cap and usage on d; false when there is no cap (or no
 * server, under the open policy). */
static bool query_cap(struct gs_dev *d, uint64_t *cap, uint64_t *used)
{
    struct gs_msg_mem_result result;
    pthread_mutex_lock(&gs_gate_lock);
    int rc = gs_client_mem_call_locked(d, GS_MSG_MEM_QUERY, 0, &result);
    if (rc == 0)
        d->mem_cap = result.cap;
    pthread_mutex_unlock(&gs_gate_lock);
    if (rc != 0 || result.cap == 0)
        return false;
    *cap = result.cap;
    *used = result.used;
    return true;
}

/* Reserve, allocate, and count the result under `key`; or give the
 * reservation back if the driver fails. */
#define COUNTED_ALLOC(dev, bytes, kind, call, key_expr)                     \
    do {                                                                    \
        CUresult r_ = reserve(dev, bytes);                                  \
        if (r_ != CUDA_SUCCESS)                                             \
            return r_;                                                      \
        r_ = (call);                                                        \
        if (r_ != CUDA_SUCCESS) {                                           \
            give_back(dev, bytes);                                          \
            return r_;                                                      \
        }                                                                   \
        if (!track(kind, (uint64_t)(key_expr), dev, bytes))                 \
            gs_log(GS_LOG_ERROR, "out of memory for the allocation table: " \
                   "%llu bytes will stay counted until exit",               \
                   (unsigned long long)(bytes));                            \
        return r_;                                                          \
    } while (0)

/* Frees: forget the entry first (so that a new allocation at the same
 * address is not confused with it), free, then give the bytes back; put
 * the entry back if the driver refuses. */
static CUresult counted_free(enum alloc_kind kind, uint64_t key, CUresult (*do_free)(uint64_t))
{
    struct counted e;
    bool known = untrack(kind, key, &e);
    CUresult rc = do_free(key);
    if (!known)
        return rc;
    if (rc == CUDA_SUCCESS)
        give_back(&gs_devs[e.slot], e.bytes);
    else
        track(kind, key, &gs_devs[e.slot], e.bytes);
    return rc;
}

/* The device of the calling thread's context; when there is none the
 * driver answers the call itself (no context, nothing to count). */
#define CURRENT_DEV_OR_PASS(d, call)                                        \
    struct gs_dev *d;                                                       \
    if (gs_gate_current_device(&d) != CUDA_SUCCESS)                         \
        return (call)


/* ---- plain, pitched, managed, stream-ordered ------------------------------ */

GS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    GS_PROLOGUE(cuMemAlloc_v2);
    if (!dptr || bytes == 0)
        return GS_REAL(cuMemAlloc_v2)(dptr, bytes);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAlloc_v2)(dptr, bytes));
    COUNTED_ALLOC(d, bytes, K_PTR, GS_REAL(cuMemAlloc_v2)(dptr, bytes), *dptr);
}

GS_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytes)
{
    GS_PROLOGUE(cuMemAlloc);
    if (!dptr || bytes == 0)
        return GS_REAL(cuMemAlloc)(dptr, bytes);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAlloc)(dptr, bytes));
    COUNTED_ALLOC(d, bytes, K_PTR, GS_REAL(cuMemAlloc)(dptr, bytes), *dptr);
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    GS_PROLOGUE(cuMemAllocManaged);
    if (!dptr || bytes == 0)
        return GS_REAL(cuMemAllocManaged)(dptr, bytes, flags);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAllocManaged)(dptr, bytes, flags));
    COUNTED_ALLOC(d, bytes, K_PTR, GS_REAL(cuMemAllocManaged)(dptr, bytes, flags), *dptr);
}

/* Stream-ordered allocations come from the stream's device, whatever the
 * current context is. */
#define ASYNC_ALLOC(name, ptsz, extra_params, extra_args)                        \
    GS_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytes extra_params)        \
    {                                                                            \
        GS_PROLOGUE(name);                                                       \
        struct gs_launch_target t;                                               \
        if (!dptr || bytes == 0 || gs_gate_resolve_stream(s, ptsz, &t) != CUDA_SUCCESS) \
            return GS_REAL(name)(dptr, bytes extra_args);                        \
        COUNTED_ALLOC(t.dev, bytes, K_PTR, GS_REAL(name)(dptr, bytes extra_args), *dptr); \
    }

#define COMMA ,
ASYNC_ALLOC(cuMemAllocAsync, 0, COMMA CUstream s, COMMA s)
ASYNC_ALLOC(cuMemAllocAsync_ptsz, 1, COMMA CUstream s, COMMA s)
ASYNC_ALLOC(cuMemAllocFromPoolAsync, 0, COMMA CUmemoryPool p COMMA CUstream s, COMMA p COMMA s)
ASYNC_ALLOC(cuMemAllocFromPoolAsync_ptsz, 1, COMMA CUmemoryPool p COMMA CUstream s, COMMA p COMMA s)

/* Pitched: the driver picks the pitch. Reserve a 512-byte-aligned
 * estimate, make the allocation, then settle on pitch x height. `real`
 * makes the allocation and reports its address and pitch; `release` frees
 * it again if the settled size does not fit. */
static CUresult pitched_alloc(struct gs_dev *d, uint64_t width, uint64_t height,
                              CUresult (*real)(void *args, uint64_t *ptr, uint64_t *pitch), void *args,
                              CUresult (*release)(uint64_t ptr))
{
    uint64_t estimate = ((width + 511) & ~511ull) * height;
    CUresult rc = reserve(d, estimate);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t ptr, pitch;
    if ((rc = real(args, &ptr, &pitch)) != CUDA_SUCCESS) {
        give_back(d, estimate);
        return rc;
    }
    uint64_t actual = pitch * height;
    if (actual > estimate && reserve(d, actual - estimate) != CUDA_SUCCESS) {
        release(ptr);
        give_back(d, estimate);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < estimate)
        give_back(d, estimate - actual);
    track(K_PTR, ptr, d, actual);
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
    return pitched_alloc(d, width, height, real_pitch_v2, &args, real_free_v2);
}

GS_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width,
                                   unsigned int height, unsigned int elem)
{
    GS_PROLOGUE(cuMemAllocPitch);
    if (!dptr || !pitch || width == 0 || height == 0)
        return GS_REAL(cuMemAllocPitch)(dptr, pitch, width, height, elem);
    CURRENT_DEV_OR_PASS(d, GS_REAL(cuMemAllocPitch)(dptr, pitch, width, height, elem));
    struct pitch_args_v1 args = {dptr, pitch, width, height, elem};
    return pitched_alloc(d, width, height, real_pitch_v1, &args, real_free_v1);
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
    return counted_free(K_PTR, dptr, real_free_v2);
}

GS_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    GS_PROLOGUE(cuMemFree);
    return counted_free(K_PTR, dptr, real_free_v1);
}

GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    GS_PROLOGUE(cuMemFreeAsync);
    free_stream = stream;
    free_ptsz = false;
    return counted_free(K_PTR, dptr, real_free_async);
}

GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    GS_PROLOGUE(cuMemFreeAsync_ptsz);
    free_stream = stream;
    free_ptsz = true;
    return counted_free(K_PTR, dptr, real_free_async);
}

/* ---- virtual memory management ------------------------------------------- */

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    GS_PROLOGUE(cuMemCreate);
    struct gs_dev *d;
    if (!handle || !prop || size == 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        gs_gate_device_by_ordinal(prop->location.id, &d) != CUDA_SUCCESS)
        return GS_REAL(cuMemCreate)(handle, size, prop, flags); /* host memory, or invalid */
    COUNTED_ALLOC(d, size, K_VMM, GS_REAL(cuMemCreate)(handle, size, prop, flags), *handle);
}

static CUresult real_release(uint64_t key) { return GS_REAL(cuMemRelease)((CUmemGenericAllocationHandle)key); }

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    GS_PROLOGUE(cuMemRelease);
    return counted_free(K_VMM, handle, real_release);
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
        COUNTED_ALLOC(d, bytes, K_ARRAY, GS_REAL(name)(handle, desc), (uintptr_t)*handle); \
    }

ARRAY_CREATE(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR, 0)
ARRAY_CREATE(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1, 0)
ARRAY_CREATE(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR, desc->Depth)
ARRAY_CREATE(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1, desc->Depth)

static CUresult real_array_destroy(uint64_t key) { return GS_REAL(cuArrayDestroy)((CUarray)(uintptr_t)key); }

GS_EXPORT CUresult cuArrayDestroy(CUarray handle)
{
    GS_PROLOGUE(cuArrayDestroy);
    return counted_free(K_ARRAY, (uintptr_t)handle, real_array_destroy);
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
    COUNTED_ALLOC(d, total, K_MIPMAP, GS_REAL(cuMipmappedArrayCreate)(handle, desc, levels), (uintptr_t)*handle);
}

static CUresult real_mipmap_destroy(uint64_t key)
{
    return GS_REAL(cuMipmappedArrayDestroy)((CUmipmappedArray)(uintptr_t)key);
}

GS_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle)
{
    GS_PROLOGUE(cuMipmappedArrayDestroy);
    return counted_free(K_MIPMAP, (uintptr_t)handle, real_mipmap_destroy);
}

/* ---- what the application is told ---------------------------------------- */

/* total = min(cap, physical); free = total - the tenant's usage, never
 * below zero. */
static void apply_cap(uint64_t cap, uint64_t used, uint64_t *free_bytes, uint64_t *total_bytes)
{
    uint64_t total = cap < *total_bytes ? cap : *total_bytes;
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
}

/* The capped view of the calling thread's device: false when there is no
 * cap (or no context, or no server under the open policy). */
static bool capped_info(uint64_t *free_bytes, uint64_t *total_bytes)
{
    struct gs_dev *d;
    uint64_t cap, used;
    if (gs_gate_current_device(&d) != CUDA_SUCCESS || !query_cap(d, &cap, &used))
        return false;
    apply_cap(cap, used, free_bytes, total_bytes);
    return true;
}

/* The cap of a device by ordinal, if it is below *total. */
static void capped_total(CUdevice dev, uint64_t *total)
{
    struct gs_dev *d;
    uint64_t cap, used;
    if (gs_gate_device_by_ordinal(dev, &d) == CUDA_SUCCESS && query_cap(d, &cap, &used) && cap < *total)
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
    /* The child holds none of the parent's device memory. */
    pthread_mutex_init(&table_lock, NULL);
    free(alloc_table);
    alloc_table = NULL;
    table_cap = table_used = 0;
}
