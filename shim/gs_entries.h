/*
 * The driver entry points libgpuslice.so wraps: the one list from which
 * the wrappers, the table of real functions and the pointer map are all
 * generated. Anything not listed here passes through untouched.
 *
 * Each line is one exact, versioned driver symbol:
 *   GS_LAUNCH(name, (parameters), (arguments), stream expression, ptsz)
 *       compute submission; the launch gate runs around it. ptsz is 1 for
 *       the per-thread-default-stream variants, where a NULL stream means
 *       the calling thread's own default stream
 *   GS_CUSTOM(name, (parameters), (arguments))
 *       wrapped by hand: graph launches (gs_graph.c), stream capture and
 *       stream lifetimes (gs_capture.c), context lifetimes (gs_contexts.c,
 *       and creation, with its device memory, gs_ctxmem.c), synchronization
 *       (gs_sync.c)
 *   GS_MEMORY(name, (parameters), (arguments))
 *       device memory: allocation, free and the queries that report it
 *       (gs_memory.c; pools: gs_mempools.c)
 *   GS_LIFECYCLE(name, (parameters), (arguments))
 *       initialisation and contexts
 *   GS_INTERNAL(name, (parameters), (arguments))
 *       not wrapped: the real function, for the shim's own use
 * cuGetProcAddress and cuGetProcAddress_v2 are wrapped by hand
 * (gs_symbols.c) but listed so their real pointers map to them.
 *
 * An includer defines the category macros it cares about; the others
 * default to GS_ENTRY(name, (parameters), wrapped), wrapped being 1 for
 * every category but GS_INTERNAL. All of them are undefined at the end.
 */
#ifndef GS_LAUNCH
#define GS_LAUNCH(name, params, args, stream, ptsz) GS_ENTRY(name, params, 1)
#endif
#ifndef GS_CUSTOM
#define GS_CUSTOM(name, params, args) GS_ENTRY(name, params, 1)
#endif
#ifndef GS_MEMORY
#define GS_MEMORY(name, params, args) GS_ENTRY(name, params, 1)
#endif
#ifndef GS_LIFECYCLE
#define GS_LIFECYCLE(name, params, args) GS_ENTRY(name, params, 1)
#endif
#ifndef GS_LOOKUP
#define GS_LOOKUP(name, params, args) GS_ENTRY(name, params, 1)
#endif
#ifndef GS_INTERNAL
#define GS_INTERNAL(name, params, args) GS_ENTRY(name, params, 0)
#endif

/* Compute submission. */
GS_LAUNCH(cuLaunchKernel,
          (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
           unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
           void **extra),
          (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra), stream, 0)
GS_LAUNCH(cuLaunchKernel_ptsz,
          (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
           unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
           void **extra),
          (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra), stream, 1)
GS_LAUNCH(cuLaunchKernelEx,
          (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
          (config, f, params, extra), config ? config->hStream : NULL, 0)
GS_LAUNCH(cuLaunchKernelEx_ptsz,
          (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
          (config, f, params, extra), config ? config->hStream : NULL, 1)
GS_LAUNCH(cuLaunchCooperativeKernel,
          (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
           unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params),
          (f, gx, gy, gz, bx, by, bz, shmem, stream, params), stream, 0)
GS_LAUNCH(cuLaunchCooperativeKernel_ptsz,
          (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
           unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params),
          (f, gx, gy, gz, bx, by, bz, shmem, stream, params), stream, 1)
GS_LAUNCH(cuLaunchCooperativeKernelMultiDevice,
          (CUDA_LAUNCH_PARAMS *list, unsigned int ndevices, unsigned int flags),
          (list, ndevices, flags), NULL, 0)
GS_LAUNCH(cuLaunch, (CUfunction f), (f), NULL, 0)
GS_LAUNCH(cuLaunchGrid, (CUfunction f, int w, int h), (f, w, h), NULL, 0)
GS_LAUNCH(cuLaunchGridAsync, (CUfunction f, int w, int h, CUstream stream), (f, w, h, stream), stream, 0)

/* Graph launches: admitted against the graph's measured device time. */
GS_CUSTOM(cuGraphLaunch, (CUgraphExec exec, CUstream stream), (exec, stream))
GS_CUSTOM(cuGraphLaunch_ptsz, (CUgraphExec exec, CUstream stream), (exec, stream))
GS_CUSTOM(cuGraphExecDestroy, (CUgraphExec exec), (exec))

/* Stream capture and stream lifetimes: launches into a capturing stream
 * pass ungated, and the drainer never records into a capture or a
 * destroyed stream. */
GS_CUSTOM(cuStreamBeginCapture, (CUstream stream), (stream))
GS_CUSTOM(cuStreamBeginCapture_ptsz, (CUstream stream), (stream))
GS_CUSTOM(cuStreamBeginCapture_v2, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))
GS_CUSTOM(cuStreamBeginCapture_v2_ptsz, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))
GS_CUSTOM(cuStreamBeginCaptureToGraph,
          (CUstream stream, CUgraph graph, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps,
           CUstreamCaptureMode mode),
          (stream, graph, deps, edges, ndeps, mode))
