/*
 * fakecuda API test: the simulated driver answers like a real one, error
 * codes included. Run with LD_LIBRARY_PATH pointing at fakecuda.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include <sys/wait.h>
#include <unistd.h>

CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void *, size_t);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                 const CUDA_KERNEL_NODE_PARAMS *);


#define EXPECT_RC(call, want) EXPECT((call) == (want))

typedef void (*entry_fn)(void);

static entry_fn lookup(const char *name, int version, cuuint64_t flags, CUresult *rc,
                       CUdriverProcAddressQueryResult *status)
{
    void *p = (void *)1;
    *rc = cuGetProcAddress_v2(name, &p, version, flags, status);
    entry_fn f;
    memcpy(&f, &p, sizeof f);
    return f;
}

static void test_before_init(void)
{
    CUdevice dev;
    int count, version = 0;
    CUcontext ctx;
    EXPECT_RC(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_RC(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_RC(cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_RC(cuDriverGetVersion(&version), CUDA_SUCCESS);
    EXPECT(version == 13000);
    EXPECT_RC(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

static void test_proc_address(void)
{
    CUresult rc;
    CUdriverProcAddressQueryResult status;
    EXPECT(lookup("cuMemAlloc", 12000, 0, &rc, &status) == (entry_fn)cuMemAlloc_v2);
    EXPECT(rc == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT(lookup("cuCtxCreate", 12000, 0, &rc, &status) == (entry_fn)cuCtxCreate_v3);
    EXPECT(lookup("cuCtxCreate", 13000, 0, &rc, &status) == (entry_fn)cuCtxCreate_v4);
    EXPECT(lookup("cuCtxCreate", 3020, 0, &rc, &status) == (entry_fn)cuCtxCreate_v2);
    EXPECT(lookup("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &rc, &status) ==
           (entry_fn)cuLaunchKernel_ptsz);
    EXPECT(lookup("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &rc, &status) ==
           (entry_fn)cuLaunchKernel);
    EXPECT(lookup("cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &rc, &status) ==
           (entry_fn)cuMemcpyHtoD_v2_ptds);
    /* no per-thread twin: the legacy one */
    EXPECT(lookup("cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &rc, &status) ==
           (entry_fn)cuMemAlloc_v2);
    EXPECT(lookup("cuNoSuchFunction", 12000, 0, &rc, &status) == NULL);
    EXPECT(rc == CUDA_ERROR_NOT_FOUND && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EXPECT(lookup("cuMemAllocAsync", 11000, 0, &rc, &status) == NULL);
    EXPECT(rc == CUDA_ERROR_NOT_FOUND && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    EXPECT(lookup("cuMemAlloc_v2", 12000, 0, &rc, &status) == NULL);
    EXPECT_RC(cuGetProcAddress_v2(NULL, NULL, 12000, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    void *p;
    EXPECT_RC(cuGetProcAddress("cuInit", &p, 11030, 0), CUDA_SUCCESS);
    EXPECT(p == (void *)(uintptr_t)cuInit);
    const char *name = NULL;
    EXPECT_RC(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name), CUDA_SUCCESS);
    EXPECT(name && strcmp(name, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    EXPECT_RC(cuGetErrorName((CUresult)12345, &name), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &name), CUDA_SUCCESS);
}

static void test_devices(void)
{
    int count = 0, value = 0;
    CUdevice dev;
    char name[64];
    CUuuid a, b;
    EXPECT_RC(cuInit(0), CUDA_SUCCESS);
    EXPECT_RC(cuDeviceGetCount(&count), CUDA_SUCCESS);
    EXPECT(count == 2);
    EXPECT_RC(cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_RC(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    EXPECT_RC(cuDeviceGetName(name, sizeof name, dev), CUDA_SUCCESS);
    EXPECT_RC(cuDeviceGetName(NULL, 10, dev), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), CUDA_SUCCESS);
    EXPECT(value == 9);
    EXPECT_RC(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 7), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_RC(cuDeviceGetUuid(&a, 0), CUDA_SUCCESS);
    EXPECT_RC(cuDeviceGetUuid(&b, 1), CUDA_SUCCESS);
    EXPECT(memcmp(a.bytes, b.bytes, 16) != 0);
    EXPECT_RC(cuDeviceGetUuid(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuDeviceGetPCIBusId(name, sizeof name, 0), CUDA_SUCCESS);
    size_t total = 0;
    EXPECT_RC(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
    EXPECT(total == (256ull << 20));
}

/* Every attribute of cuda.h answers, as an H100 SXM would; none that a
 * library divides by is zero. */
static void test_attributes(void)
{
    int value, failures = 0;
    for (int a = 1; a < (int)CU_DEVICE_ATTRIBUTE_MAX; a++) {
        value = -12345;
        if (cuDeviceGetAttribute(&value, (CUdevice_attribute)a, 0) != CUDA_SUCCESS || value == -12345) {
            printf("attribute %d does not answer\n", a);
            failures++;
        }
    }
    EXPECT(failures == 0);
    EXPECT_RC(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuDeviceGetAttribute(&value, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
    static const CUdevice_attribute divisors[] = {
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
        CU_DEVICE_ATTRIBUTE_WARP_SIZE, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
        CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH,
        CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
        CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
        CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, CU_DEVICE_ATTRIBUTE_MAX_PITCH,
    };
    for (size_t i = 0; i < sizeof divisors / sizeof divisors[0]; i++) {
        value = 0;
        EXPECT_RC(cuDeviceGetAttribute(&value, divisors[i], 0), CUDA_SUCCESS);
        if (value <= 0)
            printf("attribute %d is %d\n", (int)divisors[i], value);
        EXPECT(value > 0);
    }
    struct { CUdevice_attribute attribute; int h100; } figures[] = {
        {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
        {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
        {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 52428800},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
        {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
        {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    };
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++) {
        EXPECT_RC(cuDeviceGetAttribute(&value, figures[i].attribute, 0), CUDA_SUCCESS);
        EXPECT(value == figures[i].h100);
    }
    EXPECT_RC(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1), CUDA_SUCCESS);
    int bus0;
    EXPECT_RC(cuDeviceGetAttribute(&bus0, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0), CUDA_SUCCESS);
    EXPECT(value == bus0 + 1);
    char name[128];
    EXPECT_RC(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
    EXPECT(strstr(name, "H100") != NULL);
}

static void test_contexts(void)
{
    CUcontext ctx = NULL, other, cur;
    CUdeviceptr p;
    EXPECT_RC(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    EXPECT(cur == NULL);
    EXPECT_RC(cuCtxGetCurrent(NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuCtxSetCurrent((CUcontext)(uintptr_t)0xdeadbeef), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    EXPECT_RC(cuDevicePrimaryCtxRetain(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    EXPECT_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    EXPECT(cur == ctx);
    EXPECT_RC(cuCtxCreate_v2(&other, 0, 1), CUDA_SUCCESS);
    CUdevice dev = -1;
    EXPECT_RC(cuCtxGetDevice(&dev), CUDA_SUCCESS);
    EXPECT(dev == 1);
    EXPECT_RC(cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    EXPECT(cur == other);
    EXPECT_RC(cuCtxPushCurrent_v2(other), CUDA_SUCCESS);
    EXPECT_RC(cuCtxDestroy_v2(other), CUDA_SUCCESS);
    EXPECT_RC(cuCtxDestroy_v2(other), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    EXPECT(cur == ctx);
    CUcontext v4;
    EXPECT_RC(cuCtxCreate_v4(&v4, NULL, 0, 0), CUDA_SUCCESS);
    EXPECT_RC(cuCtxDestroy_v2(v4), CUDA_SUCCESS);
    unsigned flags;
    int active;
    EXPECT_RC(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
    EXPECT(active == 1);
}

static void test_launches(void)
{
    CUmodule mod;
    CUfunction spin, other;
    CUstream stream;
    CUevent start, end;
    EXPECT_RC(cuModuleLoadData(&mod, "any image"), CUDA_SUCCESS);
    EXPECT_RC(cuModuleLoadData(&mod, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuModuleGetFunction(&spin, mod, "spin"), CUDA_SUCCESS);
    EXPECT_RC(cuModuleGetFunction(&other, mod, "whatever"), CUDA_SUCCESS);
    EXPECT_RC(cuModuleGetFunction(&other, (CUmodule)(uintptr_t)42, "x"), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuEventCreate(&start, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&end, 0), CUDA_SUCCESS);
    uint64_t ns = 20 * 1000 * 1000;
    void *params[] = {&ns};
    EXPECT_RC(cuEventRecord(start, stream), CUDA_SUCCESS);
    EXPECT_RC(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(end, stream), CUDA_SUCCESS);
    EXPECT_RC(cuStreamQuery(stream), CUDA_ERROR_NOT_READY);
    EXPECT_RC(cuEventQuery(end), CUDA_ERROR_NOT_READY);
    float ms = 0;
    EXPECT_RC(cuEventElapsedTime(&ms, start, end), CUDA_ERROR_NOT_READY);
    EXPECT_RC(cuStreamSynchronize(stream), CUDA_SUCCESS);
    EXPECT_RC(cuEventQuery(end), CUDA_SUCCESS);
    EXPECT_RC(cuEventElapsedTime(&ms, start, end), CUDA_SUCCESS);
    EXPECT(ms >= 19.5f && ms < 200.0f);
    EXPECT_RC(cuLaunchKernel((CUfunction)(uintptr_t)7, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL),
              CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, (CUstream)(uintptr_t)0x1234567, params, NULL),
              CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuLaunchKernel(spin, 0, 1, 1, 1, 1, 1, 0, stream, params, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuLaunchKernel_ptsz(other, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
    CUlaunchConfig config = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                             .blockDimY = 1, .blockDimZ = 1, .hStream = stream};
    EXPECT_RC(cuLaunchKernelEx(&config, spin, params, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuLaunchCooperativeKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params), CUDA_SUCCESS);
    EXPECT_RC(cuEventSynchronize(end), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord((CUevent)(uintptr_t)99, stream), CUDA_ERROR_INVALID_HANDLE);

    /* graphs */
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
    EXPECT_RC(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
    CUDA_KERNEL_NODE_PARAMS kp = {.func = spin, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1, .kernelParams = params};
    ns = 1000000;
    EXPECT_RC(cuGraphAddKernelNode_v2(&node, graph, NULL, 0, &kp), CUDA_SUCCESS);
    EXPECT_RC(cuGraphAddKernelNode_v2(&node, graph, &node, 1, &kp), CUDA_SUCCESS);
    EXPECT_RC(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(start, stream), CUDA_SUCCESS);
    EXPECT_RC(cuGraphLaunch(exec, stream), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(end, stream), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(stream), CUDA_SUCCESS);
    EXPECT_RC(cuEventElapsedTime(&ms, start, end), CUDA_SUCCESS);
    EXPECT(ms >= 1.9f);
    EXPECT_RC(cuGraphLaunch((CUgraphExec)(uintptr_t)5, stream), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    EXPECT_RC(cuGraphDestroy(graph), CUDA_SUCCESS);

    EXPECT_RC(cuEventDestroy_v2(start), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(start), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuEventDestroy_v2(end), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(stream), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuCtxSynchronize(), CUDA_SUCCESS);
}

static void test_memory(void)
{
    size_t free_b, total_b;
    CUdeviceptr a, b;
    EXPECT_RC(cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    EXPECT(total_b == (256ull << 20) && free_b == total_b);
    EXPECT_RC(cuMemAlloc_v2(&a, 100ull << 20), CUDA_SUCCESS);
    EXPECT_RC(cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    EXPECT(free_b == total_b - (100ull << 20));
    EXPECT_RC(cuMemAlloc_v2(&b, 200ull << 20), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_RC(cuMemAlloc_v2(&b, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemAlloc_v2(&b, 1 << 20), CUDA_SUCCESS);

    char src[64], dst[64];
    for (int i = 0; i < 64; i++)
        src[i] = (char)i;
    EXPECT_RC(cuMemcpyHtoD_v2(a, src, sizeof src), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpyDtoD_v2(b, a, sizeof src), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpyDtoH_v2(dst, b, sizeof dst), CUDA_SUCCESS);
    EXPECT(memcmp(src, dst, sizeof src) == 0);
    EXPECT_RC(cuMemsetD32_v2(b, 0x01020304, 4), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpyDtoHAsync_v2(dst, b, 16, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuCtxSynchronize(), CUDA_SUCCESS);
    uint32_t word;
    memcpy(&word, dst + 12, 4);
    EXPECT(word == 0x01020304);
    EXPECT_RC(cuMemsetD8_v2(b, 0xab, 3), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpyDtoH_v2(dst, b, 4), CUDA_SUCCESS);
    EXPECT((unsigned char)dst[2] == 0xab && dst[3] == 0x01);
    EXPECT_RC(cuMemcpyHtoD_v2_ptds(b, src, 8), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpyHtoD_v2((CUdeviceptr)0x1000, src, 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemcpyHtoD_v2(b + (1 << 20) - 4, src, 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemFree_v2(b), CUDA_SUCCESS);
    EXPECT_RC(cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemFree_v2(a + 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemFree_v2(a), CUDA_SUCCESS);

    /* every other allocation path counts against the device */
    size_t pitch = 0;
    EXPECT_RC(cuMemAllocPitch_v2(&a, &pitch, 1000, 100, 4), CUDA_SUCCESS);
    EXPECT(pitch == 1024);
    EXPECT_RC(cuMemAllocPitch_v2(&b, &pitch, 1000, 100, 3), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    EXPECT(total_b - free_b == 1024 * 100);
    EXPECT_RC(cuMemFree_v2(a), CUDA_SUCCESS);
    EXPECT_RC(cuMemAllocManaged(&a, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuMemAllocAsync(&b, 8192, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    EXPECT(total_b - free_b == 4096 + 8192);
    EXPECT_RC(cuMemFreeAsync(b, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuMemFree_v2(a), CUDA_SUCCESS);
    CUmemoryPool pool;
    EXPECT_RC(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
    EXPECT_RC(cuMemAllocFromPoolAsync(&a, 1 << 16, pool, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    EXPECT(total_b - free_b == 1 << 16);
    EXPECT_RC(cuMemFreeAsync(a, NULL), CUDA_SUCCESS);

    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0;
    EXPECT_RC(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
    CUmemGenericAllocationHandle h;
    EXPECT_RC(cuMemCreate(&h, gran * 2, &prop, 0), CUDA_SUCCESS);
    EXPECT_RC(cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    EXPECT(total_b - free_b == gran * 2);
    CUdeviceptr va;
    EXPECT_RC(cuMemAddressReserve(&va, gran * 2, 0, 0, 0), CUDA_SUCCESS);
    EXPECT_RC(cuMemMap(va, gran * 2, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EXPECT_RC(cuMemSetAccess(va, gran * 2, &access, 1), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpyHtoD_v2(va, src, sizeof src), CUDA_SUCCESS);
    EXPECT_RC(cuMemUnmap(va, gran * 2), CUDA_SUCCESS);
    EXPECT_RC(cuMemAddressFree(va, gran * 2), CUDA_SUCCESS);
    EXPECT_RC(cuMemRelease(h), CUDA_SUCCESS);
    EXPECT_RC(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);

    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR desc = {.Width = 64, .Height = 32, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    EXPECT_RC(cuArrayCreate_v2(&arr, &desc), CUDA_SUCCESS);
    EXPECT_RC(cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    EXPECT(total_b - free_b == 64 * 32 * 16);
    EXPECT_RC(cuArrayDestroy(arr), CUDA_SUCCESS);
    EXPECT_RC(cuArrayDestroy(arr), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuMemGetInfo_v2(&free_b, &total_b), CUDA_SUCCESS);
    EXPECT(free_b == total_b);
}

static void test_fork_child(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        CUdevice dev;
        CUcontext ctx;
        CUmodule mod;
        CUfunction f;
        int ok = cuDeviceGet(&dev, 0) == CUDA_ERROR_NOT_INITIALIZED && cuInit(0) == CUDA_SUCCESS &&
                 cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
                 cuModuleLoadData(&mod, "x") == CUDA_SUCCESS &&
                 cuModuleGetFunction(&f, mod, "k") == CUDA_SUCCESS &&
                 cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS &&
                 cuCtxSynchronize() == CUDA_SUCCESS;
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
    char path[] = "/tmp/fakecuda-api-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 2;
    close(fd);
    unlink(path); /* fakecuda creates and sizes it */
    setenv("FAKECUDA_STATE", path, 1);
    setenv("FAKECUDA_DEVICES", "2", 1);
    setenv("FAKECUDA_MEMORY", "256M", 1);

    test_before_init();
    test_proc_address();
    test_devices();
    test_attributes();
    test_contexts();
    test_launches();
    test_memory();
    test_fork_child();
    unlink(path);
    return check_finish();
}
