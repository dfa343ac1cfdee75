/*
 * spin: a CUDA driver-API sample that keeps one GPU busy with kernels of a
 * known length and reports how many it got through.
 *
 * The kernel spins on %globaltimer for the nanoseconds in its first
 * parameter. It is PTX, JIT-compiled by the driver, so no nvcc is needed;
 * the same binary runs on a real GPU and on fakecuda (whose "spin*" kernels
 * take exactly that long by definition). With --collective it launches
 * "collective" kernels instead, one rank of a multi-GPU job: on fakecuda
 * each waits for its peer ranks as an NCCL collective does.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "spin_kernels.h"

#define CUDA_DRIVER_FUNCTIONS(X)                                                                                  \
    X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxSetFlags) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)          \
    X(cuModuleLoadData) X(cuModuleGetFunction) X(cuStreamCreate) X(cuEventCreate) X(cuMemAlloc)                    \
    X(cuEventQuery) X(cuMemcpyHtoDAsync) X(cuEventRecord) X(cuStreamSynchronize) X(cuEventSynchronize)             \
    X(cuLaunchKernel) X(cuEventDestroy) X(cuStreamDestroy) X(cuModuleUnload) X(cuDevicePrimaryCtxRelease)          \
    X(cuGetErrorName)
#include "cuda_driver.h"


#define MAX_DEPTH 1024
#define MAX_RANKS 64

static void usage(FILE *out)
{
    fprintf(out,
"Usage: spin [--kernel-us US] [--seconds S | --count N] [--depth D] [--device I]\n"
"            [--sync-every N] [--copy-mb MB] [--blocking-sync]\n"
"            [--collective GROUP:RANK:NRANKS --count N]\n"
"\n"
"Launches kernels that each keep the GPU busy for US microseconds, one\n"
"stream, at most D in flight, until S seconds have passed or N kernels ran.\n"
"Then prints one line:\n"
"  spin: pid=P device=I kernel_us=US kernels=K wall_s=W kernels_per_s=R\n"
"(with --copy-mb followed by copies=C, with --collective by\n"
"collective=GROUP:RANK:NRANKS).\n"
"\n"
"Options:\n"
"  --kernel-us US   length of each kernel in microseconds (default 1000)\n"
"  --seconds S      run for S seconds (default 5; decimals allowed)\n"
"  --count N        run exactly N kernels instead of a time\n"
"  --depth D        kernels in flight at most, 1..%d (default 16)\n"
"  --device I       device ordinal (default 0)\n"
"  --sync-every N   after every N launches, wait for the stream to finish\n"
"                   (cuStreamSynchronize), as a training step's loss.item()\n"
"                   or a server's per-batch wait does; 1 = after every\n"
"                   launch. Default: never, keeping D kernels in flight\n"
"  --blocking-sync  wait for kernels by sleeping, not spinning a CPU core\n"
"                   (CU_CTX_SCHED_BLOCKING_SYNC on the primary context)\n"
"  --copy-mb MB     meanwhile, keep one host-to-device copy of MB MiB in flight\n"
"                   on a second stream (a weight load beside the kernels); the\n"
"                   line then ends with copies=C, the copies that finished\n"
"  --collective GROUP:RANK:NRANKS\n"
"                   be rank RANK (0..NRANKS-1) of an NRANKS-rank job whose\n"
"                   communicator is the positive integer GROUP: launch kernel\n"
"                   \"collective\" instead of \"spin\", passing (US in ns, GROUP,\n"
"                   the launch's index from 0 as its sequence number, RANK,\n"
"                   NRANKS). Start one spin per rank, each on its own device,\n"
"                   with the same GROUP, NRANKS and --count. On fakecuda each\n"
"                   collective, once on its device, keeps the device busy until\n"
"                   every rank has started the collective of the same index, as\n"
"                   an NCCL all-reduce does, then for US microseconds; one rank\n"
"                   missing ends it after FAKECUDA_COLLECTIVE_TIMEOUT_NS. On a\n"
"                   real GPU it only spins for US: nothing is exchanged.\n"
"                   NRANKS is 1..%d. Needs --count, since every rank must\n"
"                   launch the same collectives\n"
"  -h, --help       show this help (no driver needed)\n"
"  -V, --version    show the version\n"
"\n"
"The driver is libcuda.so.1, loaded once the options are read, from the\n"
"library path (LD_LIBRARY_PATH: fakecuda's directory, on a machine\n"
"without a GPU).\n"
"\n"
"Exit status: 0 on success, 1 on a usage error, 2 on a CUDA error (or no\n"
"driver).\n",
            MAX_DEPTH, MAX_RANKS);
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
    fprintf(stderr, "spin: %s failed: %s (%d)\n", what, name, (int)rc);
    return 1;
}

static int parse_positive(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v > 0))
        return 1;
    *out = v;
    return 0;
}

/* GROUP:RANK:NRANKS, each a decimal number: GROUP >= 1, RANK < NRANKS <=
 * MAX_RANKS. Returns 0 on success. */
