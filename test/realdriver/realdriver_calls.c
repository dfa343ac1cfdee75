/*
 * realdriver_calls: a fixed sequence of driver calls that can only fail on
 * a machine without a GPU (before and after a failed cuInit, a bad device,
 * no context), printing each result code. cuda_test.py runs it with
 * and without libgpuslice.so preloaded on NVIDIA's driver: every code must
 * be the same.
 *
 *   realdriver_calls direct|dlsym|gpa
 *
 * direct: the symbols this program is linked against (-lcuda)
 * dlsym:  dlsym(dlopen("libcuda.so.1"), exact versioned name)
 * gpa:    cuGetProcAddress_v2(base name, CUDA version, default flags)
 *
 * Prints "NAME rc=CODE" per call and "driver_version=V".
 */
#include <cuda.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* Older entry points that a current cuda.h declares only for the driver's
 * own build; NVIDIA's driver exports them all. */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int nparams, unsigned int flags,
                                CUdevice dev);

/* The calls made, each with the exact symbol, the base name and CUDA
 * version a runtime would pass to cuGetProcAddress, and its parameters. */
#define CALLS(X)                                                                                      \
    X(cuDriverGetVersion, "cuDriverGetVersion", 2020, (int *))                            \
    X(cuInit, "cuInit", 2000, (unsigned))                                                 \
    X(cuDeviceGet, "cuDeviceGet", 2000, (CUdevice *, int))                                \
    X(cuDeviceGetCount, "cuDeviceGetCount", 2000, (int *))                                \
    X(cuCtxCreate_v2, "cuCtxCreate", 11000, (CUcontext *, unsigned, CUdevice))            \
    X(cuCtxCreate_v3, "cuCtxCreate", 12000,                                                           \
      (CUcontext *, CUexecAffinityParam *, int, unsigned, CUdevice))                      \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, (CUcontext *, CUdevice)) \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, (CUdevice))       \
    X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, (CUdevice))           \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, (CUcontext))                              \
    X(cuCtxPushCurrent_v2, "cuCtxPushCurrent", 4000, (CUcontext))                         \
    X(cuCtxPopCurrent_v2, "cuCtxPopCurrent", 4000, (CUcontext *))                         \
    X(cuCtxDestroy_v2, "cuCtxDestroy", 4000, (CUcontext))                                 \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, (CUdeviceptr *, size_t))                         \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020,                                                    \
      (CUdeviceptr *, size_t *, size_t, size_t, unsigned))                                \
    X(cuMemAllocManaged, "cuMemAllocManaged", 6000, (CUdeviceptr *, size_t, unsigned))    \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, (CUdeviceptr *, size_t, CUstream))       \
    X(cuMemFree_v2, "cuMemFree", 3020, (CUdeviceptr))                                     \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, (size_t *, size_t *))                        \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, (size_t *, CUdevice))                \
    X(cuLaunchKernel, "cuLaunchKernel", 4000,                                                         \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
                   CUstream, void **, void **))                                                       \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 12000, (const CUlaunchConfig *, CUfunction, void **, void **)) \
    X(cuGraphLaunch, "cuGraphLaunch", 10000, (CUgraphExec, CUstream))

#define FIELD(sym, base, version, params) CUresult (*sym) params;
static struct {
    CALLS(FIELD)
} api;

static void *lookup(const char *mode, void *lib, gpa_v2_fn gpa, const char *sym, const char *base, int version)
{
    if (strcmp(mode, "dlsym") == 0)
        return dlsym(lib, sym);
    void *p = NULL;
    CUdriverProcAddressQueryResult status;
    if (gpa(base, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS)
        return NULL;
    return p;
}

static int load(const char *mode)
{
    if (strcmp(mode, "direct") == 0) {
#define DIRECT(sym, base, version, params) api.sym = sym;
        CALLS(DIRECT)
        return 0;
    }
    if (strcmp(mode, "dlsym") != 0 && strcmp(mode, "gpa") != 0)
        return 1;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "realdriver_calls: %s\n", dlerror());
        return 2;
    }
    gpa_v2_fn gpa = (gpa_v2_fn)(uintptr_t)dlsym(lib, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "realdriver_calls: no cuGetProcAddress_v2\n");
        return 2;
    }
    int missing = 0;
