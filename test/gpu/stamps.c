/*
 * stamps: the CUDA program of the real-GPU check (test/gpu/check.sh). Its
 * kernels write when they ran, read from the GPU's %globaltimer
 * (stamp_kernels.h), so that the check judges gpuslice by what the GPU
 * recorded, not by gpuslice's own bookkeeping. The same binary runs on a
 * GPU and on fakecuda, whose "stamp*" kernels write the same two numbers.
 *
 *   stamps run     [--kernel-us US] [--seconds S | --count N] [--depth D]
 *                  [--ready] [--wait-go] --out FILE
 *       kernels of US microseconds, one stream, at most D in flight, until
 *       S seconds have passed, N kernels ran, or SIGTERM
 *   stamps infer   [--graph-kernels K] [--kernel-us US] [--think-us T]
 *                  [--seconds S | --count N] [--wait-in stream|event]
 *                  [--ready] [--wait-go] --out FILE
 *       an inference server's loop: a captured graph of K kernels, then
 *       per step one graph launch and a host synchronization, T us of host
 *       work between steps (asleep), for S seconds or N steps; each step's
 *       latency on the host clock. --wait-in: the synchronization is made
 *       by a second thread, which launched nothing (as a server's thread
 *       that waits for what another launched): cuStreamSynchronize on the
 *       stream, or cuEventSynchronize on an event recorded after the
 *       graph
 *   stamps capture [--ops N] [--pause-ms MS] [--eager-us US]
 *                  [--replay-seconds S] [--wait-go] --out FILE
 *       while a second thread launches kernels of US us (eager work), a
 *       stream capture in global mode (as torch.cuda.graph) of N empty
 *       kernels between two stamps, pausing MS ms every 1000; then the
 *       graph replayed for S seconds, each replay followed by a host
 *       synchronization
 *   stamps ptx     prints the PTX of the kernels
 *
 * --ready prints "ready" once set up, before the first measured launch;
 * --wait-go then waits for a line on standard input (capture: after the
 * capture, before the replays, having printed "captured: ..."). Waits for
 * the device sleep (CU_CTX_SCHED_BLOCKING_SYNC).
 *
 * FILE gets one line per record, times in ns:
 *   offset_ns O U      %globaltimer - CLOCK_REALTIME, within +-U
 *   kernel START END   run: each kernel, by %globaltimer
 *   eager START END    capture: each eager kernel
 *   window BEGIN END   capture: CLOCK_REALTIME before the capture began
 *                      and after it ended; infer: before the first
 *                      measured step and after the last
 *   replay START END   capture: each replay, from its first stamp's start
 *                      to its last stamp's end
 *   step LATENCY       infer: launch to the end of the synchronization
 * and standard output one summary line, "stamps: mode=... key=value ...".
 * Exit status 0, 1 on a usage error, 2 on a CUDA error (named on stderr).
 */
#include <cuda.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stamp_kernels.h"

#define MAX_DEPTH 1024
#define CALIBRATION_ROUNDS 20

/* The options, set once by main before any thread starts. */
static struct {
    const char *mode, *out, *wait_in;
    double kernel_us, seconds, think_us, pause_ms, eager_us, replay_seconds;
    long count, depth, graph_kernels, ops;
    bool ready, wait_go;
} opt = {.kernel_us = 1000, .seconds = 5, .think_us = 100, .pause_ms = 5, .eager_us = 500, .replay_seconds = 3,
         .depth = 16, .graph_kernels = 4, .ops = 20000};

/* Set by SIGTERM and SIGINT: run stops launching and reports. */
static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static const char *name_of(CUresult rc)
{
    const char *name = NULL;
    return cuGetErrorName(rc, &name) == CUDA_SUCCESS && name ? name : "unknown CUDA error";
}

/* Names a failed call on stderr; true if it failed. */
static bool failed(CUresult rc, const char *what)
{
    if (rc == CUDA_SUCCESS)
        return false;
    fprintf(stderr, "stamps: %s failed: %s (%d)\n", what, name_of(rc), (int)rc);
    return true;
}

/* ---- the device and the stamp buffer ----------------------------------------- */

static CUcontext ctx;
static CUfunction stamp_fn, empty_fn;