GS_CUSTOM(cuStreamBeginCaptureToGraph_ptsz,
          (CUstream stream, CUgraph graph, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps,
           CUstreamCaptureMode mode),
          (stream, graph, deps, edges, ndeps, mode))
GS_CUSTOM(cuStreamEndCapture, (CUstream stream, CUgraph *graph), (stream, graph))
GS_CUSTOM(cuStreamEndCapture_ptsz, (CUstream stream, CUgraph *graph), (stream, graph))
GS_CUSTOM(cuStreamWaitEvent, (CUstream stream, CUevent event, unsigned int flags), (stream, event, flags))
GS_CUSTOM(cuStreamWaitEvent_ptsz, (CUstream stream, CUevent event, unsigned int flags), (stream, event, flags))
GS_CUSTOM(cuStreamDestroy, (CUstream stream), (stream))
GS_CUSTOM(cuStreamDestroy_v2, (CUstream stream), (stream))
/* Synchronization: whether the GPU is left idle after it (gs_sync.c). */
GS_CUSTOM(cuCtxSynchronize, (void), ())
GS_CUSTOM(cuStreamSynchronize, (CUstream stream), (stream))
GS_CUSTOM(cuStreamSynchronize_ptsz, (CUstream stream), (stream))
GS_CUSTOM(cuEventSynchronize, (CUevent event), (event))

/* Device memory. */
GS_MEMORY(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytes), (dptr, bytes))
GS_MEMORY(cuMemAlloc, (CUdeviceptr_v1 *dptr, unsigned int bytes), (dptr, bytes))
GS_MEMORY(cuMemAllocPitch_v2,
          (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem),
          (dptr, pitch, width, height, elem))
GS_MEMORY(cuMemAllocPitch,
          (CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width, unsigned int height,
           unsigned int elem),
          (dptr, pitch, width, height, elem))
GS_MEMORY(cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytes, unsigned int flags), (dptr, bytes, flags))
GS_MEMORY(cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytes, CUstream stream), (dptr, bytes, stream))
GS_MEMORY(cuMemAllocAsync_ptsz, (CUdeviceptr *dptr, size_t bytes, CUstream stream), (dptr, bytes, stream))
GS_MEMORY(cuMemAllocFromPoolAsync,
          (CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream),
          (dptr, bytes, pool, stream))
GS_MEMORY(cuMemAllocFromPoolAsync_ptsz,
          (CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream),
          (dptr, bytes, pool, stream))
GS_MEMORY(cuMemCreate,
          (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
           unsigned long long flags),
          (handle, size, prop, flags))
GS_MEMORY(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))
GS_MEMORY(cuMemMap,
          (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
           unsigned long long flags),
          (ptr, size, offset, handle, flags))
GS_MEMORY(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size))
GS_MEMORY(cuMemPoolTrimTo, (CUmemoryPool pool, size_t keep), (pool, keep))
GS_MEMORY(cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value), (pool, attr, value))
GS_MEMORY(cuMemPoolDestroy, (CUmemoryPool pool), (pool))
GS_MEMORY(cuGraphInstantiateWithFlags, (CUgraphExec *exec, CUgraph graph, unsigned long long flags),
          (exec, graph, flags))
GS_MEMORY(cuGraphInstantiate, (CUgraphExec *exec, CUgraph graph, CUgraphNode *err, char *log, size_t size),
          (exec, graph, err, log, size))
GS_MEMORY(cuGraphInstantiate_v2, (CUgraphExec *exec, CUgraph graph, CUgraphNode *err, char *log, size_t size),
          (exec, graph, err, log, size))
GS_MEMORY(cuGraphInstantiateWithParams, (CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params),
          (exec, graph, params))
GS_MEMORY(cuGraphInstantiateWithParams_ptsz,
          (CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params), (exec, graph, params))
GS_MEMORY(cuDeviceGraphMemTrim, (CUdevice device), (device))
GS_MEMORY(cuMemFree_v2, (CUdeviceptr dptr), (dptr))
GS_MEMORY(cuMemFree, (CUdeviceptr_v1 dptr), (dptr))
GS_MEMORY(cuMemFreeAsync, (CUdeviceptr dptr, CUstream stream), (dptr, stream))
GS_MEMORY(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream stream), (dptr, stream))
GS_MEMORY(cuArrayCreate_v2, (CUarray *handle, const CUDA_ARRAY_DESCRIPTOR *desc), (handle, desc))
GS_MEMORY(cuArrayCreate, (CUarray *handle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc), (handle, desc))
GS_MEMORY(cuArray3DCreate_v2, (CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc), (handle, desc))
GS_MEMORY(cuArray3DCreate, (CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc), (handle, desc))
GS_MEMORY(cuArrayDestroy, (CUarray handle), (handle))
GS_MEMORY(cuMipmappedArrayCreate,
          (CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels),
          (handle, desc, levels))
