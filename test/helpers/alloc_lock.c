/*
 * alloc_lock: does a thread that allocates slow down another thread's
 * launches? One thread launches an empty kernel into its stream and times
 * each cuLaunchKernel; in every other phase a second thread allocates and
 * frees 1 MiB and asks cuMemGetInfo, in a loop. Phases alternate, four of
 * each; prints "alloc_lock: max_alone_us=.. max_with_us=.. p99_alone_us=..
 * p99_with_us=.. launches=N allocations=M".
 *
 *   alloc_lock [PHASE_MS]
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "spin_kernels.h"

#define MAX_SAMPLES 2000000

static CUcontext ctx;
static _Atomic int allocating;
static _Atomic long allocations;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void *allocator(void *arg)
{
    (void)arg;
    cuCtxSetCurrent(ctx);
    while (atomic_load(&allocating)) {
        CUdeviceptr p;
        size_t free_b, total_b;
        if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS ||
            cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS) {
            fprintf(stderr, "alloc_lock: allocation failed\n");
            exit(2);
        }
        atomic_fetch_add(&allocations, 1);
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double p99(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp);
    return n ? v[n * 99 / 100] : 0;
}

static double max_of(const double *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

int main(int argc, char **argv)
{
    double phase_us = (argc > 1 ? atof(argv[1]) : 500) * 1000;
    CUdevice dev;
    CUmodule module;
    CUfunction fn;
    CUstream stream;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuModuleLoadData(&module, spin_kernels_ptx) || cuModuleGetFunction(&fn, module, "empty") ||
        cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
        fprintf(stderr, "alloc_lock: setup failed\n");
        return 2;
    }
    static double alone[MAX_SAMPLES], with[MAX_SAMPLES];
    size_t nalone = 0, nwith = 0;
    for (int phase = 0; phase < 8; phase++) {
        int busy = phase % 2;
        pthread_t thread;
        if (busy) {
            atomic_store(&allocating, 1);
            if (pthread_create(&thread, NULL, allocator, NULL) != 0)
                return 2;
        }
        double end = now_us() + phase_us;
        for (long i = 0;; i++) {
            double t0 = now_us();
            if (t0 >= end)
                break;
            if (cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL) != CUDA_SUCCESS) {
                fprintf(stderr, "alloc_lock: launch failed\n");
                return 2;
            }
            double dt = now_us() - t0;
            if (busy && nwith < MAX_SAMPLES)
                with[nwith++] = dt;
            else if (!busy && nalone < MAX_SAMPLES)
                alone[nalone++] = dt;
            if (i % 64 == 63 && cuStreamSynchronize(stream) != CUDA_SUCCESS)
                return 2;
        }
        if (busy) {
            atomic_store(&allocating, 0);
            pthread_join(thread, NULL);
        }
        cuStreamSynchronize(stream);
    }
    printf("alloc_lock: max_alone_us=%.0f max_with_us=%.0f p99_alone_us=%.2f p99_with_us=%.2f launches=%zu "
           "allocations=%ld\n", max_of(alone, nalone), max_of(with, nwith), p99(alone, nalone), p99(with, nwith),
           nalone + nwith, atomic_load(&allocations));
    return 0;
}
