/*
 * fakecuda streams, judged by time and the meter: the per-thread default
 * stream belongs to its thread, the legacy stream orders itself with the
 * blocking streams and not with non-blocking ones, copies run on a copy
 * engine beside the compute engine (and not in the compute meter), a
 * library kernel launched with no current context runs on its stream's
 * device, and the stream queries answer for it.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_util.h"
#include "fc_state.h"

CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuStreamQuery_ptsz(CUstream);
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuStreamGetCtx_ptsz(CUstream, CUcontext *);
CUresult cuCtxGetDevice_v2(CUdevice *, CUcontext);

#define EXPECT_RC(call, want) EXPECT((call) == (want))
/* Copies run at 128 MiB/s in this test: 8 MiB take 62.5 ms, which is
 * far more than moving the bytes takes, even under a sanitizer. */
#define COPY_RATE (128ull << 20)
#define COPY_BYTES (8ull << 20)
#define COPY_NS (COPY_BYTES * 1000000000ull / COPY_RATE)

static struct fc_shared *meter;
static CUcontext ctx;
static CUfunction spin;
static CUdeviceptr buffer;
static char *host;

/* ---- per-thread default streams ----------------------------------------- */

struct other_thread {
    uint64_t kernel_ns;
    pthread_barrier_t launched, checked;
    CUresult launch_rc, query_rc;
};

/* Launches a long kernel on its own per-thread stream, lets the main thread
 * look, then checks its own stream is the busy one. */
