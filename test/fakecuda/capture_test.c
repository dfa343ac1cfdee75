/*
 * fakecuda stream capture, judged by error codes, the meter and the
 * invalidation log: work pushed into a capturing stream does not run until
 * its graph is launched; streams join a capture through events; the
 * operations the CUDA Programming Guide prohibits during capture fail and
 * invalidate the capture, under each thread interaction mode of
 * cuThreadExchangeStreamCaptureMode; every invalidation is logged to
 * FAKECUDA_CAPTURE_LOG.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "check.h"
#include "test_util.h"
#include "fc_state.h"

CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream, CUstreamCaptureMode);
CUresult cuStreamEndCapture_ptsz(CUstream, CUgraph *);
CUresult cuStreamIsCapturing_ptsz(CUstream, CUstreamCaptureStatus *);
CUresult cuStreamGetCaptureInfo_v3(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
                                   const CUgraphNode **, const CUgraphEdgeData **, size_t *);
CUresult cuGraphInstantiate(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);

#define EXPECT_RC(call, want) EXPECT((call) == (want))
#define GLOBAL CU_STREAM_CAPTURE_MODE_GLOBAL
#define THREAD_LOCAL CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
#define RELAXED CU_STREAM_CAPTURE_MODE_RELAXED

static struct fc_shared *meter;
static CUcontext ctx;
static CUfunction spin;
static char log_path[96];
static unsigned invalidations; /* how many this test caused: lines expected in the log */

static uint64_t kernels_run(void) { return atomic_load(&meter->dev[0].kernels); }
static uint64_t busy_ns(void) { return atomic_load(&meter->dev[0].busy_ns); }

static CUstreamCaptureStatus status_of(CUstream s)
{
    CUstreamCaptureStatus status = (CUstreamCaptureStatus)-1;
    if (cuStreamIsCapturing(s, &status) != CUDA_SUCCESS)
        return (CUstreamCaptureStatus)-2;
    return status;
}

