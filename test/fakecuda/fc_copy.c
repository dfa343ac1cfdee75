/*
 * fakecuda copies and sets: cuMemcpy* and cuMemset* in their synchronous
 * and asynchronous forms. Each runs on the device's copy engine and takes
 * bytes / FAKECUDA_COPY_BYTES_PER_S of device time (fc_exec.c), beside the
 * compute engine, in its stream's order.
 *
 * A synchronous copy or set is queued on the legacy stream (the calling
 * thread's per-thread stream for the _ptds entry points), so it waits for
 * the blocking streams' prior work, and returns when it is done. During a
 * stream capture it is a "potentially unsafe" call ("Prohibited and
 * Unhandled Operations").
 */
#include "fc_internal.h"

#include <stdint.h>
#include <stdlib.h>

static CUresult submit(const char *call, struct fc_work *work, CUstream hstream, enum fc_null_stream null_means,
                       bool async)
{
    fc_exec_lock();
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc == CUDA_SUCCESS && async) {
        rc = fc_stream_submit_locked(call, stream, work);
    } else if (rc == CUDA_SUCCESS) {
        rc = fc_capture_check_sync_locked(call, stream);
        struct fc_fence *fence = NULL;
        if (rc == CUDA_SUCCESS)
            rc = fc_enqueue_locked(stream, work, NULL, &fence);
        if (rc == CUDA_SUCCESS)
            fc_wait_fences_locked(&fence, 1, fc_ctx_wait_policy_locked(stream->ctx));
    }
    fc_exec_unlock();
    return rc;
}

/* A copy between device memory (a CUdeviceptr inside an allocation) and
 * host memory; with unified addressing either side may be either. */
static CUresult copy(const char *call, void *dst, bool dst_device, const void *src, bool src_device, size_t bytes,
                     CUstream hstream, enum fc_null_stream null_means, bool async)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (bytes == 0)
        return CUDA_SUCCESS;
    if (!dst || !src || (dst_device && !fc_mem_range_valid((CUdeviceptr)(uintptr_t)dst, bytes)) ||
        (src_device && !fc_mem_range_valid((CUdeviceptr)(uintptr_t)src, bytes)))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_work work = {.kind = FC_WORK_COPY, .dst = dst, .src = src, .bytes = bytes,
                           .dst_device = dst_device, .src_device = src_device};
    return submit(call, &work, hstream, null_means, async);
}

static void *dev(CUdeviceptr p) { return (void *)(uintptr_t)p; }

CUresult fc_memcpy_htod(const char *call, CUdeviceptr dst, const void *src, size_t n, CUstream s,
                        enum fc_null_stream null_means, bool async)
{
    return copy(call, dev(dst), true, src, false, n, s, null_means, async);
}

CUresult fc_memcpy_dtoh(const char *call, void *dst, CUdeviceptr src, size_t n, CUstream s,
                        enum fc_null_stream null_means, bool async)
{
    return copy(call, dst, false, dev(src), true, n, s, null_means, async);
}

CUresult fc_memcpy_dtod(const char *call, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s,
                        enum fc_null_stream null_means, bool async)
{
    return copy(call, dev(dst), true, dev(src), true, n, s, null_means, async);
}

/* cuMemcpy/cuMemcpyAsync: unified addressing tells device from host. */
CUresult fc_memcpy_unified(const char *call, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s,
                           enum fc_null_stream null_means, bool async)
{
    bool dst_device = n > 0 && fc_mem_range_valid(dst, n), src_device = n > 0 && fc_mem_range_valid(src, n);
    return copy(call, dev(dst), dst_device, dev(src), src_device, n, s, null_means, async);
}

CUresult fc_memset(const char *call, CUdeviceptr dst, uint32_t value, unsigned elem, size_t count, CUstream s,
                   enum fc_null_stream null_means, bool async)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (count == 0)
        return CUDA_SUCCESS;
    if (count > SIZE_MAX / elem || !fc_mem_range_valid(dst, count * elem) || dst % elem != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_work work = {.kind = FC_WORK_SET, .dst = dev(dst), .bytes = count, .value = value,
                           .elem_size = elem, .dst_device = true};
    return submit(call, &work, s, null_means, async);
}

#define LEGACY FC_NULL_LEGACY

FC_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return fc_memcpy_htod(__func__, dst, src, n, NULL, LEGACY, false);
}

FC_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return fc_memcpy_dtoh(__func__, dst, src, n, NULL, LEGACY, false);
}

FC_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return fc_memcpy_dtod(__func__, dst, src, n, NULL, LEGACY, false);
}

FC_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return fc_memcpy_unified(__func__, dst, src, n, NULL, LEGACY, false);
}

FC_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return fc_memcpy_htod(__func__, dst, src, n, s, LEGACY, true);
}

FC_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return fc_memcpy_dtoh(__func__, dst, src, n, s, LEGACY, true);
}

FC_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return fc_memcpy_dtod(__func__, dst, src, n, s, LEGACY, true);
}

FC_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return fc_memcpy_unified(__func__, dst, src, n, s, LEGACY, true);
}

FC_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
    return fc_memset(__func__, dst, v, 1, n, NULL, LEGACY, false);
}

FC_API CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short v, size_t n)
{
    return fc_memset(__func__, dst, v, 2, n, NULL, LEGACY, false);
}

FC_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n)
{
    return fc_memset(__func__, dst, v, 4, n, NULL, LEGACY, false);
}

FC_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
    return fc_memset(__func__, dst, v, 1, n, s, LEGACY, true);
}

FC_API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s)
{
    return fc_memset(__func__, dst, v, 2, n, s, LEGACY, true);
}

FC_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s)
{
    return fc_memset(__func__, dst, v, 4, n, s, LEGACY, true);
}
