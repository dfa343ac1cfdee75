/*
 * Fixed-bucket duration histograms (histogram.h): one comparison per
 * bucket bound to observe, nothing allocated.
 */
#include "histogram.h"

static const uint64_t bounds[HISTOGRAM_FINITE] = HISTOGRAM_BOUNDS_NS;

void histogram_observe(struct histogram *h, uint64_t ns)
{
    int i = 0;
    while (i < HISTOGRAM_FINITE && ns > bounds[i])
        i++;
    h->counts[i]++;
    h->sum_ns = ns <= UINT64_MAX - h->sum_ns ? h->sum_ns + ns : UINT64_MAX;
}

uint64_t histogram_bound_ns(int i)
{
    return bounds[i];
}
