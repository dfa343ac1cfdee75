/*
 * capture_app: graph capture and graph replay the way PyTorch and vLLM do
 * them, as a tenant of gpuslice on fakecuda.
 *
 * Thread A begins a capture (global, thread-local or relaxed mode) on a
 * created stream or on its per-thread default stream, pushes --launches
 * kernels into it (pausing now and then, so that the capture spans several
 * slices), ends the capture, instantiates the graph and replays it for
 * --replay-seconds. With --background-launches, thread B meanwhile
 * launches 1 ms kernels on a stream of its own, as another thread of a
 * serving process would. --graph-kernels K --kernel-us U makes each
 * captured kernel a spin of U us instead, so the graph runs K x U us.
 *
 *   capture_app [--launches N] [--mode global|thread_local|relaxed]
 *               [--stream created|ptds] [--background-launches]
 *               [--graph-kernels K --kernel-us U] [--replay-seconds S]
 *
 * Prints one line:
 *   capture_app: end_capture=CUDA_SUCCESS instantiate=CUDA_SUCCESS
 *                graph_launches=N graph_us=X background_kernels=M
 * and exits 0 only if every call succeeded.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long launches = 20000, graph_kernels = 0, kernel_us = 1000;
static double replay_seconds = 2;
static CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static bool use_ptds, background;
static CUcontext ctx;
static CUfunction spin_fn, empty_fn;
static _Atomic bool capture_done;
static _Atomic long background_kernels;
static _Atomic CUresult background_error;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *name_of(CUresult rc)
{
    const char *name = NULL;
    cuGetErrorName(rc, &name);
    return name ? name : "unknown";
}

static void *background_main(void *arg)
{
    (void)arg;
    CUstream stream;
    CUresult rc = cuCtxSetCurrent(ctx);
    if (rc == CUDA_SUCCESS)
        rc = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    uint64_t ns = 1000000;
    void *params[] = {&ns};
    while (rc == CUDA_SUCCESS && !atomic_load(&capture_done)) {
        rc = cuLaunchKernel(spin_fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL);
        if (rc == CUDA_SUCCESS)
            atomic_fetch_add(&background_kernels, 1);
    }
    atomic_store(&background_error, rc);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: capture_app [--launches N] [--mode global|thread_local|relaxed] "
                    "[--stream created|ptds] [--background-launches] [--graph-kernels K --kernel-us U] "
                    "[--replay-seconds S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--launches") && v) launches = atol(argv[++i]);
        else if (!strcmp(a, "--graph-kernels") && v) graph_kernels = atol(argv[++i]);
        else if (!strcmp(a, "--kernel-us") && v) kernel_us = atol(argv[++i]);
        else if (!strcmp(a, "--replay-seconds") && v) replay_seconds = atof(argv[++i]);
        else if (!strcmp(a, "--background-launches")) background = true;
        else if (!strcmp(a, "--stream") && v) {
            const char *s = argv[++i];
            if (!strcmp(s, "ptds")) use_ptds = true;
            else if (strcmp(s, "created")) usage();
        } else if (!strcmp(a, "--mode") && v) {
            const char *m = argv[++i];
            if (!strcmp(m, "global")) mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
            else if (!strcmp(m, "thread_local")) mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
            else if (!strcmp(m, "relaxed")) mode = CU_STREAM_CAPTURE_MODE_RELAXED;
            else usage();
        } else usage();
    }
    CUdevice dev;
    CUmodule mod;
    CUresult rc;
    /* Blocking waits: the process's own synchronization must not starve
     * the threads whose timing the tests measure. */
    if ((rc = cuInit(0)) || (rc = cuDeviceGet(&dev, 0)) ||
        (rc = cuDevicePrimaryCtxSetFlags_v2(dev, CU_CTX_SCHED_BLOCKING_SYNC)) ||
        (rc = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
        (rc = cuCtxSetCurrent(ctx)) || (rc = cuModuleLoadData(&mod, "capture_app")) ||
        (rc = cuModuleGetFunction(&spin_fn, mod, "spin")) || (rc = cuModuleGetFunction(&empty_fn, mod, "empty"))) {
        printf("capture_app: setup failed: %s\n", name_of(rc));
        return 1;
    }
    pthread_t helper;
    if (background && pthread_create(&helper, NULL, background_main, NULL) != 0) {
        printf("capture_app: cannot start the background thread\n");
        return 1;
    }
    /* Let the background thread get going, so that the capture begins
     * while slices come and go. */
    if (background)
        usleep(100000);

    CUstream stream = CU_STREAM_PER_THREAD;
    if (!use_ptds && (rc = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING))) {
        printf("capture_app: cuStreamCreate: %s\n", name_of(rc));
        return 1;
    }
    long count = graph_kernels > 0 ? graph_kernels : launches;
    uint64_t ns = (uint64_t)kernel_us * 1000;
    void *params[] = {&ns};
    CUfunction fn = graph_kernels > 0 ? spin_fn : empty_fn;
    CUresult launch_rc = CUDA_SUCCESS;
    rc = cuStreamBeginCapture_v2(stream, mode);
    if (rc != CUDA_SUCCESS) {
        printf("capture_app: cuStreamBeginCapture: %s\n", name_of(rc));
        return 1;
    }
    for (long i = 0; i < count && launch_rc == CUDA_SUCCESS; i++) {
        launch_rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, graph_kernels > 0 ? params : NULL, NULL);
        if (i % 1000 == 999)
            usleep(2000); /* a capture that spans slice boundaries */
    }
    CUgraph graph = NULL;
    CUresult end_rc = cuStreamEndCapture(stream, &graph);
    CUgraphExec exec = NULL;
    CUresult inst_rc = end_rc == CUDA_SUCCESS ? cuGraphInstantiateWithFlags(&exec, graph, 0) : end_rc;
    long replays = 0;
    CUresult replay_rc = CUDA_SUCCESS;
    double until = now_s() + replay_seconds;
    while (inst_rc == CUDA_SUCCESS && replay_rc == CUDA_SUCCESS && now_s() < until) {
        replay_rc = cuGraphLaunch(exec, stream);
        if (replay_rc == CUDA_SUCCESS)
            replay_rc = cuStreamSynchronize(stream);
        replays += replay_rc == CUDA_SUCCESS;
    }
    atomic_store(&capture_done, true);
    if (background)
        pthread_join(helper, NULL);
    printf("capture_app: end_capture=%s instantiate=%s launch_into_capture=%s replay=%s graph_launches=%ld "
           "graph_us=%ld background_kernels=%ld background=%s\n",
           name_of(end_rc), name_of(inst_rc), name_of(launch_rc), name_of(replay_rc), replays,
           graph_kernels > 0 ? graph_kernels * kernel_us : 0, atomic_load(&background_kernels),
           name_of(atomic_load(&background_error)));
    fflush(stdout);
    return end_rc || inst_rc || launch_rc || replay_rc || atomic_load(&background_error) ? 1 : 0;
}
