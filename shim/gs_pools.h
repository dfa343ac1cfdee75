/*
 * The ledger of stream-ordered pools (gs_pools.c): per pool the device
 * memory it reserves, as counted against the cap, and reading the pools
 * again. Everything here takes the pools lock (gs_locks.h) itself, but the
 * _locked functions, whose caller holds it.
 */
#ifndef GPUSLICE_POOLS_H
#define GPUSLICE_POOLS_H

#include "gs_dev.h"

struct gs_pool {
    CUmemoryPool handle;     /* NULL: free entry */
    struct gs_dev *dev;
    uint64_t counted;        /* its reserved bytes, as last read */
};

/* The entry of pool `handle`, made on first sight on d (what it held before
 * the shim saw it counted at once); NULL when no entry is left. */
struct gs_pool *gs_pool_find_locked(CUmemoryPool handle, struct gs_dev *d);
/* What the driver says pool `handle` reserves, or `fallback`. */
uint64_t gs_pool_reserved(CUmemoryPool handle, uint64_t fallback);
/* Counts what p reserves now (`reserved`): more taken anyway (the driver
 * has it), less given back. */
void gs_pool_settle_locked(struct gs_pool *p, uint64_t reserved);
/* Pool `handle` is destroyed: what it still uses stays counted for good. */
void gs_pool_forget_locked(CUmemoryPool handle, uint64_t used);

/* Reads every pool again and counts what each holds (pool memory goes back
 * to the device at points only the driver knows). `blocking`: wait for
 * the pools lock rather than skip (the gate thread never waits for it). */
void gs_pools_settle(bool blocking);
/* A stream-ordered free was queued: the pools want reading again (the
 * gate thread is woken to tick). */
void gs_pools_touched(void);
bool gs_pools_pending(void);
void gs_pools_after_fork_child(void);

#endif
