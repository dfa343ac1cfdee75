/*
 * Memory caps through the shim, in one process of a tenant whose cap is
 * 256 MiB on a 1 GiB simulated GPU (set up by caps_test.py):
 *   - cuMemGetInfo_v2 and cuDeviceTotalMem_v2 report the cap and the
 *     tenant's usage on every lookup path;
 *   - every allocation path is counted and freed exactly;
 *   - over the cap: CUDA_ERROR_OUT_OF_MEMORY and nothing allocated;
 *   - double and unknown frees change nothing and return the driver's answer.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);

#define MIB (1ull << 20)
#define CAP (256 * MIB)

typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*total_fn)(size_t *, CUdevice);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);



static uint64_t used(void)
{
    size_t free_b = 0, total_b = 0;
    if (cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS || total_b != CAP)
        return UINT64_MAX;
    return total_b - free_b;
}

static void *fn_ptr(void *p) { return p; }

/* All the ways to reach cuMemGetInfo_v2 and cuDeviceTotalMem_v2. */
static void check_info_paths(uint64_t want_used)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    info_fn infos[6];
    total_fn totals[6];
    int n = 0;
    void *p;
    CUdriverProcAddressQueryResult status;
    infos[n] = cuMemGetInfo_v2;
    totals[n++] = cuDeviceTotalMem_v2;
    infos[n] = (info_fn)(uintptr_t)fn_ptr(dlsym(lib, "cuMemGetInfo_v2"));
    totals[n++] = (total_fn)(uintptr_t)fn_ptr(dlsym(lib, "cuDeviceTotalMem_v2"));
    gpa_v1_fn v1 = (gpa_v1_fn)(uintptr_t)fn_ptr(dlsym(lib, "cuGetProcAddress"));
    v1("cuMemGetInfo", &p, 11030, 0);
    infos[n] = (info_fn)(uintptr_t)p;
    v1("cuDeviceTotalMem", &p, 11030, 0);
    totals[n++] = (total_fn)(uintptr_t)p;
    for (int flags = 0; flags < 2; flags++) {
        cuGetProcAddress_v2("cuMemGetInfo", &p, 12000,
                            flags ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, &status);
        infos[n] = (info_fn)(uintptr_t)p;
        cuGetProcAddress_v2("cuDeviceTotalMem", &p, 12000,
                            flags ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, &status);
        totals[n++] = (total_fn)(uintptr_t)p;
    }
    for (int i = 0; i < n; i++) {
        size_t free_b = 0, total_b = 0, dev_total = 0;
        EXPECT(infos[i] && infos[i](&free_b, &total_b) == CUDA_SUCCESS);
        EXPECT(total_b == CAP && free_b == CAP - want_used);
        EXPECT(totals[i] && totals[i](&dev_total, 0) == CUDA_SUCCESS && dev_total == CAP);
        if (total_b != CAP || free_b != CAP - want_used)
            printf("path %d: free %zu total %zu, want used %llu\n", i, free_b, total_b,
                   (unsigned long long)want_used);
    }
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        printf("setup failed\n");
        return 2;
    }
    check_info_paths(0);

    CUdeviceptr a, b, c;
    EXPECT(cuMemAlloc_v2(&a, 64 * MIB) == CUDA_SUCCESS);
    EXPECT(used() == 64 * MIB);
    check_info_paths(64 * MIB);

    /* over the cap: refused, nothing allocated */
    b = 0;
    EXPECT(cuMemAlloc_v2(&b, 200 * MIB) == CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT(b == 0 && used() == 64 * MIB);
    EXPECT(cuMemAlloc_v2(&b, 192 * MIB) == CUDA_SUCCESS); /* exactly up to the cap */
    EXPECT(used() == CAP);
    EXPECT(cuMemAlloc_v2(&c, 1) == CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT(cuMemFree_v2(b) == CUDA_SUCCESS && used() == 64 * MIB);

    /* double and unknown frees: the driver's answer, no change */
    EXPECT(cuMemFree_v2(b) == CUDA_ERROR_INVALID_VALUE && used() == 64 * MIB);
    EXPECT(cuMemFree_v2((CUdeviceptr)12345) == CUDA_ERROR_INVALID_VALUE && used() == 64 * MIB);

    /* pitched: pitch x height as the driver returns it */
    size_t pitch = 0;
    EXPECT(cuMemAllocPitch_v2(&b, &pitch, 1000, 100, 4) == CUDA_SUCCESS && pitch == 1024);
    EXPECT(used() == 64 * MIB + 1024 * 100);
    EXPECT(cuMemFree_v2(b) == CUDA_SUCCESS && used() == 64 * MIB);
    /* managed */
    EXPECT(cuMemAllocManaged(&b, 3 * MIB, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS && used() == 67 * MIB);
    EXPECT(cuMemFree_v2(b) == CUDA_SUCCESS && used() == 64 * MIB);
    /* stream-ordered, and its per-thread variant */
    EXPECT(cuMemAllocAsync(&b, 5 * MIB, NULL) == CUDA_SUCCESS && used() == 69 * MIB);
    EXPECT(cuMemAllocAsync_ptsz(&c, 1 * MIB, NULL) == CUDA_SUCCESS && used() == 70 * MIB);
    EXPECT(cuMemFreeAsync(b, NULL) == CUDA_SUCCESS && cuMemFreeAsync(c, NULL) == CUDA_SUCCESS);
    EXPECT(used() == 64 * MIB);
    /* pools */
    CUmemoryPool pool;
    EXPECT(cuDeviceGetDefaultMemPool(&pool, dev) == CUDA_SUCCESS);
    EXPECT(cuMemAllocFromPoolAsync(&b, 7 * MIB, pool, NULL) == CUDA_SUCCESS && used() == 71 * MIB);
    EXPECT(cuMemFreeAsync(b, NULL) == CUDA_SUCCESS && used() == 64 * MIB);
    /* VMM */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CUmemGenericAllocationHandle h;
    EXPECT(cuMemCreate(&h, 4 * MIB, &prop, 0) == CUDA_SUCCESS && used() == 68 * MIB);
    EXPECT(cuMemCreate(&h, 300 * MIB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY && used() == 68 * MIB);
    EXPECT(cuMemRelease(h) == CUDA_SUCCESS && used() == 64 * MIB);
    EXPECT(cuMemRelease(h) != CUDA_SUCCESS && used() == 64 * MIB);
    /* arrays, 3D arrays, mipmapped arrays */
    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 64, .Height = 32, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    EXPECT(cuArrayCreate_v2(&arr, &d2) == CUDA_SUCCESS && used() == 64 * MIB + 64 * 32 * 16);
    EXPECT(cuArrayDestroy(arr) == CUDA_SUCCESS && used() == 64 * MIB);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 16, .Height = 16, .Depth = 8, .Format = CU_AD_FORMAT_HALF,
                                  .NumChannels = 2};
    EXPECT(cuArray3DCreate_v2(&arr, &d3) == CUDA_SUCCESS && used() == 64 * MIB + 16 * 16 * 8 * 4);
    EXPECT(cuArrayDestroy(arr) == CUDA_SUCCESS && used() == 64 * MIB);
    CUmipmappedArray mip;
    CUDA_ARRAY3D_DESCRIPTOR dm = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                  .NumChannels = 1};
    EXPECT(cuMipmappedArrayCreate(&mip, &dm, 3) == CUDA_SUCCESS &&
           used() == 64 * MIB + 64 * 64 + 32 * 32 + 16 * 16);
    EXPECT(cuMipmappedArrayDestroy(mip) == CUDA_SUCCESS && used() == 64 * MIB);

    EXPECT(cuMemFree_v2(a) == CUDA_SUCCESS && used() == 0);
    return check_finish();
}
