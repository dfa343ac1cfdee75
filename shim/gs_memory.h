/*
 * What the memory files of the shim share: leases of headroom granted by
 * gpuslice-server (gs_lease.c), the table of counted allocations
 * (gs_memory.c), stream-ordered pools (gs_mempools.c) and contexts'
 * own device memory (gs_ctxmem.c).
 *
 * Lock order: a pool's or context's lock, then the allocation table's or
 * the lease lock, never the other way round; gs_gate_lock is never taken
 * while the table's, a pool's or the lease lock is held, except by the gate
 * thread, which takes the lease lock under it (a recall). No lock of these
 * files is held while waiting for the server but the pool and context
 * locks, which the gate thread never takes blocking.
 */
#ifndef GPUSLICE_MEMORY_H
#define GPUSLICE_MEMORY_H

#include "gs_gate.h"

/* ---- gs_lease.c ------------------------------------------------------------ */

/* Counts bytes more as held on d: from the process's headroom, or after
 * asking the server for more (without holding gs_gate_lock). Returns
 * CUDA_ERROR_OUT_OF_MEMORY when the tenant's cap leaves no room. */
CUresult gs_lease_take(struct gs_dev *d, uint64_t bytes);
/* Counts bytes as held although the cap may not allow them: memory the
 * driver already took (a context larger than its estimate, a pool's
 * growth). Never waits for the server: the gate thread calls it too. */
void gs_lease_take_anyway(struct gs_dev *d, uint64_t bytes);
/* No longer held: back to headroom; headroom far beyond what the process
 * uses goes back to the server at once. */
void gs_lease_give(struct gs_dev *d, uint64_t bytes);
/* The process's unused headroom on d. */
uint64_t gs_lease_headroom(const struct gs_dev *d);
/* The process's count on d (held plus headroom), for a reconnection's
 * MEM_DECLARE. Called by the gate thread with gs_gate_lock held. */
uint64_t gs_lease_count_locked(const struct gs_dev *d);
/* MEM_RECALL: gives up all headroom of d; returns the bytes to free.
 * Called by the gate thread with gs_gate_lock held. */
uint64_t gs_lease_recall_locked(const struct gs_dev *d);
/* The gate thread's periodic work, without gs_gate_lock: idle headroom
 * goes back, pools are read again. Returns the nanoseconds until it wants
 * to run again, or 0 for never. */
uint64_t gs_memory_tick(uint64_t now);
void gs_lease_after_fork_child(void);

/* ---- gs_memory.c ----------------------------------------------------------- */

enum gs_alloc_kind { GS_K_PTR = 1, GS_K_VMM, GS_K_ARRAY, GS_K_MIPMAP, GS_K_CTX };

/* Remembers a counted allocation (key: pointer or handle) and the context
 * it dies with (NULL: none). */
bool gs_mem_track(enum gs_alloc_kind kind, uint64_t key, const struct gs_dev *d, uint64_t bytes, CUcontext ctx);
/* A context died: everything it held is given back. */
void gs_mem_context_died(CUcontext ctx);

/* ---- gs_mempools.c --------------------------------------------------------- */

/* A stream-ordered allocation from pool (NULL: the device's current pool)
 * on d's device: counts what the pool grows by, refusing growth past the
 * cap before the driver takes it. `real` makes the allocation. */
CUresult gs_pool_alloc(struct gs_dev *d, CUmemoryPool pool, uint64_t bytes, CUdeviceptr *dptr,
                       CUresult (*real)(void *), void *args);
/* Reads every pool again and counts what each holds (pool memory goes back
 * to the device at points only the driver knows). `blocking`: wait for the
 * pools' lock rather than skip. */
void gs_pools_settle(bool blocking);
/* A stream-ordered free was queued: the pools want reading again. */
void gs_pools_touched(void);
/* Whether pools want reading again. */
bool gs_pools_pending(void);
void gs_pools_after_fork_child(void);

/* ---- gs_graphmem.c -------------------------------------------------------- */

/* cuMemAllocAsync of bytes into stream: if the stream is capturing, the
 * bytes are the graph's (taken at its first launch) and it returns true. */
bool gs_graphmem_captured(CUstream stream, int ptsz, uint64_t bytes);
/* stream began capturing into a graph of its own (cuStreamBeginCapture):
 * that graph allocates nothing yet, whatever an old graph of the same
 * handle did. */
void gs_graphmem_capture_began(CUstream stream, int ptsz);
/* Around a graph launch: the first launch of an executable graph that
 * allocates reserves what it allocates (CUDA_ERROR_OUT_OF_MEMORY past the
 * cap), then counts what the device's graph memory holds. */
struct gs_graph_launch {
    struct gs_dev *dev;      /* NULL: nothing reserved */
    uint64_t reserved;
};
CUresult gs_graphmem_before_launch(CUgraphExec exec, CUstream stream, int ptsz, struct gs_graph_launch *l);
void gs_graphmem_after_launch(CUgraphExec exec, const struct gs_graph_launch *l, CUresult rc);
void gs_graphmem_after_fork_child(void);

/* ---- gs_ctxmem.c ----------------------------------------------------------- */

/* Around a context's creation: reserves its footprint first (the last one
 * measured on the device, else GPUSLICE_CONTEXT_BYTES, 300 MiB by
 * default), then counts what it measured. */
struct gs_ctx_birth {
    struct gs_dev *dev;
    bool counted;            /* a footprint was reserved */
    bool measurable;         /* free memory was read before */
    uint64_t reserved, free_before;
};
CUresult gs_ctxmem_before(CUdevice dev, bool primary, struct gs_ctx_birth *b);
/* rc: the creation's result. Returns what the caller returns: on
 * CUDA_ERROR_OUT_OF_MEMORY the context has been destroyed again. */
CUresult gs_ctxmem_after(struct gs_ctx_birth *b, CUresult rc, CUcontext ctx, bool primary, CUdevice dev);
/* The primary context of dev died (release or reset). */
void gs_ctxmem_primary_died(CUdevice dev);
void gs_ctxmem_after_fork_child(void);

#endif
