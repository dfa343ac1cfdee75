/*
 * shim paths test: libgpuslice.so sees every call on every path an
 * application reaches the driver by, and changes nothing else.
 *
 * Run twice by meson: with the shim preloaded and GPUSLICE_LOG=debug
 * ("--shim"), and without it. The shim's debug log (this process's stderr,
 * captured to a file) says which wrappers ran; without the shim nothing may
 * be logged and every answer must be the same. Paths:
 *   1. linked -lcuda (direct symbols)
 *   2. dlopen("libcuda.so.1") + dlsym
 *   3. cuGetProcAddress (11030 semantics)
 *   4. cuGetProcAddress_v2, legacy and per-thread default stream
 *   5. cuGetProcAddress obtained through dlsym, and through itself
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include <unistd.h>

CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*graph_launch_fn)(CUgraphExec, CUstream);

static bool with_shim;
static char log_path[] = "/tmp/gpuslice-paths-XXXXXX";
static CUfunction kernel;


/* How many times the shim logged "intercepted NAME" so far. */
static int intercepted(const char *name)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return -1;
    char line[512], want[256];
    snprintf(want, sizeof want, "intercepted %s\n", name);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "intercepted ");
        n += at && strcmp(at, want) == 0;
    }
    fclose(f);
    return n;
}

/* Checks that running `call` made the shim log NAME exactly once (or not at
 * all without the shim). */
#define EXPECT_SEEN(name, call)                                                        \
    do {                                                                               \
        int before = intercepted(name);                                                \
        CUresult rc_ = (call);                                                         \
        EXPECT(rc_ == CUDA_SUCCESS);                                                   \
        EXPECT(intercepted(name) == before + (with_shim ? 1 : 0));                     \
    } while (0)

static void *as_ptr(void (*fn)(void))
{
    void *p;
    memcpy(&p, &fn, sizeof p);
    return p;
}

