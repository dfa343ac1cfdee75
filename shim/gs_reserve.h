/*
 * Reserving device memory before the driver allocates it (gs_reserve.c):
 * from the process's headroom, or by asking gpuslice-server for a lease.
 */
#ifndef GPUSLICE_RESERVE_H
#define GPUSLICE_RESERVE_H

#include "gs_dev.h"

/* Counts bytes more as held on d: from the headroom, or after asking the
 * server for more (a round trip: the caller holds no lock). Returns
 * CUDA_ERROR_OUT_OF_MEMORY when the tenant's cap leaves no room, and then
 * logs (at warn, a line a second at most) that `what` (the driver call)
 * asking for `asked` bytes (the application's size) was refused, with the
 * tenant's cap and count. */
CUresult gs_reserve(struct gs_dev *d, uint64_t bytes, const char *what, uint64_t asked);

#endif
