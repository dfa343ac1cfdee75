/*
 * Device memory caps (gs_memory.c): the table of counted allocations and
 * the wrappers of every allocation, free and memory query. The other
 * memory files: the lease ledger (gs_lease.c), reserving against it
 * (gs_reserve.c), stream-ordered pools (gs_pools.c, gs_mempools.c), graph
 * allocation nodes (gs_graphmem.c), contexts' own memory (gs_ctxmem.c).
 */
#ifndef GPUSLICE_MEMORY_H
#define GPUSLICE_MEMORY_H

#include "gs_dev.h"

enum gs_alloc_kind { GS_K_PTR = 1, GS_K_VMM, GS_K_ARRAY, GS_K_MIPMAP, GS_K_CTX };

/* Remembers a counted allocation (key: pointer or handle) and the context
 * it dies with (NULL: none); its free gives back exactly bytes. False when
 * the table cannot grow (the bytes stay counted until exit). */
bool gs_mem_track(enum gs_alloc_kind kind, uint64_t key, const struct gs_dev *d, uint64_t bytes, CUcontext ctx);
/* A context died: everything it held is given back. */
void gs_mem_context_died(CUcontext ctx);
void gs_memory_after_fork_child(void);

#endif
