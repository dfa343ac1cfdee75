/*
 * Stream-ordered allocations (gs_mempools.c): what a pool grows by is
 * counted against the cap before the driver takes it.
 */
#ifndef GPUSLICE_MEMPOOLS_H
#define GPUSLICE_MEMPOOLS_H

#include "gs_dev.h"

/* A stream-ordered allocation from pool (NULL: the device's current pool)
 * on d's device: counts what the pool grows by, refusing growth past the
 * cap before the driver takes it. `real` makes the allocation; `what`
 * names it in a refusal's log line. *by_size
 * is set when the pool could not be followed (no entry left): the
 * allocation was counted by its size, and the caller counts it as an
 * allocation of its own (its free gives it back). */
CUresult gs_pool_alloc(const char *what, struct gs_dev *d, CUmemoryPool pool, uint64_t bytes,
                       CUresult (*real)(void *), void *args, bool *by_size);

#endif
