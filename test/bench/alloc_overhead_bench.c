/*
 * alloc_overhead_bench: what a memory cap costs an allocation. One process
 * opens the real driver (fakecuda) and libgpuslice.so side by side and
 * times cuMemAlloc_v2 + cuMemFree_v2 pairs through each in alternating
 * rounds, then cuMemAllocAsync + cuMemFreeAsync pairs (the default pool,
 * legacy stream) the same way. Through the shim, allocations are counted
 * against the cap of a tenant (GPUSLICE_SOCKET) from the process's lease of
 * headroom: only the first asks gpuslice-server. Prints the median pair time of each and
 * the median of the per-round differences, and, for scale, the round trip
 * of a bare 36-byte message between two processes over a Unix socket on the
 * same machine: the floor under any server that counts memory.
 *
 *   alloc_overhead_bench SHIM.so [ROUNDS [PAIRS]]
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*async_alloc_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*async_free_fn)(CUdeviceptr, CUstream);

/* Median round trip of a message to another process and back. */
static double socket_round_trip_us(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0)
        return -1;
    pid_t child = fork();
    if (child == 0) {
        char buf[64];
        ssize_t n;
        close(sv[0]);
        while ((n = recv(sv[1], buf, sizeof buf, 0)) > 0)
            if (send(sv[1], buf, (size_t)n, 0) != n)
                break;
        _exit(0);
    }
    close(sv[1]);
    enum { ROUNDS = 200, PER = 50 };
    double rtt[ROUNDS];
    char buf[64] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < PER; i++)
            if (send(sv[0], buf, 36, 0) != 36 || recv(sv[0], buf, sizeof buf, 0) <= 0)
                return -1;
        rtt[r] = (double)(bench_now_ns() - t0) / PER / 1000.0;
    }
    close(sv[0]);
    waitpid(child, NULL, 0);
    return bench_median(rtt, ROUNDS);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: alloc_overhead_bench SHIM.so [ROUNDS [PAIRS]]\n");
        return 1;
    }
    size_t rounds = argc > 2 ? strtoul(argv[2], NULL, 10) : 200;
    size_t pairs = argc > 3 ? strtoul(argv[3], NULL, 10) : 50;
    void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *shim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!real || !shim || rounds == 0 || pairs == 0) {
        fprintf(stderr, "alloc_overhead_bench: %s\n", real && shim ? "bad arguments" : dlerror());
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    if (((CUresult (*)(unsigned))(uintptr_t)bench_sym(real, "cuInit"))(0) ||
        ((CUresult (*)(CUdevice *, int))(uintptr_t)bench_sym(real, "cuDeviceGet"))(&dev, 0) ||
        ((CUresult (*)(CUcontext *, CUdevice))(uintptr_t)bench_sym(real, "cuDevicePrimaryCtxRetain"))(&ctx, dev) ||
        ((CUresult (*)(CUcontext))(uintptr_t)bench_sym(real, "cuCtxSetCurrent"))(ctx)) {
        fprintf(stderr, "alloc_overhead_bench: CUDA setup failed\n");
        return 2;
    }
    alloc_fn allocs[2] = {(alloc_fn)(uintptr_t)bench_sym(real, "cuMemAlloc_v2"),
                          (alloc_fn)(uintptr_t)bench_sym(shim, "cuMemAlloc_v2")};
    free_fn frees[2] = {(free_fn)(uintptr_t)bench_sym(real, "cuMemFree_v2"),
                        (free_fn)(uintptr_t)bench_sym(shim, "cuMemFree_v2")};
    async_alloc_fn async_allocs[2] = {(async_alloc_fn)(uintptr_t)bench_sym(real, "cuMemAllocAsync"),
                                      (async_alloc_fn)(uintptr_t)bench_sym(shim, "cuMemAllocAsync")};
    async_free_fn async_frees[2] = {(async_free_fn)(uintptr_t)bench_sym(real, "cuMemFreeAsync"),
                                    (async_free_fn)(uintptr_t)bench_sym(shim, "cuMemFreeAsync")};
    double *per_pair[2] = {calloc(rounds, sizeof(double)), calloc(rounds, sizeof(double))};
    double *diff = calloc(rounds, sizeof(double));
    if (!per_pair[0] || !per_pair[1] || !diff)
        return 2;
    for (int async = 0; async < 2; async++) {
        for (size_t r = 0; r < rounds; r++) {
            for (int k = 0; k < 2; k++) {
                int v = (int)((r + (size_t)k) % 2);
                uint64_t t0 = bench_now_ns();
                for (size_t i = 0; i < pairs; i++) {
                    CUdeviceptr p;
                    CUresult rc = async ? async_allocs[v](&p, 1 << 20, CU_STREAM_LEGACY) : allocs[v](&p, 1 << 20);
                    if (rc == CUDA_SUCCESS)
                        rc = async ? async_frees[v](p, CU_STREAM_LEGACY) : frees[v](p);
                    if (rc != CUDA_SUCCESS) {
                        fprintf(stderr, "alloc_overhead_bench: allocation failed (%s)\n", v ? "shim" : "driver");
                        return 2;
                    }
                }
                per_pair[v][r] = (double)(bench_now_ns() - t0) / (double)pairs / 1000.0;
            }
            diff[r] = per_pair[1][r] - per_pair[0][r];
        }
        const char *what = async ? "cuMemAllocAsync+cuMemFreeAsync" : "cuMemAlloc_v2+cuMemFree_v2";
        const char *tag = async ? "async-" : "";
        printf("%s: %zu pairs per variant (%zu rounds of %zu), 1 MiB each\n", what, rounds * pairs, rounds, pairs);
        printf("%swithout shim: %.2f us per pair (median)\n", tag, bench_median(per_pair[0], rounds));
        printf("%swith shim:    %.2f us per pair (median)\n", tag, bench_median(per_pair[1], rounds));
        printf("%sadded:        %.2f us per pair (median of per-round differences)\n", tag, bench_median(diff, rounds));
    }
    printf("floor:        %.2f us bare Unix-socket round trip between two processes (median)\n",
           socket_round_trip_us());
    return 0;
}
