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
    bool latency;              /* class = latency */
    unsigned processes;
};

/* UUID="GPU-<36>",gpu="<index>",modelName="...",Hostname="..." */
#define GPU_LABELS_MAX 512
/* pid, container_id, pod_uid, namespace, pod, container */
#define PROC_LABELS_MAX 768
#define HOST_LABEL_MAX 300
/* Processes listed in one scrape, at most: per-process series are for
 * seeing who holds what, not for every connection of a hostile tenant. */
#define SNAP_PROCESSES_MAX 4096

struct snap_gpu {
    char labels[GPU_LABELS_MAX]; /* no NUL; labels_len bytes */
    size_t labels_len;
    uint64_t held_ns, slices, preemptions;
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

struct snap_proc {                /* one connected process */
    size_t tenant;
    char labels[PROC_LABELS_MAX]; /* pid="...",...: no NUL; labels_len bytes */
    size_t labels_len;
};

struct snap_proc_gpu {            /* one process's slot on a GPU */
    size_t proc, gpu;
    uint64_t bytes;
};

struct metrics_snapshot {
    struct snap_tenant *tenants;
    struct snap_gpu *gpus;
    struct snap_pair *pairs;
    struct snap_proc *procs;
    struct snap_proc_gpu *proc_gpus;
    size_t ntenants, ngpus, npairs, nprocs, nproc_gpus;
    char host_label[HOST_LABEL_MAX]; /* Hostname="...", or empty */
    size_t host_label_len;
    uint64_t reloads[RELOAD_RESULTS], drops[DROP_REASONS];
    double start_time;
    unsigned connections;
};

#endif