static const char *object_of(void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

static CUresult launch_with(launch_fn fn)
{
    return fn(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

static CUresult alloc_free_with(alloc_fn a, free_fn f)
{
    CUdeviceptr p;
    CUresult rc = a(&p, 4096);
    return rc == CUDA_SUCCESS ? f(p) : rc;
}

static void test_direct(void)
{
    EXPECT_SEEN("cuLaunchKernel", cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CUdeviceptr p;
    EXPECT_SEEN("cuMemAlloc_v2", cuMemAlloc_v2(&p, 1024));
    EXPECT_SEEN("cuMemFree_v2", cuMemFree_v2(p));
    CUlaunchConfig config = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                             .blockDimY = 1, .blockDimZ = 1};
    EXPECT_SEEN("cuLaunchKernelEx", cuLaunchKernelEx(&config, kernel, NULL, NULL));
}

static void test_dlsym(void *lib)
{
    void *p = dlsym(lib, "cuLaunchKernel");
    EXPECT(p != NULL);
    EXPECT(strcmp(object_of(p), with_shim ? "libgpuslice.so" : "libcuda.so.1") == 0);
    EXPECT_SEEN("cuLaunchKernel", launch_with((launch_fn)(uintptr_t)p));
    p = dlsym(lib, "cuLaunchKernel_ptsz");
    EXPECT_SEEN("cuLaunchKernel_ptsz", launch_with((launch_fn)(uintptr_t)p));
    alloc_fn a = (alloc_fn)(uintptr_t)dlsym(lib, "cuMemAlloc_v2");
    free_fn f = (free_fn)(uintptr_t)dlsym(lib, "cuMemFree_v2");
    EXPECT(a && f);
    int frees = intercepted("cuMemFree_v2");
    EXPECT_SEEN("cuMemAlloc_v2", alloc_free_with(a, f));
    EXPECT(intercepted("cuMemFree_v2") == frees + (with_shim ? 1 : 0));
    /* unwrapped: the driver's own function */
    p = dlsym(lib, "cuDeviceGetName");
    EXPECT(p && strcmp(object_of(p), "libcuda.so.1") == 0);
    /* unknown: NULL with an error, as without the shim */
    dlerror();
    EXPECT(dlsym(lib, "cuNoSuchFunction") == NULL);
    EXPECT(dlerror() != NULL);
}

static void test_get_proc_address_v1(gpa_v1_fn gpa)
{
    void *p = NULL;
    int before = intercepted("cuLaunchKernel");
    EXPECT(gpa("cuLaunchKernel", &p, 11030, 0) == CUDA_SUCCESS);
    EXPECT(p && launch_with((launch_fn)(uintptr_t)p) == CUDA_SUCCESS);
    EXPECT(intercepted("cuLaunchKernel") == before + (with_shim ? 1 : 0));
    EXPECT(gpa("cuMemAlloc", &p, 11030, 0) == CUDA_SUCCESS);
    alloc_fn a = (alloc_fn)(uintptr_t)p;
    EXPECT(gpa("cuMemFree", &p, 11030, 0) == CUDA_SUCCESS);
    EXPECT_SEEN("cuMemAlloc_v2", alloc_free_with(a, (free_fn)(uintptr_t)p));
}

static void test_get_proc_address_v2(gpa_v2_fn gpa)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)-1;
    EXPECT(gpa("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status) == CUDA_SUCCESS);
    EXPECT(status == CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT_SEEN("cuLaunchKernel", launch_with((launch_fn)(uintptr_t)p));
    EXPECT(gpa("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status) ==
           CUDA_SUCCESS);
    EXPECT_SEEN("cuLaunchKernel_ptsz", launch_with((launch_fn)(uintptr_t)p));
    EXPECT(gpa("cuGraphLaunch", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status) ==
           CUDA_SUCCESS);
    graph_launch_fn graph_launch = (graph_launch_fn)(uintptr_t)p;
    CUgraph graph;
    CUgraphExec exec;
    CUgraphNode node;
    CUDA_KERNEL_NODE_PARAMS kp = {.func = kernel, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1};
    EXPECT(cuGraphCreate(&graph, 0) == CUDA_SUCCESS);
    EXPECT(cuGraphAddKernelNode(&node, graph, NULL, 0, (const CUDA_KERNEL_NODE_PARAMS_v1 *)&kp) == CUDA_SUCCESS);
    EXPECT(cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS);
    EXPECT_SEEN("cuGraphLaunch_ptsz", graph_launch(exec, NULL));
    EXPECT(gpa("cuMemAlloc", &p, 12000, 0, &status) == CUDA_SUCCESS);
    alloc_fn a = (alloc_fn)(uintptr_t)p;
    EXPECT(gpa("cuMemFree", &p, 12000, 0, &status) == CUDA_SUCCESS);
    EXPECT_SEEN("cuMemAlloc_v2", alloc_free_with(a, (free_fn)(uintptr_t)p));

    /* cuCtxCreate at 12000 is whatever the driver says (_v3 here). */
    EXPECT(gpa("cuCtxCreate", &p, 12000, 0, &status) == CUDA_SUCCESS);
    EXPECT(strcmp(object_of(p), with_shim ? "libgpuslice.so" : "libcuda.so.1") == 0);
    EXPECT(p == (with_shim ? as_ptr((void (*)(void))cuCtxCreate_v3) : p));

    /* unwrapped: the driver's pointer; unknown and too-new: the driver's
     * answer, status included */
    EXPECT(gpa("cuDeviceGetName", &p, 12000, 0, &status) == CUDA_SUCCESS);
    EXPECT(p && strcmp(object_of(p), "libcuda.so.1") == 0);
    p = (void *)1;
    EXPECT(gpa("cuNoSuchFunction", &p, 12000, 0, &status) == CUDA_ERROR_NOT_FOUND);
    EXPECT(p == NULL && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EXPECT(gpa("cuMemAllocAsync", &p, 11000, 0, &status) == CUDA_ERROR_NOT_FOUND);
    EXPECT(p == NULL && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

    /* looking up cuGetProcAddress itself returns the wrapper, which works */
    EXPECT(gpa("cuGetProcAddress", &p, 12000, 0, &status) == CUDA_SUCCESS);
    EXPECT(strcmp(object_of(p), with_shim ? "libgpuslice.so" : "libcuda.so.1") == 0);
    gpa_v2_fn again = (gpa_v2_fn)(uintptr_t)p;
    EXPECT(again("cuLaunchKernel", &p, 12000, 0, &status) == CUDA_SUCCESS);
    EXPECT_SEEN("cuLaunchKernel", launch_with((launch_fn)(uintptr_t)p));
    EXPECT(gpa("cuGetProcAddress", &p, 11030, 0, &status) == CUDA_SUCCESS);
    EXPECT(strcmp(object_of(p), with_shim ? "libgpuslice.so" : "libcuda.so.1") == 0);
}

static void test_special_handles(void)
{
    /* RTLD_NEXT from the application: what glibc would answer, twice. */
    void *m1 = dlsym(RTLD_NEXT, "malloc");
    void *m2 = dlsym(RTLD_NEXT, "malloc");
    EXPECT(m1 != NULL && m1 == m2);
    EXPECT(m1 == dlsym(RTLD_DEFAULT, "malloc"));
    void *(*my_malloc)(size_t) = (void *(*)(size_t))(uintptr_t)m1;
    void *block = my_malloc(16);
    EXPECT(block != NULL);
    free(block);
    printf("fingerprint: RTLD_NEXT malloc in %s\n", object_of(m1));
    /* RTLD_DEFAULT finds cuInit, and the shim sees the call. */
    init_fn init = (init_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "cuInit");
    EXPECT(init != NULL);
    EXPECT_SEEN("cuInit", init(0));
    init = (init_fn)(uintptr_t)dlsym(RTLD_NEXT, "cuInit");
    EXPECT(init != NULL && init(0) == CUDA_SUCCESS);
    dlerror();
    EXPECT(dlsym(RTLD_DEFAULT, "no_such_symbol_anywhere") == NULL && dlerror() != NULL);
}

int main(int argc, char **argv)
{
    with_shim = argc > 1 && strcmp(argv[1], "--shim") == 0;
    int fd = mkstemp(log_path);
    if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
        return 2;
    close(fd);

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuModuleLoadData(&mod, "image") || cuModuleGetFunction(&kernel, mod, "kernel")) {
        printf("setup failed\n");
        return 2;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("dlopen failed: %s\n", dlerror());
        return 2;
    }

    test_direct();
    test_dlsym(lib);
    test_get_proc_address_v1(cuGetProcAddress);
    test_get_proc_address_v2(cuGetProcAddress_v2);
    /* path 5: the lookup functions themselves fetched through dlsym */
    gpa_v1_fn v1 = (gpa_v1_fn)(uintptr_t)dlsym(lib, "cuGetProcAddress");
    gpa_v2_fn v2 = (gpa_v2_fn)(uintptr_t)dlsym(lib, "cuGetProcAddress_v2");
    EXPECT(v1 && v2);
    test_get_proc_address_v1(v1);
    test_get_proc_address_v2(v2);
    test_special_handles();
    EXPECT(cuCtxSynchronize() == CUDA_SUCCESS);

    if (!with_shim)
        EXPECT(intercepted("cuLaunchKernel") == 0);
    else
        EXPECT(intercepted("cuLaunchKernel") >= 5);
    unlink(log_path);
    return check_finish();
}
