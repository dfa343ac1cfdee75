/*
 * A fixed-bucket histogram of durations, kept in nanoseconds and exposed
 * in seconds (Prometheus "histogram"): the slice overrun per tenant and
 * GPU, and the handoff latency per GPU. Every histogram has the same
 * bucket bounds (HISTOGRAM_BOUNDS_NS), so that dashboards can sum them.
 */
#ifndef GPUSLICE_HISTOGRAM_H
#define GPUSLICE_HISTOGRAM_H

#include <stdint.h>

/* Upper bounds of the finite buckets, in ns; +Inf is the last bucket. */
#define HISTOGRAM_BOUNDS_NS                                                                                        \
    {100000ull, 500000ull, 1000000ull, 2000000ull, 5000000ull, 10000000ull, 25000000ull, 50000000ull, 100000000ull, \
     250000000ull, 1000000000ull}
#define HISTOGRAM_FINITE 11
#define HISTOGRAM_BUCKETS (HISTOGRAM_FINITE + 1)

struct histogram {
    uint64_t counts[HISTOGRAM_BUCKETS]; /* per bucket, not cumulative */
    uint64_t sum_ns;                    /* saturates */
};

void histogram_observe(struct histogram *h, uint64_t ns);
/* The bound of finite bucket i, in ns. */
uint64_t histogram_bound_ns(int i);

#endif
