/*
 * release_race: a thread releases its reference to the primary context
 * (not the last one: the context lives on) while the gpuslice drainer
 * waits on a long kernel in it, and the main thread allocates and
 * launches in the same context meanwhile. As a tenant of gpuslice on
 * fakecuda, with a memory cap below ALLOC_MB:
 *
 *   release_race ALLOC_MB
 *
 * The allocation made while the release is under way must be refused
 * (CUDA_ERROR_OUT_OF_MEMORY), as it is at any other time; the program must
 * not hang afterwards (its pool is read again, its memory freed, more
 * kernels launched). Prints "release_race: async_alloc=NAME
 * release=NAME pending=0|1 launches=N" (pending: the release was still
 * under way when the allocation was made, as the test needs) and exits 0
 * when every other call succeeded.
 */
#include <cuda.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static CUdevice dev;
static CUresult release_rc = CUDA_ERROR_UNKNOWN;
static _Atomic int released;

#define CALL(x)                                                                    \
    do {                                                                           \
        CUresult rc_ = (x);                                                        \
        if (rc_ != CUDA_SUCCESS) {                                                 \
            const char *n_ = NULL;                                                 \
            cuGetErrorName(rc_, &n_);                                              \
            fprintf(stderr, "release_race: %s: %s\n", #x, n_ ? n_ : "?");          \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *releaser(void *arg)
{
    (void)arg;
    CUcontext ctx;
    if (cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return NULL;
    usleep(100000); /* the long kernel is running and being drained */
    release_rc = cuDevicePrimaryCtxRelease(dev);
    atomic_store(&released, 1);
    return NULL;
}

static const char *name_of(CUresult rc)
{
    const char *n = NULL;
    cuGetErrorName(rc, &n);
    return n ? n : "?";
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: release_race ALLOC_MB\n");
        return 2;
    }
    unsigned long long alloc_bytes = strtoull(argv[1], NULL, 10) << 20;
    CUcontext primary;
    CUmodule mod;
    CUfunction fn;
    CUstream stream;
    CUmemoryPool pool;
    CALL(cuInit(0));
    CALL(cuDeviceGet(&dev, 0));
    CALL(cuDevicePrimaryCtxRetain(&primary, dev));
    CALL(cuCtxSetCurrent(primary));
    CALL(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CALL(cuModuleLoadData(&mod, "release_race"));
    CALL(cuModuleGetFunction(&fn, mod, "spin"));
    CALL(cuDeviceGetMemPool(&pool, dev));
    cuuint64_t keep = UINT64_MAX; /* the pool keeps what is freed, as PyTorch's does */
    CALL(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    CUdeviceptr small, big = 0;
    CALL(cuMemAllocAsync(&small, 4 << 20, stream));
    CALL(cuMemFreeAsync(small, stream));
    CALL(cuStreamSynchronize(stream));

    pthread_t thread;
    if (pthread_create(&thread, NULL, releaser, NULL) != 0)
        return 1;
    uint64_t ns = 2000000000ull; /* the release waits for the drainer, which waits for this */
    void *params[] = {&ns};
    CALL(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
    usleep(250000); /* the release waits for the drainer's round */
    int pending = !atomic_load(&released);
    CUresult alloc_rc = cuMemAllocAsync(&big, alloc_bytes, stream);
    pthread_join(thread, NULL);
    CALL(cuStreamSynchronize(stream));
    size_t free_bytes, total_bytes;
    CALL(cuMemGetInfo(&free_bytes, &total_bytes));
    if (alloc_rc == CUDA_SUCCESS) {
        CALL(cuMemFreeAsync(big, stream));
        CALL(cuStreamSynchronize(stream));
    }
    ns = 1000000;
    long launches = 0;
    for (double end = now_s() + 1.0; now_s() < end;) {
        CALL(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
        if (++launches % 8 == 0)
            CALL(cuStreamSynchronize(stream));
    }
    CALL(cuStreamSynchronize(stream));
    CALL(cuMemGetInfo(&free_bytes, &total_bytes));
    printf("release_race: async_alloc=%s release=%s pending=%d launches=%ld\n", name_of(alloc_rc),
           name_of(release_rc), pending, launches);
    return 0;
}
