/*
 * infer: a CUDA driver-API sample shaped like an inference service. Each
 * step (a request) launches a few short kernels, waits for them
 * (cuStreamSynchronize, as a server waits for its batch's answer), then
 * does host work before the next step. It reports each step's latency by
 * its own clock: from the step's first launch to the end of its wait. So
 * it shows how long a tenant waits for the GPU, independently of gpuslice.
 *
 * The kernels are spin's (examples/spin/spin_kernels.h): PTX that spins on
 * %globaltimer, JIT-compiled by a real driver; on fakecuda a "spin" kernel
 * takes exactly its parameter's time.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "spin_kernels.h"

#define CUDA_DRIVER_FUNCTIONS(X)                                                                                  \
    X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxSetFlags) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)          \
    X(cuModuleLoadData) X(cuModuleGetFunction) X(cuStreamCreate) X(cuStreamSynchronize) X(cuLaunchKernel)          \
    X(cuStreamDestroy) X(cuModuleUnload) X(cuDevicePrimaryCtxRelease) X(cuGetErrorName)
#include "cuda_driver.h"

#define MAX_STEPS 10000000

static void usage(FILE *out)
{
    fprintf(out,
"Usage: infer [--kernels N] [--kernel-us US] [--host-ms MS] [--seconds S | --steps N]\n"
"             [--device I] [--blocking-sync] [--every]\n"
"\n"
"An inference-like loop: each step launches N kernels of US microseconds on\n"
"one stream, waits for them (cuStreamSynchronize), then spends MS\n"
"milliseconds on the host (asleep) before the next step. Then prints one\n"
"line with the steps' latencies (first launch to the end of the wait):\n"
"  infer: pid=P steps=K first_ms=F p50_ms=A p99_ms=B max_ms=C wall_s=W\n"
"first_ms is the first step's latency: the wait of a service that gets a\n"
"request after a pause.\n"
"\n"
"Options:\n"
"  --kernels N      kernels per step, 1..1024 (default 4)\n"
"  --kernel-us US   length of each kernel in microseconds (default 250)\n"
"  --host-ms MS     host work between steps in milliseconds, 0 or more\n"
"                   (default 5)\n"
"  --seconds S      run for S seconds (default 5; decimals allowed)\n"
"  --steps N        run exactly N steps instead of a time\n"
"  --device I       device ordinal (default 0)\n"
"  --blocking-sync  wait by sleeping, not spinning a CPU core\n"
"                   (CU_CTX_SCHED_BLOCKING_SYNC on the primary context)\n"
"  --every          also print each step's latency, one line each:\n"
"                   step=I ms=L\n"
"  -h, --help       show this help (no driver needed)\n"
"  -V, --version    show the version\n"
"\n"
"Exit status: 0 on success, 1 on a usage error, 2 on a CUDA error.\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int check(CUresult rc, const char *what)
{
    if (rc == CUDA_SUCCESS)
        return 0;
    const char *name = NULL;
    if (CU(cuGetErrorName)(rc, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUDA error";
    fprintf(stderr, "infer: %s failed: %s (%d)\n", what, name, (int)rc);
    return 1;
}

/* A number >= min (> 0 when min is 0 and positive is set). */
static int parse_number(const char *text, double min, bool positive, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= min) || (positive && !(v > 0)))
        return 1;
    *out = v;
    return 0;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"kernels", required_argument, NULL, 'n'},   {"kernel-us", required_argument, NULL, 'k'},
        {"host-ms", required_argument, NULL, 'H'},   {"seconds", required_argument, NULL, 's'},
        {"steps", required_argument, NULL, 'S'},     {"device", required_argument, NULL, 'D'},
        {"blocking-sync", no_argument, NULL, 'b'},   {"every", no_argument, NULL, 'e'},
        {"help", no_argument, NULL, 'h'},            {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    double kernels = 4, kernel_us = 250, host_ms = 5, seconds = 5, steps = 0, device = 0;
    bool blocking_sync = false, every = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "hV", options, NULL)) != -1) {
        int bad = 0;
        const char *name = NULL;
        switch (opt) {
        case 'n': bad = parse_number(optarg, 1, true, &kernels) || kernels > 1024 || kernels != (int)kernels; name = "kernels"; break;
        case 'k': bad = parse_number(optarg, 0, true, &kernel_us); name = "kernel-us"; break;
        case 'H': bad = parse_number(optarg, 0, false, &host_ms); name = "host-ms"; break;
        case 's': bad = parse_number(optarg, 0, true, &seconds); name = "seconds"; break;
        case 'S': bad = parse_number(optarg, 1, true, &steps) || steps > MAX_STEPS || steps != (int)steps; name = "steps"; break;
        case 'D': bad = parse_number(optarg, 0, false, &device) || device != (int)device; name = "device"; break;
        case 'b': blocking_sync = true; break;
        case 'e': every = true; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("infer (gpuslice) %s\n", GPUSLICE_VERSION); return 0;
        default: usage(stderr); return 1;
        }
        if (bad) {
            fprintf(stderr, "infer: --%s got '%s': see --help for its range\n", name, optarg);
            return 1;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 1;
    }
    if (cuda_driver_load("infer") != 0)
        return 2;

    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction fn;
    CUstream stream;
    if (check(CU(cuInit)(0), "cuInit") || check(CU(cuDeviceGet)(&dev, (int)device), "cuDeviceGet") ||
        (blocking_sync && check(CU(cuDevicePrimaryCtxSetFlags)(dev, CU_CTX_SCHED_BLOCKING_SYNC),
                                "cuDevicePrimaryCtxSetFlags")) ||
        check(CU(cuDevicePrimaryCtxRetain)(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
        check(CU(cuCtxSetCurrent)(ctx), "cuCtxSetCurrent") ||
        check(CU(cuModuleLoadData)(&module, spin_kernels_ptx), "cuModuleLoadData") ||
        check(CU(cuModuleGetFunction)(&fn, module, "spin"), "cuModuleGetFunction") ||
        check(CU(cuStreamCreate)(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
        return 2;

    size_t cap = steps > 0 ? (size_t)steps : 4096, n = 0;
    double *latency = malloc(cap * sizeof *latency);
    if (!latency) {
        fprintf(stderr, "infer: out of memory\n");
        return 2;
    }
    uint64_t spin_ns = (uint64_t)(kernel_us * 1000.0);
    void *params[] = {&spin_ns};
    double start = now_s(), stop = start + seconds;
    while (steps > 0 ? n < (size_t)steps : now_s() < stop) {
        double begin = now_s();
        for (int k = 0; k < (int)kernels; k++)
            if (check(CU(cuLaunchKernel)(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL), "cuLaunchKernel"))
                return 2;
        if (check(CU(cuStreamSynchronize)(stream), "cuStreamSynchronize"))
            return 2;
        double took = now_s() - begin;
        if (n == cap) {
            double *grown = realloc(latency, 2 * cap * sizeof *latency);
            if (!grown) {
                fprintf(stderr, "infer: out of memory\n");
                return 2;
            }
            latency = grown;
            cap *= 2;
        }
        if (every)
            printf("step=%zu ms=%.3f\n", n, took * 1e3);
        latency[n++] = took;
        sleep_s(host_ms / 1e3);
    }
    double wall = now_s() - start, first = latency[0];
    qsort(latency, n, sizeof *latency, by_value);
    printf("infer: pid=%d steps=%zu first_ms=%.3f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f wall_s=%.3f\n", (int)getpid(),
           n, first * 1e3, latency[n / 2] * 1e3, latency[(n * 99 + 99) / 100 - 1] * 1e3, latency[n - 1] * 1e3,
           wall);
    fflush(stdout);
    free(latency);
    CU(cuStreamDestroy)(stream);
    CU(cuModuleUnload)(module);
    CU(cuDevicePrimaryCtxRelease)(dev);
    return 0;
}
