/*
 * Helpers shared by the side-by-side benchmarks: a monotonic clock, the
 * median, and symbol lookup that fails loudly.
 */
#ifndef GPUSLICE_BENCH_UTIL_H
#define GPUSLICE_BENCH_UTIL_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int bench_compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bench_compare);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline void *bench_sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "bench: %s: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

#endif
