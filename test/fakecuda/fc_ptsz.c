/*
 * fakecuda per-thread default stream entry points (_ptsz, _ptds): the names
 * cuda.h selects under CUDA_API_PER_THREAD_DEFAULT_STREAM. In these a NULL
 * stream is the calling thread's per-thread default stream, not the legacy
 * one (fc_streams.c); a synchronous _ptds copy or set runs on it too.
 */
#include "fc_internal.h"

#define PT FC_NULL_PER_THREAD

FC_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n)
{
    return fc_memcpy_htod(__func__, d, s, n, NULL, PT, false);
}
FC_API CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n)
{
    return fc_memcpy_dtoh(__func__, d, s, n, NULL, PT, false);
}
FC_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    return fc_memcpy_dtod(__func__, d, s, n, NULL, PT, false);
}
FC_API CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    return fc_memcpy_unified(__func__, d, s, n, NULL, PT, false);
}
FC_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
    return fc_memcpy_htod(__func__, d, s, n, st, PT, true);
}
FC_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st)
{
    return fc_memcpy_dtoh(__func__, d, s, n, st, PT, true);
}
FC_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    return fc_memcpy_dtod(__func__, d, s, n, st, PT, true);
}
FC_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    return fc_memcpy_unified(__func__, d, s, n, st, PT, true);
}
FC_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n)
{
    return fc_memset(__func__, d, v, 1, n, NULL, PT, false);
}
FC_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n)
{
    return fc_memset(__func__, d, v, 2, n, NULL, PT, false);
}
FC_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n)
{
    return fc_memset(__func__, d, v, 4, n, NULL, PT, false);
}
FC_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return fc_memset(__func__, d, v, 1, n, s, PT, true);
}
FC_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return fc_memset(__func__, d, v, 2, n, s, PT, true);
}
FC_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return fc_memset(__func__, d, v, 4, n, s, PT, true);
}

FC_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                    CUstream s, void **params, void **extra)
{
    (void)shmem;
    return fc_launch_kernel(__func__, PT, f, gx, gy, gz, bx, by, bz, s, params, extra);
}

FC_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return fc_launch_kernel_ex(__func__, PT, config, f, params, extra);
}

FC_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                               unsigned int gz, unsigned int bx, unsigned int by,
                                               unsigned int bz, unsigned int shmem, CUstream s,
                                               void **params)
{
    (void)shmem;
    return fc_launch_kernel(__func__, PT, f, gx, gy, gz, bx, by, bz, s, params, NULL);
}

FC_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return fc_graph_launch(__func__, e, s, PT); }
FC_API CUresult cuStreamSynchronize_ptsz(CUstream s) { return fc_stream_synchronize(__func__, s, PT); }
FC_API CUresult cuStreamQuery_ptsz(CUstream s) { return fc_stream_query(__func__, s, PT); }
FC_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int f)
{
    return fc_stream_wait_event(__func__, s, e, PT, f);
}
FC_API CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext *pctx) { return fc_stream_get_ctx(__func__, s, PT, pctx); }
FC_API CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *pctx, CUgreenCtx *pgreen)
{
    if (!pgreen)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = fc_stream_get_ctx(__func__, s, PT, pctx);
    if (rc == CUDA_SUCCESS)
        *pgreen = NULL;
    return rc;
}
FC_API CUresult cuStreamGetDevice_ptsz(CUstream s, CUdevice *d) { return fc_stream_get_device(__func__, s, PT, d); }
FC_API CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned int *f) { return fc_stream_get_flags(__func__, s, PT, f); }
FC_API CUresult cuStreamGetPriority_ptsz(CUstream s, int *p) { return fc_stream_get_priority(__func__, s, PT, p); }
FC_API CUresult cuStreamGetId_ptsz(CUstream s, unsigned long long *id) { return fc_stream_get_id(__func__, s, PT, id); }
FC_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return fc_event_record(__func__, e, s, PT, 0); }
FC_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int f)
{
    return fc_event_record(__func__, e, s, PT, f);
}
FC_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s)
{
    return fc_mem_alloc_async(__func__, d, n, NULL, s, PT);
}
FC_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { return fc_mem_free_async(__func__, d, s, PT); }
FC_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return fc_mem_alloc_async(__func__, d, n, p, s, PT);
}