GS_MEMORY(cuMipmappedArrayDestroy, (CUmipmappedArray handle), (handle))
GS_MEMORY(cuMemGetInfo_v2, (size_t *free_bytes, size_t *total_bytes), (free_bytes, total_bytes))
GS_MEMORY(cuMemGetInfo, (unsigned int *free_bytes, unsigned int *total_bytes), (free_bytes, total_bytes))
GS_MEMORY(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev), (bytes, dev))
GS_MEMORY(cuDeviceTotalMem, (unsigned int *bytes, CUdevice dev), (bytes, dev))

/* Initialisation and contexts. */
GS_LIFECYCLE(cuInit, (unsigned int flags), (flags))
GS_CUSTOM(cuCtxCreate, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev))
GS_CUSTOM(cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev))
GS_CUSTOM(cuCtxCreate_v3,
          (CUcontext *pctx, CUexecAffinityParam *params, int nparams, unsigned int flags, CUdevice dev),
          (pctx, params, nparams, flags, dev))
GS_CUSTOM(cuCtxCreate_v4,
          (CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev),
          (pctx, params, flags, dev))
GS_CUSTOM(cuCtxDestroy, (CUcontext ctx), (ctx))
GS_CUSTOM(cuCtxDestroy_v2, (CUcontext ctx), (ctx))
GS_LIFECYCLE(cuCtxSetCurrent, (CUcontext ctx), (ctx))
GS_LIFECYCLE(cuCtxPushCurrent, (CUcontext ctx), (ctx))
GS_LIFECYCLE(cuCtxPushCurrent_v2, (CUcontext ctx), (ctx))
GS_LIFECYCLE(cuCtxPopCurrent, (CUcontext *pctx), (pctx))
GS_LIFECYCLE(cuCtxPopCurrent_v2, (CUcontext *pctx), (pctx))
GS_CUSTOM(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev), (pctx, dev))
GS_CUSTOM(cuDevicePrimaryCtxRelease, (CUdevice dev), (dev))
GS_CUSTOM(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev))
GS_CUSTOM(cuDevicePrimaryCtxReset, (CUdevice dev), (dev))
GS_CUSTOM(cuDevicePrimaryCtxReset_v2, (CUdevice dev), (dev))

/* Used by the gate, not wrapped. */
GS_INTERNAL(cuCtxGetCurrent, (CUcontext *pctx), (pctx))
GS_INTERNAL(cuCtxGetDevice, (CUdevice *dev), (dev))
GS_INTERNAL(cuDeviceGetUuid, (CUuuid *uuid, CUdevice dev), (uuid, dev))
GS_INTERNAL(cuDeviceGetUuid_v2, (CUuuid *uuid, CUdevice dev), (uuid, dev))
GS_INTERNAL(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active), (dev, flags, active))
GS_INTERNAL(cuStreamGetCtx, (CUstream stream, CUcontext *pctx), (stream, pctx))
GS_INTERNAL(cuStreamIsCapturing, (CUstream stream, CUstreamCaptureStatus *status), (stream, status))
GS_INTERNAL(cuStreamIsCapturing_ptsz, (CUstream stream, CUstreamCaptureStatus *status), (stream, status))
GS_INTERNAL(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *mode), (mode))
GS_INTERNAL(cuEventCreate, (CUevent *event, unsigned int flags), (event, flags))
GS_INTERNAL(cuEventRecord, (CUevent event, CUstream stream), (event, stream))
GS_INTERNAL(cuStreamQuery, (CUstream stream), (stream))
GS_INTERNAL(cuEventQuery, (CUevent event), (event))
GS_INTERNAL(cuEventElapsedTime, (float *ms, CUevent start, CUevent end), (ms, start, end))
GS_INTERNAL(cuEventDestroy_v2, (CUevent event), (event))
GS_INTERNAL(cuDeviceGetMemPool, (CUmemoryPool *pool, CUdevice dev), (pool, dev))
GS_INTERNAL(cuDeviceGetGraphMemAttribute, (CUdevice dev, CUgraphMem_attribute attr, void *value), (dev, attr, value))
GS_INTERNAL(cuStreamGetCaptureInfo_v2,
            (CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
             const CUgraphNode **deps, size_t *ndeps),
            (stream, status, id, graph, deps, ndeps))
GS_INTERNAL(cuStreamGetCaptureInfo_v2_ptsz,
            (CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
             const CUgraphNode **deps, size_t *ndeps),
            (stream, status, id, graph, deps, ndeps))
GS_INTERNAL(cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value), (pool, attr, value))

/* Entry-point lookup (hand-written wrappers). */
GS_LOOKUP(cuGetProcAddress,
          (const char *symbol, void **pfn, int version, cuuint64_t flags),
          (symbol, pfn, version, flags))
GS_LOOKUP(cuGetProcAddress_v2,
          (const char *symbol, void **pfn, int version, cuuint64_t flags,
           CUdriverProcAddressQueryResult *status),
          (symbol, pfn, version, flags, status))

#undef GS_LAUNCH
#undef GS_CUSTOM
#undef GS_MEMORY
#undef GS_LIFECYCLE
#undef GS_LOOKUP
#undef GS_INTERNAL
#undef GS_ENTRY
