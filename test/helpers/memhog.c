/*
 * memhog: a test helper that allocates device memory in fixed chunks.
 *
 *   memhog --chunk-mb M --count N [--hold]
 *       allocates up to N chunks, stopping at the first failure; prints
 *       "memhog: pid=P allocated=K last_error=NAME" and, with --hold, keeps
 *       the memory until standard input closes.
 *   memhog --chunk-mb M --retry
 *       tries one allocation every 0.5 ms until it succeeds; prints
 *       "memhog: pid=P ok_ns=T" with the CLOCK_MONOTONIC time of success.
 *   memhog --chunk-mb M --random OPS [--seed S]
 *       OPS random steps, each an allocation or a free of a held chunk;
 *       prints "memhog: pid=P ops=OPS allocs=A frees=F ooms=O max_held=H".
 */
#include <cuda.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHUNKS 4096

static const char *error_name(CUresult rc)
{
    const char *name = NULL;
    return cuGetErrorName(rc, &name) == CUDA_SUCCESS && name ? name : "UNKNOWN";
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"chunk-mb", required_argument, NULL, 'c'}, {"count", required_argument, NULL, 'n'},
        {"random", required_argument, NULL, 'r'},   {"seed", required_argument, NULL, 's'},
        {"hold", no_argument, NULL, 'H'},           {"retry", no_argument, NULL, 'R'},
        {NULL, 0, NULL, 0},
    };
    long chunk_mb = 64, count = 1, random_ops = 0, seed = 1;
    int hold = 0, retry = 0, opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'c': chunk_mb = atol(optarg); break;
        case 'n': count = atol(optarg); break;
        case 'r': random_ops = atol(optarg); break;
        case 's': seed = atol(optarg); break;
        case 'H': hold = 1; break;
        case 'R': retry = 1; break;
        default: return 1;
        }
    }
    if (chunk_mb <= 0 || count <= 0 || count > MAX_CHUNKS)
        return 1;
    CUdevice dev;
    CUcontext ctx;
    CUresult rc;
    if ((rc = cuInit(0)) || (rc = cuDeviceGet(&dev, 0)) || (rc = cuDevicePrimaryCtxRetain(&ctx, dev)) ||
        (rc = cuCtxSetCurrent(ctx))) {
        fprintf(stderr, "memhog: setup failed: %s\n", error_name(rc));
        return 2;
    }
    size_t chunk = (size_t)chunk_mb << 20;
    static CUdeviceptr held[MAX_CHUNKS];
    long nheld = 0;

    if (retry) {
        printf("memhog: pid=%d state=waiting\n", (int)getpid());
        fflush(stdout);
        while ((rc = cuMemAlloc(&held[0], chunk)) == CUDA_ERROR_OUT_OF_MEMORY) {
            struct timespec pause = {0, 500000};
            nanosleep(&pause, NULL);
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        printf("memhog: pid=%d ok_ns=%lld last_error=%s\n", (int)getpid(),
               (long long)now.tv_sec * 1000000000ll + now.tv_nsec, error_name(rc));
        return rc == CUDA_SUCCESS ? 0 : 2;
    }

    if (random_ops > 0) {
        srand((unsigned)seed);
        long allocs = 0, frees = 0, ooms = 0, max_held = 0;
        for (long i = 0; i < random_ops; i++) {
            if (nheld > 0 && rand() % 3 == 0) {
                long victim = rand() % nheld;
                if ((rc = cuMemFree(held[victim])) != CUDA_SUCCESS) {
                    fprintf(stderr, "memhog: free failed: %s\n", error_name(rc));
                    return 2;
                }
                held[victim] = held[--nheld];
                frees++;
            } else if (nheld < MAX_CHUNKS) {
                rc = cuMemAlloc(&held[nheld], chunk);
                if (rc == CUDA_SUCCESS) {
                    nheld++;
                    allocs++;
                } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
                    ooms++;
                } else {
                    fprintf(stderr, "memhog: alloc failed: %s\n", error_name(rc));
                    return 2;
                }
            }
            if (nheld > max_held)
                max_held = nheld;
            struct timespec pause = {0, 200000};
            nanosleep(&pause, NULL);
        }
        printf("memhog: pid=%d ops=%ld allocs=%ld frees=%ld ooms=%ld max_held=%ld\n", (int)getpid(),
               random_ops, allocs, frees, ooms, max_held);
        return 0;
    }

    rc = CUDA_SUCCESS;
    while (nheld < count && (rc = cuMemAlloc(&held[nheld], chunk)) == CUDA_SUCCESS)
        nheld++;
    printf("memhog: pid=%d allocated=%ld last_error=%s\n", (int)getpid(), nheld, error_name(rc));
    fflush(stdout);
    if (hold) {
        char buf[64];
        while (fread(buf, 1, sizeof buf, stdin) > 0) {
        }
    }
    for (long i = 0; i < nheld; i++)
        cuMemFree(held[i]);
    return 0;
}
