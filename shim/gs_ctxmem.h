/*
 * A context's own device memory (gs_ctxmem.c): counted from its creation
 * (and the wrappers of the calls that create contexts) to its death
 * (gs_lifetimes.c).
 */
#ifndef GPUSLICE_CTXMEM_H
#define GPUSLICE_CTXMEM_H

#include "gs_dev.h"

/* The primary context of dev died (release or reset): its footprint and
 * allocations are given back. */
void gs_ctxmem_primary_died(CUdevice dev);
void gs_ctxmem_after_fork_child(void);

#endif
