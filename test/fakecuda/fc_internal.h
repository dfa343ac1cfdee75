/*
 * fakecuda internals: the declarations that the simulated driver's files
 * share with each other. Nothing outside test/fakecuda includes this.
 *
 * fakecuda is a test double for NVIDIA's libcuda.so.1. Several processes
 * that name the same FAKECUDA_STATE file share one set of simulated GPUs:
 * one kernel at a time per device (the engine), device memory accounted
 * across processes, and a meter of true busy time per process. See
 * fc_state.h for the shared part and README.md in this folder for the
 * contract that tests rely on.
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H


/* Compile as the driver does: every versioned name literally, no macros. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fc_state.h"

#define FC_API __attribute__((visibility("default")))
#define FC_DRIVER_VERSION 13000
#define FC_MAX_PENDING 1024

/* ---- handles (fc_handles.c) ------------------------------------------- */

/* Every opaque CUDA handle fakecuda gives out is an index into one
 * process-wide table, tagged with its type and a generation, so that a
 * garbage, stale or wrongly typed handle is detected instead of
 * dereferenced. */
enum fc_handle_type {
    FC_H_CONTEXT = 1,
    FC_H_STREAM,
    FC_H_EVENT,
    FC_H_MODULE,
    FC_H_FUNCTION,
    FC_H_LIBRARY,
    FC_H_GRAPH,
    FC_H_GRAPH_NODE,
    FC_H_GRAPH_EXEC,
    FC_H_ARRAY,
    FC_H_MIPMAP,
    FC_H_MEMPOOL,
    FC_H_MEMHANDLE,
};

uint64_t fc_handle_new(enum fc_handle_type type, void *object);
void *fc_handle_get(enum fc_handle_type type, uint64_t handle);
void fc_handle_free(enum fc_handle_type type, uint64_t handle);
/* Like fc_handle_get, and tells a stale handle (one that was valid and has
 * been destroyed) from garbage. */
void *fc_handle_lookup(enum fc_handle_type type, uint64_t handle, bool *stale);
/* fc_handle_get for an application's argument: a stale handle is reported
 * under FAKECUDA_STRICT=1 (a line naming `call` on stderr, then abort()). */
void *fc_handle_use(const char *call, enum fc_handle_type type, uint64_t handle);
/* Reports a stale handle of `type` used by `call` (see fc_handle_use). */
void fc_stale_use(const char *call, enum fc_handle_type type, uint64_t handle);
void fc_handles_atfork_prepare(void);
void fc_handles_atfork_parent(void);
void fc_handles_atfork_child(void);

/* ---- work and its completion (fc_exec.c) ------------------------------ */

/* Execution state of the whole process (every context's streams, queues,
 * fences, events' last records and stream captures) is guarded by one
 * lock, fc_exec_lock() / fc_exec_unlock(). A stream or event object is
 * freed only under it, so a pointer looked up under it stays valid until
 * it is released. Lock order: proc_lock (fc_context.c), ctx_lock
 * (fc_ctx.c), the exec lock, mem_lock (fc_memory.c), then the handle
 * table's lock. */
void fc_exec_lock(void);
void fc_exec_unlock(void);
/* The lock itself, for condition waits. */
pthread_mutex_t *fc_exec_mutex(void);

enum fc_work_kind {
    FC_WORK_KERNEL, /* compute engine: `ns` of device time */
    FC_WORK_COPY,   /* copy engine: `bytes` from src to dst */
    FC_WORK_SET,    /* copy engine: `bytes` elements of `elem_size` set to `value` */
    FC_WORK_RECORD, /* an event record: done when what precedes it is */
    FC_WORK_WAIT,   /* done when the fence it waits for is */
    FC_WORK_FREE,   /* cuMemFreeAsync: frees `bytes` at dst of device `value` */
    FC_WORK_MEMALLOC, /* a graph's allocation node: `bytes` at dst (fc_graphmem.c); never queued */
};

/* A collective kernel's identity (fc_collective.c): rank `rank` of
 * `nranks` in the collective number `seq` of communicator `group`. */
struct fc_collective_args {
    uint64_t group, seq;
    uint32_t rank, nranks;
};

/* One piece of work as the application asked for it: what a queued op
 * does, and what a node of a graph holds. */