static bool setup(void)
{
    CUdevice dev;
    CUmodule module;
    return !failed(cuInit(0), "cuInit") && !failed(cuDeviceGet(&dev, 0), "cuDeviceGet") &&
           !failed(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC), "cuDevicePrimaryCtxSetFlags") &&
           !failed(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") &&
           !failed(cuCtxSetCurrent(ctx), "cuCtxSetCurrent") &&
           !failed(cuModuleLoadData(&module, stamp_kernels_ptx), "cuModuleLoadData") &&
           !failed(cuModuleGetFunction(&stamp_fn, module, "stamp"), "cuModuleGetFunction(stamp)") &&
           !failed(cuModuleGetFunction(&empty_fn, module, "empty"), "cuModuleGetFunction(empty)");
}

/* Room for `capacity` stamp pairs on the device, zeroed. */
struct stamp_buffer {
    CUdeviceptr base;
    size_t capacity;
};

static bool buffer_new(struct stamp_buffer *b, size_t capacity)
{
    b->capacity = capacity;
    return !failed(cuMemAlloc(&b->base, capacity * 16), "cuMemAlloc") &&
           !failed(cuMemsetD8(b->base, 0, capacity * 16), "cuMemsetD8");
}

static CUdeviceptr slot(const struct stamp_buffer *b, size_t i)
{
    return i < b->capacity ? b->base + 16 * i : 0;
}

/* The first n pairs, copied to the host (to be freed); NULL on error. */
static uint64_t *buffer_read(const struct stamp_buffer *b, size_t n)
{
    uint64_t *host = calloc(n ? 2 * n : 2, sizeof *host);
    if (host && n && failed(cuMemcpyDtoH(host, b->base, n * 16), "cuMemcpyDtoH")) {
        free(host);
        return NULL;
    }
    return host;
}

static CUresult launch_stamp(CUstream stream, uint64_t ns, CUdeviceptr out)
{
    void *params[] = {&ns, &out};
    return cuLaunchKernel(stamp_fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL);
}

/* %globaltimer - CLOCK_REALTIME: the best of CALIBRATION_ROUNDS stamps of
 * nothing, each between two host readings, at the middle of the shortest
 * round, within half its length. */
static bool calibrate(CUstream stream, const struct stamp_buffer *b, size_t at, int64_t *offset,
                      uint64_t *uncertainty)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < CALIBRATION_ROUNDS; i++) {
        uint64_t t0 = clock_ns(CLOCK_REALTIME);
        if (failed(launch_stamp(stream, 0, slot(b, at)), "cuLaunchKernel(calibration)") ||
            failed(cuStreamSynchronize(stream), "cuStreamSynchronize(calibration)"))
            return false;
        uint64_t t1 = clock_ns(CLOCK_REALTIME), st[2];
        if (failed(cuMemcpyDtoH(st, slot(b, at), sizeof st), "cuMemcpyDtoH(calibration)"))
            return false;
        if (t1 - t0 < best) {
            best = t1 - t0;
            *offset = (int64_t)(st[0] - (t0 + (t1 - t0) / 2));
        }
    }
    *uncertainty = best / 2;
    return true;
}

static FILE *open_out(void)
{
    FILE *f = fopen(opt.out, "w");
    if (!f)
        fprintf(stderr, "stamps: cannot write %s: %s\n", opt.out, strerror(errno));
    return f;
}

static bool close_out(FILE *f)
{
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok)
        fprintf(stderr, "stamps: writing %s failed\n", opt.out);
    return ok;
}

static void write_pairs(FILE *f, const char *tag, const uint64_t *pairs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (pairs[2 * i] && pairs[2 * i + 1])
            fprintf(f, "%s %" PRIu64 " %" PRIu64 "\n", tag, pairs[2 * i], pairs[2 * i + 1]);
}

static void ready_and_go(void)
{
    if (opt.ready) {
        printf("ready\n");
        fflush(stdout);
    }
    if (opt.wait_go) {
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            stop_requested = 1;
    }
}

/* ---- run ---------------------------------------------------------------------- */

