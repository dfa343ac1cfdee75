/*
 * launch_overhead_bench: what libgpuslice.so adds to a kernel launch.
 *
 * One process opens the real driver (fakecuda in the suite, NVIDIA's on a
 * GPU: whichever libcuda.so.1 LD_LIBRARY_PATH finds) and the shim side by side, and launches empty kernels through each in
 * alternating batches, so both see the same machine at the same moment.
 * Each batch starts behind one 2 ms spin kernel (untimed), so the
 * simulated device is busy and its worker never contends with the
 * launches being timed; the queue is drained, untimed, between batches, so
 * no batch ever blocks on a full queue. What is left is the cost of the
 * call itself. Prints ns per launch for each (median over batches) and the
 * median of the per-round differences: the gated launch path. Then the same
 * for cuCtxSetCurrent, a wrapper with no gate: the interception layer
 * alone. Each of the two differences is a target (bench_util.h's
 * BENCH-RESULT lines, declared with --targets); the exit status does not
 * depend on them.
 *
 *   launch_overhead_bench SHIM.so [ROUNDS [BATCH]]
 *   launch_overhead_bench --targets
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "spin_kernels.h"

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);


#define CALL(lib, name, type, ...) ((type)(uintptr_t)bench_sym(lib, name))(__VA_ARGS__)

#define BENCHMARK "bench/launch_overhead_bench"
static const struct bench_target targets[] = {
    {"shim.passthrough",
     "what the interception layer adds to a call: cuCtxSetCurrent through the shim less without it, "
     "median of per-round differences",
     "ns", "<=", 5},
    {"shim.gated_launch",
     "what the gate adds to a kernel launch with a slice held: cuLaunchKernel through the shim less "
     "without it, median of per-round differences",
     "ns", "<=", 20},
};

int main(int argc, char **argv)
{
    if (bench_declare_if_asked(argc, argv, BENCHMARK, targets, sizeof targets / sizeof targets[0]))
        return 0;
    if (argc < 2) {
        fprintf(stderr, "usage: launch_overhead_bench SHIM.so [ROUNDS [BATCH]]\n");
        return 1;
    }
    size_t rounds = argc > 2 ? strtoul(argv[2], NULL, 10) : 2000;
    size_t batch = argc > 3 ? strtoul(argv[3], NULL, 10) : 500;
    if (rounds == 0 || batch == 0 || batch > 1000) {
        fprintf(stderr, "launch_overhead_bench: ROUNDS > 0 and 0 < BATCH <= 1000\n");
        return 1;
    }
    void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *shim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!real || !shim) {
        fprintf(stderr, "launch_overhead_bench: %s\n", dlerror());
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn, spin;
    if (CALL(real, "cuInit", CUresult (*)(unsigned), 0) ||
        CALL(real, "cuDeviceGet", CUresult (*)(CUdevice *, int), &dev, 0) ||
        CALL(real, "cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext *, CUdevice), &ctx, dev) ||
        CALL(real, "cuCtxSetCurrent", CUresult (*)(CUcontext), ctx) ||
        CALL(real, "cuModuleLoadData", CUresult (*)(CUmodule *, const void *), &mod, spin_kernels_ptx) ||
        CALL(real, "cuModuleGetFunction", CUresult (*)(CUfunction *, CUmodule, const char *), &fn, mod,
             "empty") ||
        CALL(real, "cuModuleGetFunction", CUresult (*)(CUfunction *, CUmodule, const char *), &spin, mod,
             "spin")) {
        fprintf(stderr, "launch_overhead_bench: CUDA setup failed\n");
        return 2;
    }
    CUresult (*sync)(void) = (CUresult (*)(void))(uintptr_t)bench_sym(real, "cuCtxSynchronize");
    launch_fn variants[2] = {(launch_fn)(uintptr_t)bench_sym(real, "cuLaunchKernel"),
                             (launch_fn)(uintptr_t)bench_sym(shim, "cuLaunchKernel")};
    double *per_launch[2], *diff = calloc(rounds, sizeof *diff);
    per_launch[0] = calloc(rounds, sizeof(double));
    per_launch[1] = calloc(rounds, sizeof(double));
    if (!diff || !per_launch[0] || !per_launch[1])
        return 2;

    for (size_t r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int v = (int)((r + (size_t)k) % 2); /* alternate which goes first */
            launch_fn launch = variants[v];
            uint64_t spin_ns = 2000000;
            void *spin_args[] = {&spin_ns};
            variants[0](spin, 1, 1, 1, 1, 1, 1, 0, NULL, spin_args, NULL);
            uint64_t t0 = bench_now_ns();
            for (size_t i = 0; i < batch; i++)
                if (launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) {
                    fprintf(stderr, "launch_overhead_bench: launch failed\n");
                    return 2;
                }
            per_launch[v][r] = (double)(bench_now_ns() - t0) / (double)batch;
            sync();
        }
        diff[r] = per_launch[1][r] - per_launch[0][r];
    }
    /* The interception layer alone: a wrapper with no gate, on a call
     * that costs the driver little. */
    typedef CUresult (*set_fn)(CUcontext);
    set_fn totals[2] = {(set_fn)(uintptr_t)bench_sym(real, "cuCtxSetCurrent"),
                        (set_fn)(uintptr_t)bench_sym(shim, "cuCtxSetCurrent")};
    double *pass[2] = {calloc(rounds, sizeof(double)), calloc(rounds, sizeof(double))};
    double *pass_diff = calloc(rounds, sizeof(double));
    if (!pass[0] || !pass[1] || !pass_diff)
        return 2;
    for (size_t r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int v = (int)((r + (size_t)k) % 2);
            uint64_t t0 = bench_now_ns();
            for (size_t i = 0; i < batch; i++)
                totals[v](ctx);
            pass[v][r] = (double)(bench_now_ns() - t0) / (double)batch;
        }
        pass_diff[r] = pass[1][r] - pass[0][r];
    }

    double d = bench_median(diff, rounds);
    double without = bench_median(per_launch[0], rounds), with = bench_median(per_launch[1], rounds);
    printf("launches: %zu per variant (%zu rounds of %zu)\n", rounds * batch, rounds, batch);
    printf("without shim: %.1f ns/launch (median)\n", without);
    printf("with shim:    %.1f ns/launch (median)\n", with);
    printf("overhead:     %.1f ns/launch (median of per-round differences)\n", d);
    printf("ratio:        %.3f\n", with / without);
    double pass_without = bench_median(pass[0], rounds), pass_with = bench_median(pass[1], rounds);
    double pd = bench_median(pass_diff, rounds);
    printf("pass-through (cuCtxSetCurrent): %.1f ns without, %.1f ns with, overhead %.1f ns (median of differences)\n",
           pass_without, pass_with, pd);
    char note[128];
    snprintf(note, sizeof note, "%.1f ns without the shim, %.1f ns with", pass_without, pass_with);
    bench_result(&targets[0], BENCHMARK, pd, note);
    snprintf(note, sizeof note, "%.1f ns without the shim, %.1f ns with", without, with);
    bench_result(&targets[1], BENCHMARK, d, note);
    return 0;
}