struct fc_work {
    enum fc_work_kind kind;
    uint64_t ns;
    bool collective;                 /* FC_WORK_KERNEL: first waits for its peers (coll) */
    struct fc_collective_args coll;
    void *stamp_out;                 /* FC_WORK_KERNEL of a "stamp*" kernel: where its two stamps go, or NULL */
    void *dst;
    const void *src;
    size_t bytes;
    uint32_t value;
    unsigned elem_size;
    bool dst_device, src_device; /* FC_WORK_COPY/SET: which side is device memory */
    uint64_t event; /* graph record/wait nodes: the event's handle */
};

/* The completion of one op. It outlives the op: the event recorded by it,
 * the ops that depend on it and the threads that wait for it hold
 * references. Guarded by the exec lock, except `done`, which spinning
 * waiters also read without it. */
struct fc_fence {
    _Atomic bool done;
    uint64_t time_ns;      /* when it completed */
    unsigned refs;
    unsigned waiters;      /* threads blocked until it is done */
    bool watched;          /* an op of another context depends on it */
};

struct fc_fence *fc_fence_ref(struct fc_fence *fence);
void fc_fence_unref(struct fc_fence *fence);

struct fc_op;
struct fc_capture;

enum fc_stream_kind {
    FC_STREAM_CREATED,    /* cuStreamCreate* */
    FC_STREAM_LEGACY,     /* NULL / CU_STREAM_LEGACY */
    FC_STREAM_PER_THREAD, /* CU_STREAM_PER_THREAD, NULL in the _ptsz/_ptds calls */
};

struct fc_stream {
    uint64_t handle;                 /* 0 for the legacy and per-thread streams */
    struct fc_ctx *ctx;
    enum fc_stream_kind kind;
    unsigned flags;                  /* CU_STREAM_NON_BLOCKING or 0 */
    int priority;
    uint64_t id;                     /* cuStreamGetId */
    pthread_t owner;                 /* FC_STREAM_PER_THREAD: its thread */

    /* Everything below is guarded by the exec lock. */
    struct fc_op *head, *tail;       /* queued, oldest first */
    struct fc_fence *last;           /* the last op queued; NULL if none */
    bool destroyed;                  /* freed once its queue drains */
    unsigned users;                  /* threads waiting to queue on it */
    bool active;                     /* on ctx->active (head != NULL) */
    struct fc_stream *next, *prev;   /* ctx->streams */
    struct fc_stream *active_next;   /* ctx->active */
    struct fc_capture *capture;      /* the capture it takes part in */
    size_t captured_nodes;           /* nodes it added to that capture */
    size_t capture_last_node;        /* index of the last of them in the graph */
    bool capture_joined;             /* its last node is joined back to the origin */
    CUgraphNode capture_dep_out;     /* what cuStreamGetCaptureInfo hands out */
    CUgraphEdgeData capture_edge_out;
};

/* Whether a stream synchronizes with the legacy stream: every stream but
 * those created with CU_STREAM_NON_BLOCKING ("Default Stream", CUDA
 * Programming Guide). */
bool fc_stream_blocking(const struct fc_stream *stream);

struct fc_ctx {
    uint64_t handle;
    int device;
    uint64_t footprint;              /* device memory the context itself holds */
    bool primary;
    unsigned flags;
    struct fc_stream *legacy;

    /* Bumped (under the exec lock) whenever work may have become ready;
     * an awake compute worker polls it without the lock (fc_exec.c). */
    _Atomic unsigned compute_pokes;

    /* Everything below is guarded by the exec lock. */
    pthread_cond_t compute_work;     /* the compute worker waits for ready kernels */
    pthread_cond_t copy_work;        /* the copy worker waits for ready copies */
    bool compute_idle, copy_idle;    /* each is waiting on its condition */
    unsigned queued_kernels;         /* ops queued for each engine */
    unsigned queued_transfers;
    pthread_cond_t space;            /* launchers wait while FC_MAX_PENDING are queued */
    struct fc_stream *streams;       /* every live stream, the legacy one included */
    struct fc_stream *active;        /* streams with queued ops */
    struct fc_fence *last_legacy;    /* the legacy stream's last op; blocking streams wait for it */
    unsigned pending;                /* ops queued and not yet complete */
    bool stopping;
    pthread_t compute_worker, copy_worker;
    bool workers_started;
    struct fc_event *events;         /* events created in it */
    struct fc_ctx *live_next;        /* fc_exec's list of live contexts */
    struct fc_ctx *retired_next;     /* see retired_ctxs in fc_context.c */
};