static int parse_collective(const char *text, uint64_t *group, uint32_t *rank, uint32_t *nranks)
{
    unsigned long long v[3];
    const char *p = text;
    for (int i = 0; i < 3; i++) {
        char *end;
        if (*p < '0' || *p > '9')
            return 1;
        errno = 0;
        v[i] = strtoull(p, &end, 10);
        if (errno || *end != (i < 2 ? ':' : '\0'))
            return 1;
        p = end + (i < 2);
    }
    if (v[0] == 0 || v[2] == 0 || v[2] > MAX_RANKS || v[1] >= v[2])
        return 1;
    *group = v[0];
    *rank = (uint32_t)v[1];
    *nranks = (uint32_t)v[2];
    return 0;
}

static const char *option_name(const struct option *options, int opt)
{
    for (; options->name; options++)
        if (options->val == opt)
            return options->name;
    return "?";
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"kernel-us", required_argument, NULL, 'k'}, {"seconds", required_argument, NULL, 's'},
        {"count", required_argument, NULL, 'n'},     {"depth", required_argument, NULL, 'd'},
        {"device", required_argument, NULL, 'D'},    {"copy-mb", required_argument, NULL, 'c'},
        {"blocking-sync", no_argument, NULL, 'b'}, {"sync-every", required_argument, NULL, 'S'},
        {"collective", required_argument, NULL, 'C'}, {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},          {NULL, 0, NULL, 0},
    };
    double kernel_us = 1000, seconds = 5, count = 0, depth = 16, device = 0, copy_mb = 0, sync_every = 0;
    bool blocking_sync = false, collective = false;
    uint64_t group = 0;
    uint32_t rank = 0, nranks = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "hV", options, NULL)) != -1) {
        double *target = NULL;
        switch (opt) {
        case 'k': target = &kernel_us; break;
        case 's': target = &seconds; break;
        case 'n': target = &count; break;
        case 'd': target = &depth; break;
        case 'c': target = &copy_mb; break;
        case 'S': target = &sync_every; break;
        case 'D':
            device = atoi(optarg);
            if (device < 0 || strspn(optarg, "0123456789") != strlen(optarg)) {
                fprintf(stderr, "spin: --device needs a device ordinal, got '%s'\n", optarg);
                return 1;
            }
            continue;
        case 'b': blocking_sync = true; continue;
        case 'C':
            if (parse_collective(optarg, &group, &rank, &nranks)) {
                fprintf(stderr, "spin: --collective needs GROUP:RANK:NRANKS with GROUP >= 1 and "
                        "RANK < NRANKS <= %d, got '%s'\n", MAX_RANKS, optarg);
                return 1;
            }
            collective = true;
            continue;
        case 'h': usage(stdout); return 0;
        case 'V': printf("spin (gpuslice) %s\n", GPUSLICE_VERSION); return 0;
        default: usage(stderr); return 1;
        }
        if (parse_positive(optarg, target)) {
            fprintf(stderr, "spin: --%s needs a positive number, got '%s'\n",
                    option_name(options, opt), optarg);
            return 1;
        }
    }
    if (sync_every != (double)(uint64_t)sync_every || depth != (double)(uint64_t)depth) {
        fprintf(stderr, "spin: --%s needs a whole number\n", sync_every != (double)(uint64_t)sync_every ? "sync-every" : "depth");
        return 1;
    }
    if (collective && count == 0) {
        fprintf(stderr, "spin: --collective needs --count N: every rank must launch the same collectives\n");
        return 1;
    }
    if (optind != argc || depth > MAX_DEPTH) {
        usage(stderr);
        return 1;
    }
    if (cuda_driver_load("spin") != 0)
        return 2;

    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction fn;
    CUstream stream;
    CUevent done[MAX_DEPTH];
    unsigned in_flight = (unsigned)depth;
    if (check(CU(cuInit)(0), "cuInit") || check(CU(cuDeviceGet)(&dev, (int)device), "cuDeviceGet") ||
        (blocking_sync && check(CU(cuDevicePrimaryCtxSetFlags)(dev, CU_CTX_SCHED_BLOCKING_SYNC),
                                "cuDevicePrimaryCtxSetFlags")) ||
        check(CU(cuDevicePrimaryCtxRetain)(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
        check(CU(cuCtxSetCurrent)(ctx), "cuCtxSetCurrent") ||
        check(CU(cuModuleLoadData)(&module, spin_kernels_ptx), "cuModuleLoadData") ||
        check(CU(cuModuleGetFunction)(&fn, module, collective ? "collective" : "spin"), "cuModuleGetFunction") ||
        check(CU(cuStreamCreate)(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
        return 2;
    for (unsigned i = 0; i < in_flight; i++)
        if (check(CU(cuEventCreate)(&done[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate"))
            return 2;
    /* The background copy: its own stream, buffers and completion event. */
    size_t copy_bytes = (size_t)(copy_mb * 1048576.0);
    CUstream copy_stream = NULL;
    CUdeviceptr copy_dst = 0;
    CUevent copy_done = NULL;
    unsigned char *copy_src = NULL;
    uint64_t copies = 0;
    bool copying = false;
    if (copy_bytes > 0) {
        if (!(copy_src = calloc(1, copy_bytes))) {
            fprintf(stderr, "spin: cannot allocate %zu bytes of host memory for --copy-mb\n", copy_bytes);
            return 2;
        }
        if (check(CU(cuStreamCreate)(&copy_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
            check(CU(cuMemAlloc)(&copy_dst, copy_bytes), "cuMemAlloc") ||
            check(CU(cuEventCreate)(&copy_done, CU_EVENT_DISABLE_TIMING), "cuEventCreate"))
            return 2;
    }

    uint64_t spin_ns = (uint64_t)(kernel_us * 1000.0);
    uint64_t seq = 0;
    void *spin_params[] = {&spin_ns};
    void *collective_params[] = {&spin_ns, &group, &seq, &rank, &nranks};
    void **params = collective ? collective_params : spin_params;
    uint64_t limit = count > 0 ? (uint64_t)count : UINT64_MAX;
    double start = now_s(), stop = start + seconds;
    uint64_t launched = 0;
    while (launched < limit && (count > 0 || now_s() < stop)) {
        if (copy_bytes > 0) {
            CUresult q = copying ? CU(cuEventQuery)(copy_done) : CUDA_SUCCESS;
            if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
                return check(q, "cuEventQuery"), 2;
            if (q == CUDA_SUCCESS) {
                copies += copying;
                if (check(CU(cuMemcpyHtoDAsync)(copy_dst, copy_src, copy_bytes, copy_stream), "cuMemcpyHtoDAsync") ||
                    check(CU(cuEventRecord)(copy_done, copy_stream), "cuEventRecord"))
                    return 2;
                copying = true;
            }
        }
        CUevent ev = done[launched % in_flight];
        if (sync_every > 0 && launched > 0 && launched % (uint64_t)sync_every == 0 &&
            check(CU(cuStreamSynchronize)(stream), "cuStreamSynchronize"))
            return 2;
        if (launched >= in_flight && check(CU(cuEventSynchronize)(ev), "cuEventSynchronize"))
            return 2;
        seq = launched; /* the collective's sequence number: the same on every rank */
        if (check(CU(cuLaunchKernel)(fn, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL), "cuLaunchKernel") ||
            check(CU(cuEventRecord)(ev, stream), "cuEventRecord"))
            return 2;
        launched++;
    }
    if (check(CU(cuStreamSynchronize)(stream), "cuStreamSynchronize"))
        return 2;
    double wall = now_s() - start;
    printf("spin: pid=%d device=%d kernel_us=%.0f kernels=%" PRIu64 " wall_s=%.3f kernels_per_s=%.1f",
           (int)getpid(), (int)device, kernel_us, launched, wall, (double)launched / wall);
    if (copy_bytes > 0)
        printf(" copies=%" PRIu64, copies);
    if (collective)
        printf(" collective=%" PRIu64 ":%u:%u", group, rank, nranks);
    printf("\n");
    fflush(stdout);
    for (unsigned i = 0; i < in_flight; i++)
        CU(cuEventDestroy)(done[i]);
    CU(cuStreamDestroy)(stream);
    if (copy_bytes > 0) {
        /* The copy still in flight is left to finish: exiting frees it. */
        CU(cuEventDestroy)(copy_done);
        free(copy_src);
    }
    CU(cuModuleUnload)(module);
    CU(cuDevicePrimaryCtxRelease)(dev);
    return 0;
}
