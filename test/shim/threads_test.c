/*
 * shim threads test: 8 threads hit a cold libgpuslice.so at the same
 * moment, each through a different path (direct symbols, dlsym,
 * cuGetProcAddress_v2), launching and allocating. Nothing may fail, race
 * (run under ThreadSanitizer in CI) or deadlock (the test's timeout).
 * Then a forked child initialises CUDA and launches.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

#define THREADS 8
#define LAUNCHES 200
#define ALLOCS 50

struct api {
    CUresult (*init)(unsigned int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       CUstream, void **, void **);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
};

static pthread_barrier_t start_line;
static atomic_int failures;

static void *fetch_dlsym(void *lib, const char *name)
{
    return dlsym(lib, name);
}

static void *fetch_gpa(const char *base)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult status;
    return cuGetProcAddress_v2(base, &p, 12000, 0, &status) == CUDA_SUCCESS ? p : NULL;
}

#define ASSIGN(field, ptr) memcpy(&api.field, &(void *){ptr}, sizeof(void *))

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    struct api api = {cuInit, cuDevicePrimaryCtxRetain, cuLaunchKernel, cuMemAlloc_v2, cuMemFree_v2};
    pthread_barrier_wait(&start_line);
    if (id % 3 == 1) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW);
        ASSIGN(init, fetch_dlsym(lib, "cuInit"));
        ASSIGN(retain, fetch_dlsym(lib, "cuDevicePrimaryCtxRetain"));
        ASSIGN(launch, fetch_dlsym(lib, "cuLaunchKernel"));
        ASSIGN(alloc, fetch_dlsym(lib, "cuMemAlloc_v2"));
        ASSIGN(free, fetch_dlsym(lib, "cuMemFree_v2"));
    } else if (id % 3 == 2) {
        ASSIGN(init, fetch_gpa("cuInit"));
        ASSIGN(retain, fetch_gpa("cuDevicePrimaryCtxRetain"));
        ASSIGN(launch, fetch_gpa("cuLaunchKernel"));
        ASSIGN(alloc, fetch_gpa("cuMemAlloc"));
        ASSIGN(free, fetch_gpa("cuMemFree"));
    }
    if (!api.init || !api.retain || !api.launch || !api.alloc || !api.free) {
        atomic_fetch_add(&failures, 1);
        printf("thread %d: lookup failed\n", id);
        return NULL;
    }
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    if (api.init(0) || api.retain(&ctx, 0) || cuCtxSetCurrent(ctx) || cuModuleLoadData(&mod, "x") ||
        cuModuleGetFunction(&fn, mod, "kernel")) {
        atomic_fetch_add(&failures, 1);
        printf("thread %d: setup failed\n", id);
        return NULL;
    }
    for (int i = 0; i < LAUNCHES; i++) {
        if (api.launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
            atomic_fetch_add(&failures, 1);
        if (i < ALLOCS) {
            CUdeviceptr p;
            if (api.alloc(&p, 1 << 16) != CUDA_SUCCESS || api.free(p) != CUDA_SUCCESS)
                atomic_fetch_add(&failures, 1);
        }
    }
    if (cuCtxSynchronize() != CUDA_SUCCESS)
        atomic_fetch_add(&failures, 1);
    return NULL;
}

int main(void)
{
    pthread_t threads[THREADS];
    pthread_barrier_init(&start_line, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    int passed = 0, failed = 0;
    if (atomic_load(&failures) == 0)
        passed++;
    else
        failed++, printf("FAILED: %d calls failed in the threads\n", atomic_load(&failures));

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        CUcontext ctx;
        CUmodule mod;
        CUfunction fn;
        int ok = cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS &&
                 cuCtxSetCurrent(ctx) == CUDA_SUCCESS && cuModuleLoadData(&mod, "x") == CUDA_SUCCESS &&
                 cuModuleGetFunction(&fn, mod, "k") == CUDA_SUCCESS &&
                 cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS &&
                 cuCtxSynchronize() == CUDA_SUCCESS;
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        passed++;
    else
        failed++, printf("FAILED: the forked child could not launch (status %d)\n", status);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