struct fc_event {
    uint64_t handle;
    struct fc_ctx *ctx;              /* where it was created */
    unsigned flags;
    /* Guarded by the exec lock: */
    struct fc_fence *fence;          /* its last record outside a capture; NULL if none */
    uint64_t capture_id;             /* last recorded inside this capture; 0 if not */
    uint64_t capture_stream_id;      /* ... in this stream (cuStreamGetId) */
    size_t capture_stream_nodes;     /* ... after its first N captured nodes */
    struct fc_event *next, *prev;    /* ctx->events */
};

/* Starts a context's execution (its workers start with its first work) and
 * ends it: fc_ctx_stop waits for everything queued, stops the workers and
 * frees its streams and events, whose handles become stale. */
void fc_ctx_exec_init(struct fc_ctx *ctx);
void fc_ctx_stop(struct fc_ctx *ctx);
/* Queues work on a stream that is not capturing, after the stream's
 * previous op, the legacy-stream ordering and `after` (may be NULL).
 * Blocks while FC_MAX_PENDING ops of the context are queued. With `fence`,
 * returns a reference to the new op's completion. Exec lock held. */
CUresult fc_enqueue_locked(struct fc_stream *stream, const struct fc_work *work, struct fc_fence *after,
                           struct fc_fence **fence);
uint64_t fc_kernel_default_ns(void);
uint64_t fc_copy_ns(size_t bytes);
/* Number of live contexts in the process (CU_CTX_SCHED_AUTO's C). */
unsigned fc_live_contexts_locked(void);
/* The first live context; the others follow through live_next. */
struct fc_ctx *fc_live_contexts_locked_first(void);
void fc_exec_atfork_prepare(void);
void fc_exec_atfork_parent(void);
void fc_exec_atfork_child(void);
/* Frees a destroyed stream whose queue has drained. Exec lock held. */
void fc_stream_release_locked(struct fc_stream *stream);
/* A new stream of the context (linked into ctx->streams). Exec lock held. */
struct fc_stream *fc_stream_new_locked(struct fc_ctx *ctx, enum fc_stream_kind kind, unsigned flags,
                                       int priority);

/* ---- waiting for the device (fc_sync.c) -------------------------------- */

/* How a thread waits for the device: CU_CTX_SCHED_* as cuCtxCreate
 * describes them. */
enum fc_wait_policy { FC_WAIT_SPIN, FC_WAIT_YIELD, FC_WAIT_BLOCK };

enum fc_wait_policy fc_ctx_wait_policy_locked(const struct fc_ctx *ctx);
/* Waits until every fence is done, then drops the references. Exec lock
 * held; released while waiting. */
void fc_wait_fences_locked(struct fc_fence **fences, size_t count, enum fc_wait_policy policy);
/* Wakes threads blocked in fc_wait_fences_locked. Exec lock held. */
void fc_wake_waiters_locked(void);
/* The fences that a synchronization of the stream waits for: its own last
 * op, and for the legacy stream every blocking stream's too. Returns the
 * count (references taken) or -1 when out of memory. */
long fc_stream_sync_fences_locked(struct fc_stream *stream, struct fc_fence ***out);
long fc_ctx_sync_fences_locked(struct fc_ctx *ctx, struct fc_fence ***out);

/* ---- process state (fc_context.c) ------------------------------------- */

/* The process's attachment to the shared state; NULL before cuInit. */
struct fc_shared *fc_shared_state(void);
int fc_self_slot(void);

/* Returns CUDA_SUCCESS or CUDA_ERROR_NOT_INITIALIZED. */
CUresult fc_check_init(void);
/* The calling thread's current context: NULL with CUDA_ERROR_INVALID_CONTEXT
 * (none), CUDA_ERROR_CONTEXT_IS_DESTROYED (destroyed since it was made
 * current) or NOT_INITIALIZED in *err. `call` names the entry point for
 * FAKECUDA_STRICT. */
struct fc_ctx *fc_current_ctx(const char *call, CUresult *err);
/* A context handle argument: NULL with CUDA_ERROR_INVALID_CONTEXT. */
struct fc_ctx *fc_ctx_from_handle(const char *call, CUcontext handle);
void fc_ctx_atfork_prepare(void);
void fc_ctx_atfork_parent(void);
void fc_ctx_atfork_child(void);

/* ---- streams (fc_streams.c) -------------------------------------------- */

/* How a NULL stream handle reads: the legacy stream, or, in the _ptsz and
 * _ptds entry points, the calling thread's per-thread default stream. */