static int run(void)
{
    CUstream stream;
    CUevent done[MAX_DEPTH];
    struct stamp_buffer b;
    size_t capacity = opt.count > 0 ? (size_t)opt.count + 1
                                    : (size_t)(opt.seconds * 1e6 / (opt.kernel_us > 1 ? opt.kernel_us : 1)) + 1025;
    if (capacity > (1u << 22))
        capacity = 1u << 22;
    if (!setup() || failed(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
        !buffer_new(&b, capacity))
        return 2;
    for (long i = 0; i < opt.depth; i++)
        if (failed(cuEventCreate(&done[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC), "cuEventCreate"))
            return 2;
    ready_and_go();
    uint64_t ns = (uint64_t)(opt.kernel_us * 1000.0), launched = 0;
    uint64_t limit = opt.count > 0 ? (uint64_t)opt.count : UINT64_MAX;
    uint64_t start = clock_ns(CLOCK_MONOTONIC), stop = start + (uint64_t)(opt.seconds * 1e9);
    while (!stop_requested && launched < limit && (opt.count > 0 || clock_ns(CLOCK_MONOTONIC) < stop)) {
        CUevent ev = done[launched % (uint64_t)opt.depth];
        if (launched >= (uint64_t)opt.depth && failed(cuEventSynchronize(ev), "cuEventSynchronize"))
            return 2;
        /* The last slot is kept for the calibration. */
        CUdeviceptr out = launched + 1 < capacity ? slot(&b, launched) : 0;
        if (failed(launch_stamp(stream, ns, out), "cuLaunchKernel") || failed(cuEventRecord(ev, stream), "cuEventRecord"))
            return 2;
        launched++;
    }
    if (failed(cuStreamSynchronize(stream), "cuStreamSynchronize"))
        return 2;
    double wall = (double)(clock_ns(CLOCK_MONOTONIC) - start) / 1e9;
    size_t stamped = launched < capacity - 1 ? launched : capacity - 1;
    uint64_t *pairs = buffer_read(&b, stamped), uncertainty;
    int64_t offset;
    if (!pairs || !calibrate(stream, &b, capacity - 1, &offset, &uncertainty))
        return 2;
    FILE *f = open_out();
    if (!f)
        return 2;
    fprintf(f, "offset_ns %" PRId64 " %" PRIu64 "\n", offset, uncertainty);
    write_pairs(f, "kernel", pairs, stamped);
    if (!close_out(f))
        return 2;
    printf("stamps: mode=run pid=%d kernel_us=%.0f kernels=%" PRIu64 " stamped=%zu wall_s=%.3f offset_ns=%" PRId64
           " uncertainty_ns=%" PRIu64 "\n",
           (int)getpid(), opt.kernel_us, launched, stamped, wall, offset, uncertainty);
    free(pairs);
    return 0;
}

/* ---- infer -------------------------------------------------------------------- */

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* --wait-in: the step's synchronization, made by a second thread. Shared
 * with it: the stream, the event, and what it returned; `go` starts a
 * wait, `done` says it returned. */
static struct {
    CUstream stream;
    CUevent event;
    sem_t go, done;
    CUresult rc;
    bool quit;
} waiter;

static void *waiter_main(void *arg)
{
    (void)arg;
    CUresult set = cuCtxSetCurrent(ctx);
    for (;;) {
        while (sem_wait(&waiter.go) != 0 && errno == EINTR) {
        }
        if (waiter.quit)
            return NULL;
        waiter.rc = set != CUDA_SUCCESS ? set
                  : waiter.event ? cuEventSynchronize(waiter.event) : cuStreamSynchronize(waiter.stream);
        sem_post(&waiter.done);
    }
}

/* The step's synchronization: here, or in the waiter thread. */
static bool step_wait(CUstream stream)
{
    if (!opt.wait_in)
        return !failed(cuStreamSynchronize(stream), "cuStreamSynchronize");
    if (waiter.event && failed(cuEventRecord(waiter.event, stream), "cuEventRecord"))
        return false;
    sem_post(&waiter.go);
    while (sem_wait(&waiter.done) != 0 && errno == EINTR) {
    }
    return !failed(waiter.rc, waiter.event ? "cuEventSynchronize (waiter thread)" : "cuStreamSynchronize (waiter thread)");
}

static bool waiter_start(CUstream stream, pthread_t *thread)
{
    waiter.stream = stream;
    if (!strcmp(opt.wait_in, "event") &&
        failed(cuEventCreate(&waiter.event, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC), "cuEventCreate"))
        return false;
    if (sem_init(&waiter.go, 0, 0) != 0 || sem_init(&waiter.done, 0, 0) != 0 ||
        pthread_create(thread, NULL, waiter_main, NULL) != 0) {
        fprintf(stderr, "stamps: cannot start the waiter thread\n");
        return false;
    }
    return true;
}

static void waiter_stop(pthread_t thread)
{
    waiter.quit = true;
    sem_post(&waiter.go);
    pthread_join(thread, NULL);
}

static int infer(void)
{
    CUstream stream;
    CUgraph graph;
    CUgraphExec exec;
    struct stamp_buffer b;
    if (!setup() || failed(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
        !buffer_new(&b, 1))
        return 2;
    uint64_t ns = (uint64_t)(opt.kernel_us * 1000.0);
    if (failed(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture"))
        return 2;
    for (long i = 0; i < opt.graph_kernels; i++)
        if (failed(launch_stamp(stream, ns, 0), "cuLaunchKernel(captured)"))
            return 2;
    if (failed(cuStreamEndCapture(stream, &graph), "cuStreamEndCapture") ||
        failed(cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags"))
        return 2;
    for (int i = 0; i < 3; i++) /* warm-up */
        if (failed(cuGraphLaunch(exec, stream), "cuGraphLaunch") || failed(cuStreamSynchronize(stream), "cuStreamSynchronize"))
            return 2;
    size_t cap = 1 << 16, steps = 0;
    uint64_t *latency = malloc(cap * sizeof *latency);
    pthread_t waiter_thread;
    if (!latency || (opt.wait_in && !waiter_start(stream, &waiter_thread)))
        return 2;
    ready_and_go();
    uint64_t begin = clock_ns(CLOCK_REALTIME);
    uint64_t start = clock_ns(CLOCK_MONOTONIC), stop = start + (uint64_t)(opt.seconds * 1e9);
    while (!stop_requested && (opt.count > 0 ? steps < (size_t)opt.count : clock_ns(CLOCK_MONOTONIC) < stop)) {
        uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
        if (failed(cuGraphLaunch(exec, stream), "cuGraphLaunch") || !step_wait(stream))
            return 2;
        if (steps == cap) {
            uint64_t *grown = realloc(latency, 2 * cap * sizeof *latency);
            if (!grown)
                return 2;
            latency = grown;
            cap *= 2;
        }
        latency[steps++] = clock_ns(CLOCK_MONOTONIC) - t0;
        if (opt.think_us > 0)
            sleep_ns((uint64_t)(opt.think_us * 1000.0));
    }
    double wall = (double)(clock_ns(CLOCK_MONOTONIC) - start) / 1e9;
    uint64_t end = clock_ns(CLOCK_REALTIME);
    if (opt.wait_in)
        waiter_stop(waiter_thread);
    FILE *f = open_out();
    if (!f)
        return 2;
    fprintf(f, "window %" PRIu64 " %" PRIu64 "\n", begin, end);
    for (size_t i = 0; i < steps; i++)
        fprintf(f, "step %" PRIu64 "\n", latency[i]);
    if (!close_out(f))
        return 2;
    qsort(latency, steps, sizeof *latency, compare_u64);
    /* gpu_us_per_step: the graph's kernels' length, which their spin on
     * %globaltimer (or fakecuda) makes exact. */
    printf("stamps: mode=infer pid=%d graph_kernels=%ld kernel_us=%.0f steps=%zu wall_s=%.3f p50_us=%.1f p99_us=%.1f "
           "max_us=%.1f gpu_us_per_step=%.1f\n",
           (int)getpid(), opt.graph_kernels, opt.kernel_us, steps, wall,
           steps ? (double)latency[steps / 2] / 1e3 : 0.0, steps ? (double)latency[steps * 99 / 100] / 1e3 : 0.0,
           steps ? (double)latency[steps - 1] / 1e3 : 0.0, (double)opt.graph_kernels * opt.kernel_us);
    free(latency);
    return 0;
}

/* ---- capture ------------------------------------------------------------------ */

/* Shared by the capturing thread and the eager one. */
static _Atomic bool capture_over;
static _Atomic size_t eager_launched;
static _Atomic CUresult eager_error;
static struct stamp_buffer eager_buffer;
static CUstream eager_stream;

static void *eager_main(void *arg)
{
    (void)arg;
    CUresult rc = cuCtxSetCurrent(ctx);
    uint64_t ns = (uint64_t)(opt.eager_us * 1000.0);
    size_t i = 0;
    /* One kernel every US: the queue stays short, so the work runs while
     * the capture does, and waits at the gate when the slice is gone. */
    while (rc == CUDA_SUCCESS && !atomic_load(&capture_over) && i < eager_buffer.capacity) {
        rc = launch_stamp(eager_stream, ns, slot(&eager_buffer, i));
        if (rc == CUDA_SUCCESS)
            atomic_store(&eager_launched, ++i);
        sleep_ns(ns);
    }
    atomic_store(&eager_error, rc);
    return NULL;
}

static int capture(void)
{
    CUstream stream;
    struct stamp_buffer ends;
    if (!setup() || failed(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
        failed(cuStreamCreate(&eager_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
        !buffer_new(&ends, 3) || !buffer_new(&eager_buffer, 1 << 16))
        return 2;
    pthread_t eager;
    if (pthread_create(&eager, NULL, eager_main, NULL) != 0) {
        fprintf(stderr, "stamps: cannot start the eager thread\n");
        return 2;
    }
    sleep_ns(200000000); /* the eager work under way, slices coming and going */

    uint64_t begin = clock_ns(CLOCK_REALTIME);
    CUresult begin_rc = cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), launch_rc = begin_rc;
    if (launch_rc == CUDA_SUCCESS)
        launch_rc = launch_stamp(stream, 0, slot(&ends, 0));
    for (long i = 0; i < opt.ops && launch_rc == CUDA_SUCCESS; i++) {
        launch_rc = cuLaunchKernel(empty_fn, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL);
        if (i % 1000 == 999)
            sleep_ns((uint64_t)(opt.pause_ms * 1e6));
    }
    if (launch_rc == CUDA_SUCCESS)
        launch_rc = launch_stamp(stream, 0, slot(&ends, 1));
    CUgraph graph = NULL;
    CUresult end_rc = begin_rc == CUDA_SUCCESS ? cuStreamEndCapture(stream, &graph) : begin_rc;
    uint64_t end = clock_ns(CLOCK_REALTIME);
    atomic_store(&capture_over, true);
    pthread_join(eager, NULL);
    CUgraphExec exec = NULL;
    CUresult inst_rc = end_rc == CUDA_SUCCESS ? cuGraphInstantiateWithFlags(&exec, graph, 0) : end_rc;
    printf("captured: end_capture=%s instantiate=%s launch_into_capture=%s eager=%zu eager_error=%s window_ms=%.1f\n",
           name_of(end_rc), name_of(inst_rc), name_of(launch_rc), atomic_load(&eager_launched),
           name_of(atomic_load(&eager_error)), (double)(end - begin) / 1e6);
    fflush(stdout);
    if (opt.wait_go) {
        char line[64];
        if (!fgets(line, sizeof line, stdin))
            return 2;
    }

    size_t cap = 1 << 12, replays = 0;
    uint64_t *replay = malloc(cap * 2 * sizeof *replay);
    CUresult replay_rc = inst_rc;
    uint64_t stop = clock_ns(CLOCK_MONOTONIC) + (uint64_t)(opt.replay_seconds * 1e9);
    while (replay && replay_rc == CUDA_SUCCESS && replays < cap && clock_ns(CLOCK_MONOTONIC) < stop) {
        uint64_t st[4];
        replay_rc = cuGraphLaunch(exec, stream);
        if (replay_rc == CUDA_SUCCESS)
            replay_rc = cuStreamSynchronize(stream);
        if (replay_rc == CUDA_SUCCESS)
            replay_rc = cuMemcpyDtoH(st, ends.base, sizeof st);
        if (replay_rc == CUDA_SUCCESS) {
            replay[2 * replays] = st[0];
            replay[2 * replays + 1] = st[3];
            replays++;
        }
    }
    size_t eager_n = atomic_load(&eager_launched);
    uint64_t *eager_pairs = NULL, uncertainty = 0;
    int64_t offset = 0;
    bool ok = replay && !failed(cuStreamSynchronize(eager_stream), "cuStreamSynchronize(eager)") &&
              (eager_pairs = buffer_read(&eager_buffer, eager_n)) && calibrate(stream, &ends, 2, &offset, &uncertainty);
    FILE *f = ok ? open_out() : NULL;
    if (!f)
        return 2;
    fprintf(f, "offset_ns %" PRId64 " %" PRIu64 "\n", offset, uncertainty);
    fprintf(f, "window %" PRIu64 " %" PRIu64 "\n", begin, end);
    write_pairs(f, "eager", eager_pairs, eager_n);
    write_pairs(f, "replay", replay, replays);
    if (!close_out(f))
        return 2;
    printf("stamps: mode=capture pid=%d end_capture=%s instantiate=%s launch_into_capture=%s eager=%zu "
           "eager_error=%s replay=%s replays=%zu offset_ns=%" PRId64 " uncertainty_ns=%" PRIu64 "\n",
           (int)getpid(), name_of(end_rc), name_of(inst_rc), name_of(launch_rc), eager_n,
           name_of(atomic_load(&eager_error)), name_of(replay_rc), replays, offset, uncertainty);
    free(replay);
    free(eager_pairs);
    return end_rc || inst_rc || launch_rc || replay_rc || atomic_load(&eager_error) ? 2 : 0;
}

/* ---- the command line ------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f, "Usage: stamps run     [--kernel-us US] [--seconds S | --count N] [--depth D] [--ready] [--wait-go] --out FILE\n"
               "       stamps infer   [--graph-kernels K] [--kernel-us US] [--think-us T] [--seconds S | --count N]\n"
               "                      [--wait-in stream|event] [--ready] [--wait-go] --out FILE\n"
               "       stamps capture [--ops N] [--pause-ms MS] [--eager-us US] [--replay-seconds S] [--wait-go] --out FILE\n"
               "       stamps ptx\n"
               "(see the comment at the top of test/gpu/stamps.c)\n");
}

static bool number(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= 0))
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    opt.mode = argv[1];
    if (!strcmp(opt.mode, "-h") || !strcmp(opt.mode, "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(opt.mode, "ptx")) {
        fputs(stamp_kernels_ptx, stdout);
        return 0;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        double v = 0;
        if (!strcmp(a, "--ready")) {
            opt.ready = true;
            continue;
        }
        if (!strcmp(a, "--wait-go")) {
            opt.wait_go = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "stamps: %s needs a value\n", a);
            return 1;
        }
        const char *value = argv[++i];
        if (!strcmp(a, "--out")) {
            opt.out = value;
            continue;
        }
        if (!strcmp(a, "--wait-in")) {
            if (strcmp(value, "stream") && strcmp(value, "event")) {
                fprintf(stderr, "stamps: --wait-in takes stream or event, got '%s'\n", value);
                return 1;
            }
            opt.wait_in = value;
            continue;
        }
        if (!number(value, &v)) {
            fprintf(stderr, "stamps: %s needs a number >= 0, got '%s'\n", a, value);
            return 1;
        }
        if (!strcmp(a, "--kernel-us")) opt.kernel_us = v;
        else if (!strcmp(a, "--seconds")) opt.seconds = v;
        else if (!strcmp(a, "--count")) opt.count = (long)v;
        else if (!strcmp(a, "--depth")) opt.depth = (long)v;
        else if (!strcmp(a, "--think-us")) opt.think_us = v;
        else if (!strcmp(a, "--graph-kernels")) opt.graph_kernels = (long)v;
        else if (!strcmp(a, "--ops")) opt.ops = (long)v;
        else if (!strcmp(a, "--pause-ms")) opt.pause_ms = v;
        else if (!strcmp(a, "--eager-us")) opt.eager_us = v;
        else if (!strcmp(a, "--replay-seconds")) opt.replay_seconds = v;
        else {
            fprintf(stderr, "stamps: unknown option %s\n", a);
            usage(stderr);
            return 1;
        }
    }
    if (!opt.out || opt.depth < 1 || opt.depth > MAX_DEPTH || opt.graph_kernels < 1) {
        usage(stderr);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (!strcmp(opt.mode, "run"))
        return run();
    if (!strcmp(opt.mode, "infer"))
        return infer();
    if (!strcmp(opt.mode, "capture"))
        return capture();
    usage(stderr);
    return 1;
}