#define LOOKUP(sym, base, version, params)                                                       \
    if (!(api.sym = (CUresult (*) params)(uintptr_t)lookup(mode, lib, gpa, #sym, base, version))) {              \
        fprintf(stderr, "realdriver_calls: %s: %s not found\n", mode, #sym);                     \
        missing = 1;                                                                             \
    }
    CALLS(LOOKUP)
    return missing ? 2 : 0;
}

#define SHOW(name, call) printf("%s rc=%d\n", name, (int)(call))

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: realdriver_calls direct|dlsym|gpa\n");
        return 1;
    }
    int rc = load(argv[1]);
    if (rc)
        return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);

    int version = 0, count = -1;
    CUdevice dev = -1;
    CUcontext ctx = NULL;
    CUdeviceptr ptr = 0;
    size_t pitch = 0, free_bytes = 0, total_bytes = 0;

    SHOW("cuDriverGetVersion", api.cuDriverGetVersion(&version));
    printf("driver_version=%d\n", version);
    SHOW("cuDeviceGet (before cuInit)", api.cuDeviceGet(&dev, 0));
    SHOW("cuDeviceGetCount (before cuInit)", api.cuDeviceGetCount(&count));
    SHOW("cuCtxCreate_v2 (before cuInit)", api.cuCtxCreate_v2(&ctx, 0, 0));
    SHOW("cuMemAlloc_v2 (before cuInit)", api.cuMemAlloc_v2(&ptr, 1024));
    SHOW("cuInit", api.cuInit(0));
    SHOW("cuInit (again)", api.cuInit(0));
    SHOW("cuDeviceGet (after cuInit)", api.cuDeviceGet(&dev, 0));
    SHOW("cuDeviceGetCount (after cuInit)", api.cuDeviceGetCount(&count));
    SHOW("cuCtxCreate_v2 (bad device)", api.cuCtxCreate_v2(&ctx, 0, 12345));
    SHOW("cuCtxCreate_v2 (device 0)", api.cuCtxCreate_v2(&ctx, 0, 0));
    SHOW("cuCtxCreate_v3 (bad device)", api.cuCtxCreate_v3(&ctx, NULL, 0, 0, 12345));
    SHOW("cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain(&ctx, 0));
    SHOW("cuDevicePrimaryCtxRelease_v2", api.cuDevicePrimaryCtxRelease_v2(0));
    SHOW("cuDevicePrimaryCtxReset_v2", api.cuDevicePrimaryCtxReset_v2(0));
    SHOW("cuCtxSetCurrent (NULL)", api.cuCtxSetCurrent(NULL));
    SHOW("cuCtxPushCurrent_v2 (NULL)", api.cuCtxPushCurrent_v2(NULL));
    SHOW("cuCtxPopCurrent_v2", api.cuCtxPopCurrent_v2(&ctx));
    SHOW("cuCtxDestroy_v2 (NULL)", api.cuCtxDestroy_v2(NULL));
    SHOW("cuMemAlloc_v2 (no context)", api.cuMemAlloc_v2(&ptr, 1024));
    SHOW("cuMemAllocPitch_v2 (no context)", api.cuMemAllocPitch_v2(&ptr, &pitch, 256, 4, 4));
    SHOW("cuMemAllocManaged (no context)", api.cuMemAllocManaged(&ptr, 1024, CU_MEM_ATTACH_GLOBAL));
    SHOW("cuMemAllocAsync (no context)", api.cuMemAllocAsync(&ptr, 1024, NULL));
    SHOW("cuMemFree_v2 (0)", api.cuMemFree_v2(0));
    SHOW("cuMemGetInfo_v2 (no context)", api.cuMemGetInfo_v2(&free_bytes, &total_bytes));
    SHOW("cuDeviceTotalMem_v2 (device 0)", api.cuDeviceTotalMem_v2(&total_bytes, 0));
    SHOW("cuLaunchKernel (no function)", api.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CUlaunchConfig config = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                             .blockDimZ = 1};
    SHOW("cuLaunchKernelEx (no function)", api.cuLaunchKernelEx(&config, NULL, NULL, NULL));
    SHOW("cuGraphLaunch (no graph)", api.cuGraphLaunch(NULL, NULL));
    return 0;
}