enum fc_null_stream { FC_NULL_LEGACY, FC_NULL_PER_THREAD };

/* Resolves a stream argument under the exec lock: NULL, CU_STREAM_LEGACY
 * and CU_STREAM_PER_THREAD need a current context; a created stream does
 * not. */
CUresult fc_resolve_stream_locked(const char *call, CUstream hstream, enum fc_null_stream null_means,
                                  struct fc_stream **out);
void fc_streams_atfork_child(void);

/* The stream and event calls, for both flavours of entry point. */
CUresult fc_stream_synchronize(const char *call, CUstream hstream, enum fc_null_stream null_means);
CUresult fc_stream_query(const char *call, CUstream hstream, enum fc_null_stream null_means);
CUresult fc_stream_get_ctx(const char *call, CUstream hstream, enum fc_null_stream null_means,
                           CUcontext *pctx);
CUresult fc_stream_get_device(const char *call, CUstream hstream, enum fc_null_stream null_means,
                              CUdevice *device);
CUresult fc_stream_get_flags(const char *call, CUstream hstream, enum fc_null_stream null_means,
                             unsigned int *flags);
CUresult fc_stream_get_priority(const char *call, CUstream hstream, enum fc_null_stream null_means,
                                int *priority);
CUresult fc_stream_get_id(const char *call, CUstream hstream, enum fc_null_stream null_means,
                          unsigned long long *id);
CUresult fc_event_record(const char *call, CUevent hevent, CUstream hstream, enum fc_null_stream null_means,
                         unsigned flags);
CUresult fc_stream_wait_event(const char *call, CUstream hstream, CUevent hevent,
                              enum fc_null_stream null_means, unsigned flags);

/* ---- graphs (fc_graph.c) ------------------------------------------------ */

/* A graph or an executable graph: its nodes in insertion order. Guarded by
 * the exec lock. */
struct fc_graph {
    uint64_t handle;
    struct fc_work *nodes;
    size_t count, cap;
    bool capturing;                  /* a capture writes into it */
    /* An executable graph's allocation nodes (fc_graphmem.c). */
    uint64_t mem_bytes;              /* their sizes summed */
    bool mem_backed;                 /* launched: the memory is on mem_device */
    int mem_device;
};

struct fc_graph *fc_graph_new_locked(void);
void fc_graph_free_locked(struct fc_graph *g);
CUresult fc_graph_append_locked(struct fc_graph *g, const struct fc_work *work, size_t *index);
CUgraphNode fc_graph_node_handle(const struct fc_graph *g, size_t index);
CUresult fc_graph_launch(const char *call, CUgraphExec hexec, CUstream hstream, enum fc_null_stream null_means);

/* ---- stream capture (fc_capture.c) -------------------------------------- */

/* Submits work to a stream: recorded into its capture if it captures,
 * queued otherwise; refused on the legacy stream while a blocking stream
 * of its context captures. Exec lock held. */
CUresult fc_stream_submit_locked(const char *call, struct fc_stream *stream, const struct fc_work *work);
/* The prohibitions of "Prohibited and Unhandled Operations": each returns
 * CUDA_SUCCESS, or the error after invalidating the captures concerned.
 * Exec lock held, except fc_capture_check_unsafe. */
CUresult fc_capture_check_legacy_locked(const char *call, struct fc_stream *stream);
CUresult fc_capture_check_sync_locked(const char *call, struct fc_stream *stream);
CUresult fc_capture_check_ctx_sync_locked(const char *call, struct fc_ctx *ctx);
CUresult fc_capture_check_event_locked(const char *call, struct fc_event *event);
CUresult fc_capture_check_unsafe_locked(const char *call);
CUresult fc_capture_check_unsafe(const char *call);
/* An event record in a capturing stream. */
CUresult fc_capture_record_locked(struct fc_stream *stream, struct fc_event *event, unsigned flags);
/* cuStreamWaitEvent where a capture is concerned; *handled is false when
 * it is not and the wait is an ordinary one. */
CUresult fc_capture_wait_locked(const char *call, struct fc_stream *stream, struct fc_event *event,
                                unsigned flags, bool *handled);
/* cuMemFreeAsync into a capturing stream: the free waits for the end of
 * the capture. False if the stream does not capture. */
bool fc_capture_defer_free_locked(struct fc_stream *stream, CUdeviceptr ptr);
/* A stream of a capture goes: the capture is invalidated, and ended if
 * the stream was its origin. */
