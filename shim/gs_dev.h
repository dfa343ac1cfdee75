/*
 * A GPU the process uses, as the shim keeps it (the table gs_devs is
 * gs_dispatch.c's): its slice machine (gs_slice.h), which the fast path
 * reads without a lock, and, under the gate lock (gs_locks.h), what the
 * drainer waits on for it and who it is.
 */
#ifndef GPUSLICE_DEV_H
#define GPUSLICE_DEV_H

#include "gs_driver.h"
#include "gs_slice.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "gpuslice/protocol.h"

#define GS_MAX_TRACKED_STREAMS 32 /* streams with admitted work, per device and slice */
#define GS_MAX_FLUSH_MARKS 64      /* events recorded ahead of a capture, per device */

struct gs_ctx;                     /* gs_contexts.h */

/* A stream the shim admitted work to in the current slice. The legacy
 * default stream of a context is stream CU_STREAM_LEGACY; per-thread
 * default streams are never listed (only their own thread can name them:
 * see gs_drain.c's thread marks). */
struct gs_tracked_stream {
    CUstream stream;
    struct gs_ctx *ctx;
};

/* An event recorded for the drainer to wait on, in ctx's pool. */
struct gs_flush_mark {
    CUevent event;
    struct gs_ctx *ctx;
};

struct gs_dev {
    /* Hot: read by launching threads without a lock. */
    _Atomic uint32_t stream_set_gen; /* bumped when `streams` is emptied */
    struct gs_slice slice;       /* the slice machine's state */

    /* Cold: guarded by the gate lock. */
    bool used;
    int slot;                    /* its index in gs_devs: the protocol's slot */
    CUdevice ordinal;
    uint8_t uuid[16];
    uint64_t total_mem;          /* the real driver's cuDeviceTotalMem; 0 unknown */
    /* what the drainer waits on (gs_drain.c) */
    struct gs_tracked_stream streams[GS_MAX_TRACKED_STREAMS];
    int nstreams;
    struct gs_flush_mark flushes[GS_MAX_FLUSH_MARKS];
    int nflushes;
    pthread_t drainer;
    bool drainer_started;
};

/* How a call names its stream. */
enum gs_stream_kind { GS_STREAM_LEGACY, GS_STREAM_PER_THREAD, GS_STREAM_CREATED };

/* Where a launch on a stream goes: its kind, context and GPU (gs_lookup.c). */
struct gs_launch_target {
    enum gs_stream_kind kind;
    CUstream stream;             /* CU_STREAM_LEGACY for the legacy stream */
    struct gs_ctx *ctx;
    struct gs_dev *dev;
};

/* Every GPU the process uses, by slot: GS_MAX_DEVICES of them
 * (gs_dispatch.c's, in its struct gs_dispatch_state). */
extern struct gs_dev *gs_devs;

/* CLOCK_MONOTONIC in ns: the one reading a thread takes before it steps a
 * slice machine (never on the fast path). */
static inline uint64_t gs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
