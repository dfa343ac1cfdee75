/*
 * Helpers the fakecuda C tests share: clocks (wall and the calling
 * thread's CPU time), a private state file, and spin kernels of a known
 * length. Include after cuda.h.
 */
#ifndef GPUSLICE_TEST_FAKECUDA_UTIL_H
#define GPUSLICE_TEST_FAKECUDA_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MS (1000ull * 1000)

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU time the calling thread has used. */
static inline uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Points FAKECUDA_STATE at a fresh file (created by fakecuda at cuInit);
 * returns its path, which the caller unlinks at the end. */
static inline const char *use_fresh_state(const char *devices, const char *memory)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/fakecuda-test-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        exit(2);
    close(fd);
    unlink(path);
    setenv("FAKECUDA_STATE", path, 1);
    setenv("FAKECUDA_DEVICES", devices, 1);
    setenv("FAKECUDA_MEMORY", memory, 1);
    return path;
}

/* A "spin" function of a freshly loaded module (needs a current context). */
static inline CUfunction spin_function(void)
{
    CUmodule mod;
    CUfunction f = NULL;
    if (cuModuleLoadData(&mod, "spin module") != CUDA_SUCCESS ||
        cuModuleGetFunction(&f, mod, "spin") != CUDA_SUCCESS)
        return NULL;
    return f;
}

/* Launches a kernel that takes `ns` of device time. */
static inline CUresult launch_spin(CUfunction f, CUstream stream, uint64_t ns)
{
    void *params[] = {&ns};
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL);
}

#endif