static void *busy_thread(void *arg)
{
    struct other_thread *t = arg;
    cuCtxSetCurrent(ctx);
    void *params[] = {&t->kernel_ns};
    t->launch_rc = cuLaunchKernel_ptsz(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
    t->query_rc = cuStreamQuery(CU_STREAM_PER_THREAD);
    pthread_barrier_wait(&t->launched);
    pthread_barrier_wait(&t->checked);
    return NULL;
}

static void test_per_thread_streams(void)
{
    struct other_thread t = {.kernel_ns = 600 * MS};
    pthread_barrier_init(&t.launched, NULL, 2);
    pthread_barrier_init(&t.checked, NULL, 2);
    pthread_t thread;
    pthread_create(&thread, NULL, busy_thread, &t);
    pthread_barrier_wait(&t.launched);
    uint64_t start = now_ns();

    /* Its NULL stream in _ptsz calls is its own per-thread stream. */
    EXPECT(t.launch_rc == CUDA_SUCCESS && t.query_rc == CUDA_ERROR_NOT_READY);
    /* This thread's per-thread stream is another one: idle. */
    EXPECT_RC(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    EXPECT_RC(cuStreamQuery_ptsz(NULL), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    EXPECT(now_ns() - start < 200 * MS);
    /* A copy on this thread's per-thread stream runs on the copy engine
     * meanwhile: it waits for nothing of the other thread. */
    EXPECT_RC(cuMemcpyHtoDAsync_v2_ptsz(buffer, host, COPY_BYTES, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize_ptsz(NULL), CUDA_SUCCESS);
    uint64_t copied = now_ns() - start;
    EXPECT(copied >= COPY_NS * 9 / 10 && copied < 400 * MS);
    /* The legacy stream waits for every blocking stream, the other
     * thread's per-thread stream included. */
    EXPECT_RC(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
    EXPECT_RC(cuStreamSynchronize(NULL), CUDA_SUCCESS);
    EXPECT(now_ns() - start >= 590 * MS);
    pthread_barrier_wait(&t.checked);
    pthread_join(thread, NULL);
    pthread_barrier_destroy(&t.launched);
    pthread_barrier_destroy(&t.checked);
}

/* A thread's per-thread stream outlives it until its work is done. */
static void *launch_and_exit(void *arg)
{
    CUresult *rc = arg;
    cuCtxSetCurrent(ctx);
    void *params[] = {&(uint64_t){150 * MS}};
    *rc = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, params, NULL);
    return NULL;
}

static void test_per_thread_stream_of_exited_thread(void)
{
    uint64_t kernels = atomic_load(&meter->dev[0].kernels);
    uint64_t start = now_ns();
    pthread_t thread;
    CUresult launched = CUDA_ERROR_UNKNOWN;
    pthread_create(&thread, NULL, launch_and_exit, &launched);
    pthread_join(thread, NULL);
    EXPECT(launched == CUDA_SUCCESS);
    EXPECT_RC(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT(now_ns() - start >= 140 * MS);
    EXPECT(atomic_load(&meter->dev[0].kernels) == kernels + 1);
}

/* ---- legacy and blocking streams ---------------------------------------- */

/* How long a copy queued on `after` takes to complete when a 300 ms kernel
 * was queued on `before` just ahead of it. */
static uint64_t copy_behind_kernel(CUstream before, CUstream after)
{
    uint64_t start = now_ns();
    EXPECT_RC(launch_spin(spin, before, 300 * MS), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpyHtoDAsync_v2(buffer, host, 4096, after), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(after), CUDA_SUCCESS);
    uint64_t elapsed = now_ns() - start;
    EXPECT_RC(cuCtxSynchronize(), CUDA_SUCCESS);
    return elapsed;
}

static void test_legacy_stream_ordering(void)
{
    CUstream blocking, nonblocking;
    EXPECT_RC(cuStreamCreate(&blocking, 0), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    /* The legacy stream waits for prior work of blocking streams... */
    EXPECT(copy_behind_kernel(blocking, CU_STREAM_LEGACY) >= 290 * MS);
    /* ...and blocking streams wait for prior legacy work... */
    EXPECT(copy_behind_kernel(NULL, blocking) >= 290 * MS);
    /* ...but non-blocking streams do neither. */
    EXPECT(copy_behind_kernel(nonblocking, CU_STREAM_LEGACY) < 200 * MS);
    EXPECT(copy_behind_kernel(CU_STREAM_LEGACY, nonblocking) < 200 * MS);
    /* Two created streams never wait for each other. */
    EXPECT(copy_behind_kernel(blocking, nonblocking) < 200 * MS);
    unsigned flags = 99;
    EXPECT_RC(cuStreamGetFlags(nonblocking, &flags), CUDA_SUCCESS);
    EXPECT(flags == CU_STREAM_NON_BLOCKING);
    EXPECT_RC(cuStreamGetFlags(blocking, &flags), CUDA_SUCCESS);
    EXPECT(flags == 0);
    unsigned long long a = 0, b = 0;
    EXPECT_RC(cuStreamGetId(blocking, &a), CUDA_SUCCESS);
    EXPECT_RC(cuStreamGetId(nonblocking, &b), CUDA_SUCCESS);
    EXPECT(a != 0 && b != 0 && a != b);
    EXPECT_RC(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(nonblocking), CUDA_SUCCESS);
}

/* ---- the copy engine ----------------------------------------------------- */

static void test_copy_engine(void)
{
    CUstream compute, copy;
    EXPECT_RC(cuStreamCreate(&compute, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(&copy, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    uint64_t busy = atomic_load(&meter->dev[0].busy_ns);
    uint64_t copy_busy = atomic_load(&meter->dev[0].copy_busy_ns);
    uint64_t copies = atomic_load(&meter->dev[0].copies);

    /* A copy and a kernel on different streams overlap. */
    uint64_t start = now_ns();
    EXPECT_RC(launch_spin(spin, compute, 4 * COPY_NS), CUDA_SUCCESS);
    for (int i = 0; i < 4; i++)
        EXPECT_RC(cuMemcpyHtoDAsync_v2(buffer, host, COPY_BYTES, copy), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(copy), CUDA_SUCCESS);
    uint64_t copies_done = now_ns() - start;
    EXPECT_RC(cuStreamSynchronize(compute), CUDA_SUCCESS);
    uint64_t both_done = now_ns() - start;
    EXPECT(copies_done >= 4 * COPY_NS * 9 / 10);

    /* The compute meter counts the kernel, the copy meter the copies (a
     * loaded machine may stretch either, never to twice its length). */
    uint64_t kernel_busy = atomic_load(&meter->dev[0].busy_ns) - busy;
    uint64_t copied = atomic_load(&meter->dev[0].copy_busy_ns) - copy_busy;
    EXPECT(kernel_busy >= 4 * COPY_NS && kernel_busy < 4 * COPY_NS * 3 / 2);
    EXPECT(copied >= 4 * COPY_NS * 9 / 10 && copied < 4 * COPY_NS * 3 / 2);
    /* They overlapped: both were done sooner than the two engines' busy
     * times one after the other, however long each took. */
    EXPECT(both_done < (kernel_busy + copied) * 9 / 10);
    EXPECT(atomic_load(&meter->dev[0].copies) - copies == 4);

    /* In one stream a kernel waits for the copy before it. */
    start = now_ns();
    EXPECT_RC(cuMemcpyHtoDAsync_v2(buffer, host, COPY_BYTES, compute), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, compute, COPY_NS), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(compute), CUDA_SUCCESS);
    EXPECT(now_ns() - start >= 2 * COPY_NS * 9 / 10);

    /* Synchronous copies and sets take their time too, and move data. */
    start = now_ns();
    EXPECT_RC(cuMemcpyHtoD_v2(buffer, host, COPY_BYTES), CUDA_SUCCESS);
    EXPECT(now_ns() - start >= COPY_NS * 9 / 10);
    start = now_ns();
    EXPECT_RC(cuMemsetD32_v2(buffer, 0x5a5a5a5a, COPY_BYTES / 4), CUDA_SUCCESS);
    EXPECT(now_ns() - start >= COPY_NS * 9 / 10);
    uint32_t word = 0;
    EXPECT_RC(cuMemcpyDtoH_v2(&word, buffer + COPY_BYTES - 4, 4), CUDA_SUCCESS);
    EXPECT(word == 0x5a5a5a5a);
    EXPECT_RC(cuMemcpyAsync((CUdeviceptr)(uintptr_t)host, buffer, 8, copy), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpy(buffer, (CUdeviceptr)(uintptr_t)host, 8), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(copy), CUDA_SUCCESS);
    EXPECT((unsigned char)host[0] == 0x5a);
    EXPECT_RC(cuStreamDestroy_v2(compute), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(copy), CUDA_SUCCESS);
}

/* ---- waits across contexts ----------------------------------------------- */

/* A stream of another context that only waits and records, with nothing
 * for its own workers to run, still moves on when the event comes. */
static void test_wait_across_contexts(void)
{
    CUcontext other;
    CUstream here, there;
    CUevent kernel_done, waited;
    EXPECT_RC(cuStreamCreate(&here, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&kernel_done, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    EXPECT_RC(cuCtxCreate_v2(&other, CU_CTX_SCHED_BLOCKING_SYNC, 1), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(&there, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&waited, 0), CUDA_SUCCESS);
    EXPECT_RC(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);

    uint64_t start = now_ns();
    EXPECT_RC(launch_spin(spin, here, 100 * MS), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(kernel_done, here), CUDA_SUCCESS);
    EXPECT_RC(cuStreamWaitEvent(there, kernel_done, 0), CUDA_SUCCESS);
    EXPECT_RC(cuCtxPushCurrent_v2(other), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(waited, there), CUDA_SUCCESS);
    EXPECT_RC(cuEventQuery(waited), CUDA_ERROR_NOT_READY);
    EXPECT_RC(cuEventSynchronize(waited), CUDA_SUCCESS);
    EXPECT(now_ns() - start >= 95 * MS);
    EXPECT_RC(cuStreamQuery(there), CUDA_SUCCESS);
    EXPECT_RC(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
    EXPECT_RC(cuCtxDestroy_v2(other), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(kernel_done), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(here), CUDA_SUCCESS);
}

/* ---- CUkernel with no current context ------------------------------------- */

static void test_kernel_without_context(void)
{
    CUcontext other;
    CUstream stream;
    CUlibrary lib;
    CUkernel kernel;
    CUfunction function;
    EXPECT_RC(cuCtxCreate_v2(&other, 0, 1), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
    EXPECT_RC(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
    EXPECT_RC(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS); /* the primary context too */
    CUcontext current = (CUcontext)1;
    EXPECT_RC(cuCtxGetCurrent(&current), CUDA_SUCCESS);
    EXPECT(current == NULL);

    EXPECT_RC(cuLibraryLoadData(&lib, "library image", NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
    EXPECT_RC(cuLibraryGetKernel(&kernel, lib, "spin_lib"), CUDA_SUCCESS);
    EXPECT_RC(cuKernelGetFunction(&function, kernel), CUDA_ERROR_INVALID_CONTEXT);
    uint64_t busy0 = atomic_load(&meter->dev[0].busy_ns), busy1 = atomic_load(&meter->dev[1].busy_ns);
    uint64_t ns = 50 * MS;
    void *params[] = {&ns};
    /* The stream's context runs it: device 1. */
    EXPECT_RC(cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(stream), CUDA_SUCCESS);
    EXPECT(atomic_load(&meter->dev[1].busy_ns) - busy1 >= ns);
    EXPECT(atomic_load(&meter->dev[0].busy_ns) == busy0);
    /* The NULL and special streams need a current context. */
    EXPECT_RC(cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
              CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, params, NULL),
              CUDA_ERROR_INVALID_CONTEXT);
    CUcontext owner = NULL;
    CUdevice device = -1;
    EXPECT_RC(cuStreamGetCtx(stream, &owner), CUDA_SUCCESS);
    EXPECT(owner == other);
    EXPECT_RC(cuStreamGetDevice(stream, &device), CUDA_SUCCESS);
    EXPECT(device == 1);
    EXPECT_RC(cuStreamGetCtx(NULL, &owner), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuStreamGetCtx_ptsz(NULL, &owner), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuCtxGetDevice_v2(&device, ctx), CUDA_SUCCESS);
    EXPECT(device == 0);
    EXPECT_RC(cuCtxGetDevice_v2(&device, NULL), CUDA_ERROR_INVALID_CONTEXT);

    EXPECT_RC(cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
    EXPECT_RC(cuKernelGetFunction(&function, kernel), CUDA_SUCCESS);
    EXPECT_RC(cuStreamGetCtx(NULL, &owner), CUDA_SUCCESS);
    EXPECT(owner == ctx);
    EXPECT_RC(cuStreamGetDevice(CU_STREAM_PER_THREAD, &device), CUDA_SUCCESS);
    EXPECT(device == 0);
    EXPECT_RC(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
    EXPECT_RC(cuCtxDestroy_v2(other), CUDA_SUCCESS);
    EXPECT_RC(cuLibraryUnload(lib), CUDA_SUCCESS);
}

int main(void)
{
    const char *path = use_fresh_state("2", "1G");
    setenv("FAKECUDA_COPY_BYTES_PER_S", "128M", 1);
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 2;
    char err[256];
    meter = fc_state_open(path, 2, 1ull << 30, err, sizeof err);
    spin = spin_function();
    host = calloc(1, COPY_BYTES);
    if (!meter || !spin || !host || cuMemAlloc_v2(&buffer, COPY_BYTES) != CUDA_SUCCESS)
        return 2;
    /* Fault every page in now, so that no timed copy pays for it. */
    memset(host, 1, COPY_BYTES);
    if (cuMemcpyHtoD_v2(buffer, host, COPY_BYTES) != CUDA_SUCCESS)
        return 2;

    test_per_thread_streams();
    test_per_thread_stream_of_exited_thread();
    test_legacy_stream_ordering();
    test_copy_engine();
    test_wait_across_contexts();
    test_kernel_without_context();

    cuMemFree_v2(buffer);
    free(host);
    unlink(path);
    return check_finish();
}
