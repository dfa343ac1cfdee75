/*
 * fakecuda per-thread default stream entry points (_ptsz, _ptds): the names
 * cuda.h selects under CUDA_API_PER_THREAD_DEFAULT_STREAM. fakecuda runs a
 * context's streams in one order, so the per-thread default stream behaves
 * as the legacy one; these only forward.
 */
#include "fc_internal.h"

FC_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return cuMemcpyHtoD_v2(d, s, n); }
FC_API CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { return cuMemcpyDtoH_v2(d, s, n); }
FC_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpyDtoD_v2(d, s, n); }
FC_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) { return cuMemcpyHtoDAsync_v2(d, s, n, st); }
FC_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st) { return cuMemcpyDtoHAsync_v2(d, s, n, st); }
FC_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return cuMemcpyDtoDAsync_v2(d, s, n, st); }
FC_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return cuMemsetD8_v2(d, v, n); }
FC_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return cuMemsetD16_v2(d, v, n); }
FC_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return cuMemsetD32_v2(d, v, n); }
FC_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return cuMemsetD8Async(d, v, n, s); }
FC_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return cuMemsetD16Async(d, v, n, s); }
FC_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return cuMemsetD32Async(d, v, n, s); }

FC_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                    CUstream s, void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

FC_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return cuLaunchKernelEx(config, f, params, extra);
}

FC_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                               unsigned int gz, unsigned int bx, unsigned int by,
                                               unsigned int bz, unsigned int shmem, CUstream s,
                                               void **params)
{
    return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

FC_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
FC_API CUresult cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(s); }
FC_API CUresult cuStreamQuery_ptsz(CUstream s) { return cuStreamQuery(s); }
FC_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int f) { return cuStreamWaitEvent(s, e, f); }
FC_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }
FC_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int f) { return cuEventRecordWithFlags(e, s, f); }
FC_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) { return cuMemAllocAsync(d, n, s); }
FC_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { return cuMemFreeAsync(d, s); }
FC_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s) { return cuMemAllocFromPoolAsync(d, n, p, s); }