void fc_capture_stream_destroyed_locked(const char *call, struct fc_stream *stream);
void fc_capture_ctx_stopping_locked(struct fc_ctx *ctx);
/* ---- devices (fc_device.c, fc_device_attributes.c) -------------------- */

#define FC_DEVICE_NAME "NVIDIA H100 80GB HBM3"
#define FC_PCI_BUS_BASE 0x18

/* CUDA_SUCCESS, CUDA_ERROR_NOT_INITIALIZED or CUDA_ERROR_INVALID_DEVICE. */
CUresult fc_check_device(CUdevice dev);
/* The H100 figure of one attribute; false for a number cuda.h lacks. */
bool fc_device_attribute(CUdevice_attribute attribute, int device, int *value);

/* ---- copies and sets (fc_copy.c) --------------------------------------- */

CUresult fc_memcpy_htod(const char *call, CUdeviceptr dst, const void *src, size_t n, CUstream s,
                        enum fc_null_stream null_means, bool async);
CUresult fc_memcpy_dtoh(const char *call, void *dst, CUdeviceptr src, size_t n, CUstream s,
                        enum fc_null_stream null_means, bool async);
CUresult fc_memcpy_dtod(const char *call, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s,
                        enum fc_null_stream null_means, bool async);
CUresult fc_memcpy_unified(const char *call, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s,
                           enum fc_null_stream null_means, bool async);
CUresult fc_memset(const char *call, CUdeviceptr dst, uint32_t value, unsigned elem, size_t count, CUstream s,
                   enum fc_null_stream null_means, bool async);

/* ---- memory (fc_memory.c) --------------------------------------------- */

/* Whether [ptr, ptr+bytes) lies inside one live device allocation. */
bool fc_mem_range_valid(CUdeviceptr ptr, size_t bytes);
/* Whether ptr is a graph allocation node's address (fc_graphmem.c). */
bool fc_mem_is_graph_alloc(CUdeviceptr ptr);
/* Frees memory whose cuMemFreeAsync waited for the end of a capture. */
void fc_mem_free_deferred(CUdeviceptr ptr);
/* Unmaps and uncounts an allocation already out of the table. */
void fc_mem_release_now(void *base, size_t size, int device);
CUresult fc_mem_alloc_async(const char *call, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool hpool,
                            CUstream hstream, enum fc_null_stream null_means);
CUresult fc_mem_free_async(const char *call, CUdeviceptr dptr, CUstream hstream, enum fc_null_stream null_means);
void fc_mem_release_ctx(struct fc_ctx *ctx);
/* Counts bytes of the calling process on a device (OUT_OF_MEMORY past the
 * device's memory), and gives them back. */
CUresult fc_mem_account(int device, uint64_t bytes);
void fc_mem_unaccount(int device, uint64_t bytes);
/* Device memory each context holds (FAKECUDA_CONTEXT_BYTES). */
uint64_t fc_mem_context_bytes(void);

/* ---- stream-ordered pools (fc_mempool.c) ------------------------------- */

struct fc_pool;
/* The pool an allocation comes from: hpool, or the device's current pool. */
struct fc_pool *fc_pool_of(const char *call, CUmemoryPool hpool, int device, CUresult *rc);
int fc_pool_device(const struct fc_pool *pool);
/* Uses bytes of the pool, growing what it reserves on the device as needed. */
CUresult fc_pool_take(struct fc_pool *pool, uint64_t bytes);
/* Frees bytes into the pool, which keeps up to its release threshold. */
void fc_pool_give(struct fc_pool *pool, uint64_t bytes);
/* A pool allocation whose stream-ordered free is queued, and its pool when
 * the free runs (NULL for memory not from a pool). */
bool fc_pool_note_freeing(uint64_t base, struct fc_pool *pool);
struct fc_pool *fc_pool_take_freeing(uint64_t base);
void fc_pool_atfork_child(void);

/* ---- graph memory (fc_graphmem.c) ---------------------------------------- */

/* An executable graph's first launch takes its allocation nodes' bytes
 * from the device's graph pool (growing it); its destruction gives them
 * back to the pool, which keeps them until cuDeviceGraphMemTrim. */
CUresult fc_graphmem_back(int device, uint64_t bytes);
void fc_graphmem_unback(int device, uint64_t bytes);
void fc_graphmem_atfork_child(void);
void fc_mem_atfork_prepare(void);
void fc_mem_atfork_parent(void);
void fc_mem_atfork_child(void);