/* Ends a capture that must have been invalidated. */
static void expect_invalidated(CUstream s)
{
    CUgraph graph = (CUgraph)1;
    EXPECT(status_of(s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_RC(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(graph == NULL);
    EXPECT(status_of(s) == CU_STREAM_CAPTURE_STATUS_NONE);
    invalidations++;
}

/* Ends a capture that must have survived; destroys its graph. */
static void expect_intact(CUstream s)
{
    CUgraph graph = NULL;
    EXPECT(status_of(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_RC(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
    EXPECT(graph != NULL);
    if (graph)
        EXPECT_RC(cuGraphDestroy(graph), CUDA_SUCCESS);
}

/* ---- a second thread that runs calls on request ------------------------- */

struct helper {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    CUresult (*fn)(void *);
    void *arg;
    CUresult rc;
    bool busy, quit;
    long tid;
};

static void *helper_main(void *arg)
{
    struct helper *a = arg;
    cuCtxSetCurrent(ctx);
    pthread_mutex_lock(&a->lock);
    a->tid = (long)syscall(SYS_gettid);
    for (;;) {
        while (!a->busy && !a->quit)
            pthread_cond_wait(&a->cond, &a->lock);
        if (a->quit)
            break;
        pthread_mutex_unlock(&a->lock);
        CUresult rc = a->fn(a->arg);
        pthread_mutex_lock(&a->lock);
        a->rc = rc;
        a->busy = false;
        pthread_cond_broadcast(&a->cond);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

static void helper_start(struct helper *a)
{
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    pthread_create(&a->thread, NULL, helper_main, a);
}

/* Runs fn(arg) in the helper thread and returns its result. */
static CUresult helper_call(struct helper *a, CUresult (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&a->lock);
    a->fn = fn;
    a->arg = arg;
    a->busy = true;
    pthread_cond_broadcast(&a->cond);
    while (a->busy)
        pthread_cond_wait(&a->cond, &a->lock);
    CUresult rc = a->rc;
    pthread_mutex_unlock(&a->lock);
    return rc;
}

static void helper_stop(struct helper *a)
{
    pthread_mutex_lock(&a->lock);
    a->quit = true;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
}

struct capture_args {
    CUstream stream;
    CUstreamCaptureMode mode;
    CUgraph graph;
};

static CUresult begin_capture(void *arg)
{
    struct capture_args *c = arg;
    return cuStreamBeginCapture_v2(c->stream, c->mode);
}

static CUresult end_capture(void *arg)
{
    struct capture_args *c = arg;
    return cuStreamEndCapture(c->stream, &c->graph);
}

static CUresult set_mode(void *arg)
{
    CUstreamCaptureMode mode = *(CUstreamCaptureMode *)arg;
    return cuThreadExchangeStreamCaptureMode(&mode);
}

static CUresult alloc_and_free(void *arg)
{
    (void)arg;
    CUdeviceptr p;
    CUresult rc = cuMemAlloc_v2(&p, 4096);
    if (rc == CUDA_SUCCESS)
        cuMemFree_v2(p);
    return rc;
}

static CUresult ctx_synchronize(void *arg)
{
    (void)arg;
    return cuCtxSynchronize();
}

static CUresult event_synchronize(void *arg)
{
    return cuEventSynchronize(*(CUevent *)arg);
}

static CUresult event_query(void *arg)
{
    return cuEventQuery(*(CUevent *)arg);
}

/* ---- the tests ------------------------------------------------------------ */

/* Captured work does not run; the graph runs it, each kernel taking its
 * device time when launched. */
static void test_capture_and_replay(void)
{
    CUstream s;
    CUevent ev;
    CUdeviceptr buf;
    char host[256] = {0};
    EXPECT_RC(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&ev, 0), CUDA_SUCCESS);
    EXPECT_RC(cuMemAlloc_v2(&buf, sizeof host), CUDA_SUCCESS);
    EXPECT(status_of(s) == CU_STREAM_CAPTURE_STATUS_NONE);
    uint64_t kernels = kernels_run(), busy = busy_ns(), copies = atomic_load(&meter->dev[0].copies);

    EXPECT_RC(cuStreamBeginCapture_v2(s, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuStreamBeginCapture_v2(s, GLOBAL), CUDA_ERROR_INVALID_VALUE); /* already capturing */
    uint64_t ns = 30 * MS;
    void *params[] = {&ns};
    CUlaunchConfig config = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                             .blockDimZ = 1, .hStream = s};
    EXPECT_RC(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuLaunchKernelEx(&config, spin, params, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuLaunchCooperativeKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params), CUDA_SUCCESS);
    EXPECT_RC(cuLaunchKernel_ptsz(spin, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuMemcpyHtoDAsync_v2(buf, host, sizeof host, s), CUDA_SUCCESS);
    EXPECT_RC(cuMemsetD8Async(buf, 7, sizeof host, s), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(ev, s), CUDA_SUCCESS);
    EXPECT(status_of(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);

    CUstreamCaptureStatus status;
    cuuint64_t id = 0, id2 = 0;
    CUgraph graph = NULL;
    const CUgraphNode *deps = NULL;
    const CUgraphEdgeData *edges = NULL;
    size_t ndeps = 0;
    EXPECT_RC(cuStreamGetCaptureInfo(s, &status, &id), CUDA_SUCCESS);
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0);
    EXPECT_RC(cuStreamGetCaptureInfo_v2(s, &status, &id2, &graph, &deps, &ndeps), CUDA_SUCCESS);
    EXPECT(id2 == id && graph != NULL && ndeps == 1 && deps && deps[0]);
    EXPECT_RC(cuStreamGetCaptureInfo_v3(s, &status, NULL, NULL, &deps, &edges, &ndeps), CUDA_SUCCESS);
    EXPECT(ndeps == 1 && edges != NULL);
    EXPECT_RC(cuStreamGetCaptureInfo_v3(s, &status, NULL, NULL, NULL, &edges, &ndeps), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuGraphDestroy(graph), CUDA_ERROR_INVALID_VALUE); /* still being captured into */

    /* Nothing ran. */
    usleep(50 * 1000);
    EXPECT(kernels_run() == kernels && busy_ns() == busy);
    EXPECT(atomic_load(&meter->dev[0].copies) == copies);
    EXPECT(host[0] == 0);

    CUgraph captured = NULL;
    EXPECT_RC(cuStreamEndCapture(s, &captured), CUDA_SUCCESS);
    EXPECT(captured == graph);
    EXPECT_RC(cuStreamEndCapture(s, &captured), CUDA_ERROR_ILLEGAL_STATE);
    CUgraphExec exec;
    EXPECT_RC(cuGraphInstantiate(&exec, captured, NULL, NULL, 0), CUDA_SUCCESS);
    usleep(20 * 1000);
    EXPECT(kernels_run() == kernels);

    /* Each launch runs the four kernels, the copy and the set. */
    for (int launch = 1; launch <= 2; launch++) {
        EXPECT_RC(cuGraphLaunch(exec, s), CUDA_SUCCESS);
        EXPECT_RC(cuStreamSynchronize(s), CUDA_SUCCESS);
        EXPECT(kernels_run() == kernels + 4u * (unsigned)launch);
        EXPECT(busy_ns() - busy >= 4 * ns * (unsigned)launch);
        EXPECT(atomic_load(&meter->dev[0].copies) == copies + 2u * (unsigned)launch);
    }
    unsigned char check = 0;
    EXPECT_RC(cuMemcpyDtoH_v2(&check, buf, 1), CUDA_SUCCESS);
    EXPECT(check == 7);
    EXPECT_RC(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    EXPECT_RC(cuGraphDestroy(captured), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(ev), CUDA_SUCCESS);
    EXPECT_RC(cuMemFree_v2(buf), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

static void test_where_capture_may_begin(void)
{
    CUstream s;
    CUgraph graph;
    EXPECT_RC(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    EXPECT_RC(cuStreamBeginCapture_v2(NULL, GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_RC(cuStreamBeginCapture_v2(CU_STREAM_LEGACY, GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_RC(cuStreamBeginCapture_v2(s, (CUstreamCaptureMode)7), CUDA_ERROR_INVALID_VALUE);
    /* The per-thread default stream can capture; NULL in _ptsz names it. */
    EXPECT_RC(cuStreamBeginCapture_v2_ptsz(NULL, GLOBAL), CUDA_SUCCESS);
    CUstreamCaptureStatus status;
    EXPECT_RC(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &status), CUDA_SUCCESS);
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_RC(cuStreamIsCapturing_ptsz(NULL, &status), CUDA_SUCCESS);
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_RC(cuStreamEndCapture_ptsz(NULL, &graph), CUDA_SUCCESS);
    EXPECT_RC(cuGraphDestroy(graph), CUDA_SUCCESS);
    /* The pre-10.1 entry point captures in global mode. */
    EXPECT_RC(cuStreamBeginCapture(s), CUDA_SUCCESS);
    EXPECT_RC(alloc_and_free(NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);
    /* Into an existing graph. */
    CUgraph mine;
    EXPECT_RC(cuGraphCreate(&mine, 0), CUDA_SUCCESS);
    EXPECT_RC(cuStreamBeginCaptureToGraph(s, mine, NULL, NULL, 0, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, s, MS), CUDA_SUCCESS);
    CUgraphExec exec;
    EXPECT_RC(cuGraphInstantiateWithFlags(&exec, mine, 0), CUDA_ERROR_INVALID_VALUE); /* not yet */
    EXPECT_RC(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
    EXPECT(graph == mine);
    EXPECT_RC(cuGraphInstantiateWithFlags(&exec, mine, 0), CUDA_SUCCESS);
    EXPECT_RC(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    EXPECT_RC(cuGraphDestroy(mine), CUDA_SUCCESS);
    EXPECT_RC(cuStreamEndCapture(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
    /* Destroying the stream ends its capture, invalidated. */
    EXPECT_RC(cuStreamBeginCapture_v2(s, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, s, MS), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    invalidations++;
    EXPECT_RC(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    EXPECT_RC(alloc_and_free(NULL), CUDA_SUCCESS); /* no capture left to prohibit it */
    EXPECT_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

/* Synchronizing or querying a capturing stream, or its context from any
 * thread in any mode, invalidates the capture. */
static void test_sync_invalidates(struct helper *other)
{
    CUstream s;
    EXPECT_RC(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

    EXPECT_RC(cuStreamBeginCapture_v2(s, RELAXED), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, s, MS), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_RC(launch_spin(spin, s, MS), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    expect_invalidated(s);

    EXPECT_RC(cuStreamBeginCapture_v2(s, RELAXED), CUDA_SUCCESS);
    EXPECT_RC(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);

    /* A relaxed thread synchronizing the context: prohibited all the same. */
    CUstreamCaptureMode relaxed = RELAXED, previous = GLOBAL;
    EXPECT_RC(helper_call(other, set_mode, &relaxed), CUDA_SUCCESS);
    EXPECT_RC(cuStreamBeginCapture_v2(s, RELAXED), CUDA_SUCCESS);
    EXPECT_RC(helper_call(other, ctx_synchronize, NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);
    EXPECT_RC(helper_call(other, ctx_synchronize, NULL), CUDA_SUCCESS); /* no capture any more */
    EXPECT_RC(helper_call(other, set_mode, &previous), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

/* The legacy stream while a blocking stream captures. */
static void test_legacy_stream_is_implicit(void)
{
    CUstream blocking, nonblocking;
    CUdeviceptr buf;
    char host[16] = {0};
    EXPECT_RC(cuStreamCreate(&blocking, 0), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_RC(cuMemAlloc_v2(&buf, sizeof host), CUDA_SUCCESS);

    /* Asking about it is answered, and does no harm. */
    EXPECT_RC(cuStreamBeginCapture_v2(blocking, RELAXED), CUDA_SUCCESS);
    CUstreamCaptureStatus status;
    EXPECT_RC(cuStreamIsCapturing(CU_STREAM_LEGACY, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    EXPECT_RC(cuStreamIsCapturing(NULL, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    EXPECT_RC(cuStreamGetCaptureInfo(CU_STREAM_LEGACY, &status, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    expect_intact(blocking);

    /* Using it invalidates: a launch, an async copy, an event record, a
     * synchronous copy. */
    CUevent ev;
    EXPECT_RC(cuEventCreate(&ev, 0), CUDA_SUCCESS);
    for (int use = 0; use < 4; use++) {
        EXPECT_RC(cuStreamBeginCapture_v2(blocking, RELAXED), CUDA_SUCCESS);
        CUresult rc = use == 0   ? launch_spin(spin, NULL, MS)
                      : use == 1 ? cuMemcpyHtoDAsync_v2(buf, host, sizeof host, CU_STREAM_LEGACY)
                      : use == 2 ? cuEventRecord(ev, NULL)
                                 : cuMemcpyHtoD_v2(buf, host, sizeof host);
        EXPECT(rc == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
        expect_invalidated(blocking);
    }
    /* The per-thread default stream is a blocking stream too. */
    EXPECT_RC(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, RELAXED), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, NULL, MS), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    expect_invalidated(CU_STREAM_PER_THREAD);

    /* A non-blocking stream's capture leaves the legacy stream usable: the
     * launch runs. */
    EXPECT_RC(cuStreamBeginCapture_v2(nonblocking, RELAXED), CUDA_SUCCESS);
    uint64_t kernels = kernels_run();
    EXPECT_RC(launch_spin(spin, NULL, MS), CUDA_SUCCESS);
    EXPECT_RC(cuStreamIsCapturing(CU_STREAM_LEGACY, &status), CUDA_SUCCESS);
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT_RC(cuStreamSynchronize(NULL), CUDA_SUCCESS);
    EXPECT(kernels_run() == kernels + 1);
    expect_intact(nonblocking);
    EXPECT_RC(cuEventDestroy_v2(ev), CUDA_SUCCESS);
    EXPECT_RC(cuMemFree_v2(buf), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(nonblocking), CUDA_SUCCESS);
}

/* "Potentially unsafe" calls under each interaction mode
 * (cuThreadExchangeStreamCaptureMode). */
static void test_unsafe_calls(struct helper *other)
{
    CUstream s;
    EXPECT_RC(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

    /* This thread's own capture: prohibited in global and thread-local
     * captures, allowed in a relaxed one. */
    EXPECT_RC(cuStreamBeginCapture_v2(s, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(alloc_and_free(NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);
    EXPECT_RC(cuStreamBeginCapture_v2(s, THREAD_LOCAL), CUDA_SUCCESS);
    EXPECT_RC(alloc_and_free(NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);
    EXPECT_RC(cuStreamBeginCapture_v2(s, RELAXED), CUDA_SUCCESS);
    EXPECT_RC(alloc_and_free(NULL), CUDA_SUCCESS);
    expect_intact(s);

    /* Another thread's global capture prohibits them to a global-mode
     * thread, not to a thread-local or relaxed one. */
    struct capture_args c = {.stream = s, .mode = GLOBAL};
    EXPECT_RC(helper_call(other, begin_capture, &c), CUDA_SUCCESS);
    EXPECT_RC(alloc_and_free(NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_RC(helper_call(other, end_capture, &c), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(c.graph == NULL);
    invalidations++;
    for (CUstreamCaptureMode mode = THREAD_LOCAL; mode <= RELAXED; mode++) {
        CUstreamCaptureMode swap = mode;
        EXPECT_RC(cuThreadExchangeStreamCaptureMode(&swap), CUDA_SUCCESS);
        EXPECT(swap == GLOBAL);
        EXPECT_RC(helper_call(other, begin_capture, &c), CUDA_SUCCESS);
        EXPECT_RC(alloc_and_free(NULL), CUDA_SUCCESS);
        EXPECT_RC(helper_call(other, end_capture, &c), CUDA_SUCCESS);
        EXPECT_RC(cuGraphDestroy(c.graph), CUDA_SUCCESS);
        EXPECT_RC(cuThreadExchangeStreamCaptureMode(&swap), CUDA_SUCCESS);
        EXPECT(swap == mode);
    }
    /* Another thread's thread-local capture prohibits nothing here. */
    c.mode = THREAD_LOCAL;
    EXPECT_RC(helper_call(other, begin_capture, &c), CUDA_SUCCESS);
    EXPECT_RC(alloc_and_free(NULL), CUDA_SUCCESS);
    EXPECT_RC(helper_call(other, end_capture, &c), CUDA_SUCCESS);
    EXPECT_RC(cuGraphDestroy(c.graph), CUDA_SUCCESS);

    /* A relaxed thread may synchronize its own event recorded outside any
     * capture while another thread captures globally... */
    CUevent mine, captured;
    CUstream other_stream;
    EXPECT_RC(cuEventCreate(&mine, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&captured, 0), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(&other_stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, other_stream, 20 * MS), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(mine, other_stream), CUDA_SUCCESS);
    c.mode = GLOBAL;
    EXPECT_RC(helper_call(other, begin_capture, &c), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(captured, s), CUDA_SUCCESS); /* recorded into the capture */
    CUstreamCaptureMode swap = RELAXED;
    EXPECT_RC(cuThreadExchangeStreamCaptureMode(&swap), CUDA_SUCCESS);
    EXPECT_RC(cuEventSynchronize(mine), CUDA_SUCCESS);
    EXPECT_RC(cuEventQuery(mine), CUDA_SUCCESS);
    /* ...but never query an event recorded in the capture. */
    EXPECT_RC(cuEventQuery(captured), CUDA_ERROR_CAPTURED_EVENT);
    EXPECT_RC(helper_call(other, end_capture, &c), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    invalidations++;
    EXPECT_RC(cuThreadExchangeStreamCaptureMode(&swap), CUDA_SUCCESS);
    EXPECT(swap == RELAXED);

    /* The capturing thread itself: querying or waiting for an event or its
     * own stream is unsafe. */
    EXPECT_RC(cuStreamBeginCapture_v2(s, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuEventSynchronize(mine), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);
    EXPECT_RC(cuStreamBeginCapture_v2(s, THREAD_LOCAL), CUDA_SUCCESS);
    EXPECT_RC(helper_call(other, event_query, &mine), CUDA_SUCCESS); /* another thread, global mode */
    EXPECT_RC(helper_call(other, event_synchronize, &mine), CUDA_SUCCESS);
    EXPECT_RC(cuStreamQuery(other_stream), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);

    /* Stream-ordered allocation into the capture is allowed: it makes an
     * allocation node, which takes no memory until the graph is launched. */
    size_t free_before, free_during, free_after, total;
    EXPECT_RC(cuMemGetInfo_v2(&free_before, &total), CUDA_SUCCESS);
    EXPECT_RC(cuStreamBeginCapture_v2(s, GLOBAL), CUDA_SUCCESS);
    CUdeviceptr p;
    EXPECT_RC(cuMemAllocAsync(&p, 1 << 20, s), CUDA_SUCCESS);
    EXPECT_RC(cuMemFreeAsync(p, s), CUDA_SUCCESS);
    EXPECT_RC(cuMemGetInfo_v2(&free_during, &total), CUDA_SUCCESS);
    EXPECT(free_during == free_before);
    EXPECT_RC(cuMemFree_v2(p), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);
    EXPECT_RC(cuMemGetInfo_v2(&free_after, &total), CUDA_SUCCESS);
    EXPECT(free_after == free_before);

    CUstreamCaptureMode bad = (CUstreamCaptureMode)9;
    EXPECT_RC(cuThreadExchangeStreamCaptureMode(&bad), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuThreadExchangeStreamCaptureMode(NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuStreamSynchronize(other_stream), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(mine), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(captured), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(other_stream), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

/* Streams join a capture through events (cross-stream capture). */
static void test_cross_stream_capture(void)
{
    CUstream origin, forked;
    CUevent fork_ev, join_ev, outside;
    CUgraph graph;
    EXPECT_RC(cuStreamCreate(&origin, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(&forked, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&fork_ev, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&join_ev, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&outside, 0), CUDA_SUCCESS);
    uint64_t kernels = kernels_run();

    EXPECT_RC(cuStreamBeginCapture_v2(origin, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, origin, 10 * MS), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(fork_ev, origin), CUDA_SUCCESS);
    EXPECT_RC(cuStreamWaitEvent(forked, fork_ev, 0), CUDA_SUCCESS);
    EXPECT(status_of(forked) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_RC(launch_spin(spin, forked, 10 * MS), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(join_ev, forked), CUDA_SUCCESS);
    EXPECT_RC(cuStreamWaitEvent(origin, join_ev, 0), CUDA_SUCCESS);
    cuuint64_t id_origin = 0, id_forked = 1;
    CUstreamCaptureStatus status;
    EXPECT_RC(cuStreamGetCaptureInfo(origin, &status, &id_origin), CUDA_SUCCESS);
    EXPECT_RC(cuStreamGetCaptureInfo(forked, &status, &id_forked), CUDA_SUCCESS);
    EXPECT(id_origin == id_forked);
    EXPECT_RC(cuStreamEndCapture(forked, &graph), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    EXPECT_RC(cuStreamEndCapture(origin, &graph), CUDA_SUCCESS);
    EXPECT(status_of(forked) == CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT(kernels_run() == kernels);
    CUgraphExec exec;
    EXPECT_RC(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
    EXPECT_RC(cuGraphLaunch(exec, origin), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(origin), CUDA_SUCCESS);
    EXPECT(kernels_run() == kernels + 2);
    /* A graph launched into a capture is captured, not run. */
    EXPECT_RC(cuStreamBeginCapture_v2(forked, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuGraphLaunch(exec, forked), CUDA_SUCCESS);
    CUgraph nested;
    EXPECT_RC(cuStreamEndCapture(forked, &nested), CUDA_SUCCESS);
    EXPECT(kernels_run() == kernels + 2);
    EXPECT_RC(cuGraphDestroy(nested), CUDA_SUCCESS);
    EXPECT_RC(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    EXPECT_RC(cuGraphDestroy(graph), CUDA_SUCCESS);

    /* Work forked and never joined back. */
    EXPECT_RC(cuStreamBeginCapture_v2(origin, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(fork_ev, origin), CUDA_SUCCESS);
    EXPECT_RC(cuStreamWaitEvent(forked, fork_ev, 0), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, forked, MS), CUDA_SUCCESS);
    graph = (CUgraph)1;
    EXPECT_RC(cuStreamEndCapture(origin, &graph), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    EXPECT(graph == NULL && status_of(forked) == CU_STREAM_CAPTURE_STATUS_NONE);

    /* A capturing stream may not wait on an event recorded outside the
     * capture, except as an external wait. */
    EXPECT_RC(cuEventRecord(outside, forked), CUDA_SUCCESS);
    EXPECT_RC(cuStreamBeginCapture_v2(origin, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuStreamWaitEvent(origin, outside, CU_EVENT_WAIT_EXTERNAL), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecordWithFlags(join_ev, origin, CU_EVENT_RECORD_EXTERNAL), CUDA_SUCCESS);
    expect_intact(origin);
    EXPECT_RC(cuEventRecordWithFlags(join_ev, origin, CU_EVENT_RECORD_EXTERNAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuStreamBeginCapture_v2(origin, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuStreamWaitEvent(origin, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    expect_invalidated(origin);
    /* Merging two captures is not allowed either. */
    EXPECT_RC(cuStreamBeginCapture_v2(origin, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuStreamBeginCapture_v2(forked, GLOBAL), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(fork_ev, origin), CUDA_SUCCESS);
    EXPECT_RC(cuStreamWaitEvent(forked, fork_ev, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
    expect_invalidated(origin);
    expect_invalidated(forked);

    EXPECT_RC(cuEventDestroy_v2(fork_ev), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(join_ev), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(outside), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(origin), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(forked), CUDA_SUCCESS);
}

/* A capture not begun in relaxed mode must be ended by its own thread. */
static void test_end_from_another_thread(struct helper *other)
{
    CUstream s;
    EXPECT_RC(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    struct capture_args c = {.stream = s, .mode = THREAD_LOCAL};
    EXPECT_RC(helper_call(other, begin_capture, &c), CUDA_SUCCESS);
    CUgraph graph;
    EXPECT_RC(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    EXPECT_RC(helper_call(other, end_capture, &c), CUDA_SUCCESS);
    EXPECT_RC(cuGraphDestroy(c.graph), CUDA_SUCCESS);
    c.mode = RELAXED;
    EXPECT_RC(helper_call(other, begin_capture, &c), CUDA_SUCCESS);
    EXPECT_RC(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
    EXPECT_RC(cuGraphDestroy(graph), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

/* One line per invalidation: "CALL tid=TID capture=ID reason=TEXT". */
static void test_invalidation_log(long other_tid)
{
    FILE *f = fopen(log_path, "r");
    EXPECT(f != NULL);
    if (!f)
        return;
    char line[512];
    unsigned lines = 0, well_formed = 0, alloc_from_main = 0, ctx_sync_from_other = 0;
    long self = (long)syscall(SYS_gettid);
    while (fgets(line, sizeof line, f)) {
        char call[64];
        long tid;
        unsigned long long id;
        int reason = 0;
        lines++;
        if (sscanf(line, "%63s tid=%ld capture=%llu reason=%n", call, &tid, &id, &reason) == 3 && reason > 0 &&
            line[reason] != '\n')
            well_formed++;
        if (strcmp(call, "cuMemAlloc_v2") == 0 && tid == self)
            alloc_from_main++;
        if (strcmp(call, "cuCtxSynchronize") == 0 && tid == other_tid)
            ctx_sync_from_other++;
    }
    fclose(f);
    printf("%u invalidations logged, %u expected\n", lines, invalidations);
    EXPECT(lines == invalidations);
    EXPECT(well_formed == lines);
    EXPECT(alloc_from_main >= 3);
    EXPECT(ctx_sync_from_other == 1);
}

int main(void)
{
    const char *path = use_fresh_state("1", "1G");
    snprintf(log_path, sizeof log_path, "%s.log", path);
    setenv("FAKECUDA_CAPTURE_LOG", log_path, 1);
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 2;
    char err[256];
    meter = fc_state_open(path, 1, 1ull << 30, err, sizeof err);
    spin = spin_function();
    if (!meter || !spin)
        return 2;
    struct helper other;
    helper_start(&other);

    test_capture_and_replay();
    test_where_capture_may_begin();
    test_sync_invalidates(&other);
    test_legacy_stream_is_implicit();
    test_unsafe_calls(&other);
    test_cross_stream_capture();
    test_end_from_another_thread(&other);
    test_invalidation_log(other.tid);

    helper_stop(&other);
    unlink(log_path);
    unlink(path);
    return check_finish();
}
