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
void fc_handles_atfork_prepare(void);
void fc_handles_atfork_parent(void);
void fc_handles_atfork_child(void);

/* ---- process state (fc_context.c) ------------------------------------- */

struct fc_stream;

struct fc_op {
    enum { FC_OP_KERNEL, FC_OP_EVENT, FC_OP_COPY, FC_OP_SET, FC_OP_WAIT } kind;
    uint64_t seq;
    uint64_t ns;             /* FC_OP_KERNEL: device time */
    void *dst;               /* FC_OP_COPY, FC_OP_SET */
    const void *src;         /* FC_OP_COPY */
    size_t bytes;            /* FC_OP_COPY; element count for FC_OP_SET */
    uint32_t value;          /* FC_OP_SET */
    unsigned elem_size;      /* FC_OP_SET: 1, 2 or 4 */
    struct fc_event *event;  /* FC_OP_EVENT, FC_OP_WAIT */
    uint64_t wait_seq;       /* FC_OP_WAIT */
};

struct fc_ctx {
    uint64_t handle;
    int device;
    bool primary;
    unsigned flags;
    struct fc_stream *default_stream;

    /* Everything below is guarded by lock. */
    pthread_mutex_t lock;
    pthread_cond_t work;   /* worker waits for ops */
    pthread_cond_t space;  /* launchers wait for a free slot */
    pthread_cond_t done;   /* synchronizers wait for completion */
    struct fc_op ring[FC_MAX_PENDING];
    unsigned head, count;
    uint64_t submitted_seq, completed_seq;
    bool stopping;
    pthread_t worker;
    bool worker_started;
    struct fc_ctx *retired_next; /* see retired_ctxs in fc_context.c */
};

struct fc_stream {
    uint64_t handle;
    struct fc_ctx *ctx;
    unsigned flags;
    int priority;
    uint64_t last_seq;     /* guarded by ctx->lock */
};

struct fc_event {
    uint64_t handle;
    struct fc_ctx *ctx;    /* context of the last record, or NULL */
    unsigned flags;
    uint64_t seq;          /* guarded by ctx->lock; 0 = never recorded */
    uint64_t time_ns;      /* guarded by ctx->lock; when it completed */
    bool completed;        /* guarded by ctx->lock */
};

/* The process's attachment to the shared state; NULL before cuInit. */
struct fc_shared *fc_shared_state(void);
int fc_self_slot(void);

/* Returns CUDA_SUCCESS or CUDA_ERROR_NOT_INITIALIZED. */
CUresult fc_check_init(void);
/* The calling thread's current context: NULL with CUDA_ERROR_INVALID_CONTEXT
 * (or NOT_INITIALIZED) in *err when there is none. */
struct fc_ctx *fc_current_ctx(CUresult *err);
/* Resolves a stream argument (NULL/legacy/per-thread = the current
 * context's default stream). */
CUresult fc_resolve_stream(CUstream hstream, struct fc_stream **out);

/* ---- devices (fc_device.c, fc_device_attributes.c) -------------------- */

#define FC_DEVICE_NAME "NVIDIA H100 80GB HBM3"
#define FC_PCI_BUS_BASE 0x18

/* CUDA_SUCCESS, CUDA_ERROR_NOT_INITIALIZED or CUDA_ERROR_INVALID_DEVICE. */
CUresult fc_check_device(CUdevice dev);
/* The H100 figure of one attribute; false for a number cuda.h lacks. */
bool fc_device_attribute(CUdevice_attribute attribute, int device, int *value);

/* ---- execution (fc_exec.c) -------------------------------------------- */

CUresult fc_ctx_start(struct fc_ctx *ctx);
void fc_ctx_stop(struct fc_ctx *ctx);
/* Queues an op on a stream; blocks while FC_MAX_PENDING ops are pending. */
CUresult fc_submit(struct fc_stream *stream, struct fc_op *op);
void fc_ctx_wait_seq(struct fc_ctx *ctx, uint64_t seq);
void fc_ctx_drain(struct fc_ctx *ctx);
uint64_t fc_kernel_default_ns(void);

/* ---- memory (fc_memory.c) --------------------------------------------- */

/* Whether [ptr, ptr+bytes) lies inside one live device allocation. */
bool fc_mem_range_valid(CUdeviceptr ptr, size_t bytes);
void fc_mem_release_ctx(struct fc_ctx *ctx);
void fc_mem_atfork_prepare(void);
void fc_mem_atfork_parent(void);
void fc_mem_atfork_child(void);

/* ---- launches (fc_launch.c) ------------------------------------------- */

struct fc_function {
    uint64_t handle;
    bool is_spin;
    char name[128];
};

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
