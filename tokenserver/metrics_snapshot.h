/*
 * The layout of a /metrics snapshot (metrics_snapshot.c fills it,
 * metrics_render.c writes it out): every figure copied at one instant, so
 * that a scrape written out over many wake-ups is consistent, and owes
 * nothing to tenants or GPUs that go away meanwhile.
 */
#ifndef GPUSLICE_METRICS_SNAPSHOT_H
#define GPUSLICE_METRICS_SNAPSHOT_H

#include "metrics.h"

struct snap_tenant {
    char name[GS_NAME_MAX];
    double share, limit;
    uint64_t quantum_ns;
    unsigned processes;
};

#define GPU_LABELS_MAX 64 /* UUID="GPU-<36>",gpu="<index>" */

struct snap_gpu {
    char labels[GPU_LABELS_MAX]; /* no NUL; labels_len bytes */
    size_t labels_len;
    uint64_t held_ns, slices;
    struct histogram handoff;
    long holder;                 /* index into tenants, -1 if idle */
    size_t processes;
};

struct snap_pair {                /* one tenant on one GPU */
    size_t tenant, gpu;           /* indexes into tenants and gpus */
    uint64_t used_ns, wait_ns, slices;
    uint64_t mem_used, mem_cap, mem_peak, oom_refusals;
    double target, achieved;
    struct histogram overrun;
};

struct metrics_snapshot {
    struct snap_tenant *tenants;
    struct snap_gpu *gpus;
    struct snap_pair *pairs;
    size_t ntenants, ngpus, npairs;
    uint64_t reloads[RELOAD_RESULTS], drops[DROP_REASONS];
    double start_time;
    unsigned connections;
};

#endif