/* ---- launches (fc_launch.c) ------------------------------------------- */

/* What a kernel's name makes of it (see fc_launch.c). */
enum fc_function_kind {
    FC_FN_DEFAULT,    /* FAKECUDA_KERNEL_NS */
    FC_FN_SPIN,       /* "spin*": its first parameter's nanoseconds */
    FC_FN_COLLECTIVE, /* "collective*": waits for its peers, then its ns */
    FC_FN_STAMP,      /* "stamp*": its first parameter's nanoseconds, then writes when it ran */
};

struct fc_function {
    uint64_t handle;
    enum fc_function_kind kind;
    char name[128];
};

/* The kernel work of one launch of f with these arguments (*work's kind,
 * ns and collective fields). CUDA_ERROR_INVALID_VALUE, with a line on
 * stderr, for a collective whose parameters make no sense. */
CUresult fc_kernel_work(const struct fc_function *f, void **params, void **extra, struct fc_work *work);

/* ---- collectives (fc_collective.c) ------------------------------------- */

/* Reads a collective kernel's parameters, from kernelParams or from an
 * `extra` buffer; false with the reason in *why if they are missing or
 * out of range. */
bool fc_collective_parse(void **params, void **extra, uint64_t *ns, struct fc_collective_args *out,
                         const char **why);

/* One rank's wait for its peers, from its start on the device. */
struct fc_collective_wait {
    struct fc_collective_args args;
    struct fc_collective_entry *entry;
    uint32_t generation;
    uint32_t nranks;                 /* as the entry has it */
    uint64_t begun_ns, deadline_ns;
};

enum fc_collective_state { FC_COLL_WAITING, FC_COLL_COMPLETE, FC_COLL_TIMED_OUT };

/* Marks the rank started in the state file and wakes its waiting peers.
 * Called by the compute worker once it holds the engine. */
void fc_collective_begin(const struct fc_collective_args *args, struct fc_collective_wait *w);
/* Sleeps until every rank has started (COMPLETE), the collective timeout
 * has passed since begin (TIMED_OUT), or until_ns (WAITING). */
enum fc_collective_state fc_collective_wait(struct fc_collective_wait *w, uint64_t until_ns);
/* The rank is done waiting: the entry is freed once every rank is. A
 * timeout is reported on stderr. */
void fc_collective_end(struct fc_collective_wait *w, enum fc_collective_state how);
CUresult fc_launch_kernel(const char *call, enum fc_null_stream null_means, CUfunction f, unsigned int gx,
                          unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                          CUstream s, void **params, void **extra);
CUresult fc_launch_kernel_ex(const char *call, enum fc_null_stream null_means, const CUlaunchConfig *config,
                             CUfunction f, void **params, void **extra);

/* ---- helpers ---------------------------------------------------------- */

uint64_t fc_now_ns(void);
/* Parses "123", "4K", "16G" ...; returns false on a malformed value. */
bool fc_parse_bytes(const char *text, uint64_t *out);
void fc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- entry points cuda.h declares only through its macros -------------- */
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2_ptds(void *, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr, unsigned char, size_t);
CUresult cuMemsetD16_v2_ptds(CUdeviceptr, unsigned short, size_t);
CUresult cuMemsetD32_v2_ptds(CUdeviceptr, unsigned int, size_t);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuMemsetD16Async_ptsz(CUdeviceptr, unsigned short, size_t, CUstream);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr, unsigned int, size_t, CUstream);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int,
                                        unsigned int, unsigned int, unsigned int, unsigned int,
                                        CUstream, void **);
CUresult cuGraphLaunch_ptsz(CUgraphExec, CUstream);
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuStreamQuery_ptsz(CUstream);
CUresult cuStreamWaitEvent_ptsz(CUstream, CUevent, unsigned int);
CUresult cuEventRecord_ptsz(CUevent, CUstream);
CUresult cuEventRecordWithFlags_ptsz(CUevent, CUstream, unsigned int);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *, size_t, CUmemoryPool, CUstream);

CUresult cuDeviceGetUuid_v2(CUuuid *, CUdevice);
CUresult cuEventElapsedTime_v2(float *, CUevent, CUevent);
CUresult cuCtxCreate_v4(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                 const CUDA_KERNEL_NODE_PARAMS *);
CUresult cuMemsetD16_v2(CUdeviceptr, unsigned short, size_t);

#endif
