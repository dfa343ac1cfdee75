/*
 * ctx_churn: context lifetimes and context-free launches, as a tenant of
 * gpuslice on fakecuda.
 *
 *   ctx_churn --seconds S            destroy a created context, release the
 *                                    primary context to zero and reset it,
 *                                    in a loop, each after a few launches
 *   ctx_churn --cukernel --seconds S launch a CUkernel (cuLibraryGetKernel)
 *                                    on a created stream with NO current
 *                                    context, in a loop
 *
 * Prints "ctx_churn: rounds=N kernels=M" and exits 0 only if every call
 * succeeded. Run with FAKECUDA_STRICT=1 so that any use of a destroyed
 * context, stream or event (by the application or by the shim's threads)
 * aborts.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long kernels;

#define CALL(x)                                                                        \
    do {                                                                               \
        CUresult rc_ = (x);                                                            \
        if (rc_ != CUDA_SUCCESS) {                                                     \
            const char *n_ = NULL;                                                     \
            cuGetErrorName(rc_, &n_);                                                  \
            printf("ctx_churn: %s failed: %s\n", #x, n_ ? n_ : "?");                   \
            return false;                                                              \
        }                                                                              \
    } while (0)

/* A few 200 us kernels in the current context, then wait for them. */
static bool some_work(void)
{
    CUmodule mod;
    CUfunction fn;
    CUstream stream;
    uint64_t ns = 200000;
    void *params[] = {&ns};
    CALL(cuModuleLoadData(&mod, "ctx_churn"));
    CALL(cuModuleGetFunction(&fn, mod, "spin"));
    CALL(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 4; i++) {
        CALL(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, i % 2 ? stream : NULL, params, NULL));
        kernels++;
    }
    CALL(cuStreamSynchronize(stream));
    CALL(cuStreamDestroy_v2(stream));
    return true;
}

static bool churn_round(CUdevice dev)
{
    CUcontext ctx, primary, popped;
    CALL(cuCtxCreate_v2(&ctx, CU_CTX_SCHED_BLOCKING_SYNC, dev));
    if (!some_work())
        return false;
    CALL(cuCtxDestroy_v2(ctx));

    CALL(cuDevicePrimaryCtxRetain(&primary, dev));
    CALL(cuCtxPushCurrent_v2(primary));
    if (!some_work())
        return false;
    CALL(cuCtxPopCurrent_v2(&popped));
    CALL(cuDevicePrimaryCtxRelease_v2(dev)); /* the last reference: destroyed */

    CALL(cuDevicePrimaryCtxRetain(&primary, dev));
    CALL(cuCtxPushCurrent_v2(primary));
    if (!some_work())
        return false;
    CALL(cuCtxPopCurrent_v2(&popped));
    CALL(cuDevicePrimaryCtxReset_v2(dev));
    return true;
}

static bool cukernel_loop(CUdevice dev, double seconds)
{
    CUlibrary lib;
    CUkernel kernel;
    CUcontext primary, popped;
    CUstream stream;
    uint64_t ns = 1000000;
    void *params[] = {&ns};
    CALL(cuLibraryLoadData(&lib, "ctx_churn", NULL, NULL, 0, NULL, NULL, 0));
    CALL(cuLibraryGetKernel(&kernel, lib, "spin"));
    CALL(cuDevicePrimaryCtxRetain(&primary, dev));
    CALL(cuCtxPushCurrent_v2(primary));
    CALL(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CALL(cuCtxPopCurrent_v2(&popped));
    CUcontext current = (CUcontext)1;
    CALL(cuCtxGetCurrent(&current));
    if (current) {
        printf("ctx_churn: a context is still current\n");
        return false;
    }
    double until = now_s() + seconds;
    while (now_s() < until) {
        for (int i = 0; i < 8; i++) {
            CALL(cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
            kernels++;
        }
        CALL(cuStreamSynchronize(stream));
    }
    return true;
}

int main(int argc, char **argv)
{
    double seconds = 3;
    bool cukernel = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--cukernel"))
            cukernel = true;
        else {
            fprintf(stderr, "usage: ctx_churn [--cukernel] [--seconds S]\n");
            return 2;
        }
    }
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxSetFlags_v2(dev, CU_CTX_SCHED_BLOCKING_SYNC) != CUDA_SUCCESS) {
        printf("ctx_churn: cuInit failed\n");
        return 1;
    }
    long rounds = 0;
    bool ok = true;
    if (cukernel) {
        ok = cukernel_loop(dev, seconds);
        rounds = 1;
    } else {
        for (double until = now_s() + seconds; ok && now_s() < until; rounds++)
            ok = churn_round(dev);
    }
    printf("ctx_churn: rounds=%ld kernels=%ld\n", rounds, kernels);
    return ok ? 0 : 1;
}
