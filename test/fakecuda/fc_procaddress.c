/*
 * fakecuda entry-point lookup: cuGetProcAddress and cuGetProcAddress_v2.
 *
 * A lookup names a base symbol ("cuMemAlloc") and the CUDA version the
 * caller was built for. Like the real driver, fakecuda returns the newest
 * variant introduced at or before that version ("cuMemAlloc" at 12000 is
 * cuMemAlloc_v2, introduced in 3.2), and the per-thread default stream
 * variant when the flags ask for it and one exists.
 */
#include "fc_internal.h"

#include <string.h>

typedef void (*fc_entry)(void);
_Static_assert(sizeof(fc_entry) == sizeof(void *), "function and data pointers differ in size");

struct entry_point {
    const char *base;  /* the name the caller asks for */
    int version;       /* CUDA version that introduced this variant */
    fc_entry legacy;   /* the variant itself */
    fc_entry per_thread; /* its _ptsz/_ptds twin, or NULL */
};

#define EP(base, version, fn) {#base, version, (fc_entry)fn, NULL}
#define EP_PT(base, version, fn, pt) {#base, version, (fc_entry)fn, (fc_entry)pt}

static const struct entry_point entry_points[] = {
    EP(cuInit, 2000, cuInit),
    EP(cuDriverGetVersion, 2020, cuDriverGetVersion),
    EP(cuGetErrorName, 6000, cuGetErrorName),
    EP(cuGetErrorString, 6000, cuGetErrorString),
    EP(cuGetProcAddress, 11030, cuGetProcAddress),
    EP(cuGetProcAddress, 12000, cuGetProcAddress_v2),
    EP(cuDeviceGet, 2000, cuDeviceGet),
    EP(cuDeviceGetCount, 2000, cuDeviceGetCount),
    EP(cuDeviceGetName, 2000, cuDeviceGetName),
    EP(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    EP(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    EP(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
    EP(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    EP(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    EP(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    EP(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease),
    EP(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    EP(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset),
    EP(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    EP(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    EP(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2),
    EP(cuCtxCreate, 2000, cuCtxCreate),
    EP(cuCtxCreate, 3020, cuCtxCreate_v2),
    EP(cuCtxCreate, 11040, cuCtxCreate_v3),
    EP(cuCtxCreate, 12050, cuCtxCreate_v4),
    EP(cuCtxDestroy, 2000, cuCtxDestroy),
    EP(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    EP(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    EP(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    EP(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    EP(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    EP(cuCtxGetDevice, 2000, cuCtxGetDevice),
    EP(cuCtxSynchronize, 2000, cuCtxSynchronize),
    EP(cuModuleLoad, 2000, cuModuleLoad),
    EP(cuModuleLoadData, 2000, cuModuleLoadData),
    EP(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx),
    EP(cuModuleUnload, 2000, cuModuleUnload),
    EP(cuModuleGetFunction, 2000, cuModuleGetFunction),
    EP(cuLibraryLoadData, 12000, cuLibraryLoadData),
    EP(cuLibraryUnload, 12000, cuLibraryUnload),
    EP(cuLibraryGetKernel, 12000, cuLibraryGetKernel),
    EP_PT(cuLaunchKernel, 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    EP_PT(cuLaunchKernelEx, 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    EP_PT(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz),
    EP(cuLaunchCooperativeKernelMultiDevice, 9000, cuLaunchCooperativeKernelMultiDevice),
    EP(cuLaunch, 2000, cuLaunch),
    EP(cuLaunchGrid, 2000, cuLaunchGrid),
    EP(cuLaunchGridAsync, 2000, cuLaunchGridAsync),
    EP(cuGraphCreate, 10000, cuGraphCreate),
    EP(cuGraphAddKernelNode, 10000, cuGraphAddKernelNode),
    EP(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2),
    EP(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    EP_PT(cuGraphLaunch, 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    EP(cuGraphExecDestroy, 10000, cuGraphExecDestroy),
    EP(cuGraphDestroy, 10000, cuGraphDestroy),
    EP(cuStreamCreate, 2000, cuStreamCreate),
    EP(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
    EP_PT(cuStreamSynchronize, 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    EP_PT(cuStreamQuery, 2000, cuStreamQuery, cuStreamQuery_ptsz),
    EP(cuStreamDestroy, 2000, cuStreamDestroy),
    EP(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    EP_PT(cuStreamWaitEvent, 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    EP(cuEventCreate, 2000, cuEventCreate),
    EP_PT(cuEventRecord, 2000, cuEventRecord, cuEventRecord_ptsz),
    EP_PT(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz),
    EP(cuEventQuery, 2000, cuEventQuery),
    EP(cuEventSynchronize, 2000, cuEventSynchronize),
    EP(cuEventElapsedTime, 2000, cuEventElapsedTime),
    EP(cuEventElapsedTime, 12080, cuEventElapsedTime_v2),
    EP(cuEventDestroy, 2000, cuEventDestroy),
    EP(cuEventDestroy, 4000, cuEventDestroy_v2),
    EP(cuMemAlloc, 3020, cuMemAlloc_v2),
    EP(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    EP(cuMemAllocManaged, 6000, cuMemAllocManaged),
    EP_PT(cuMemAllocAsync, 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    EP_PT(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    EP(cuMemFree, 3020, cuMemFree_v2),
    EP_PT(cuMemFreeAsync, 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    EP(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    EP(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
    EP(cuMemPoolCreate, 11020, cuMemPoolCreate),
    EP(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    EP_PT(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    EP_PT(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    EP_PT(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    EP_PT(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    EP_PT(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    EP_PT(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    EP_PT(cuMemsetD8, 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    EP_PT(cuMemsetD16, 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds),
    EP_PT(cuMemsetD32, 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    EP_PT(cuMemsetD8Async, 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    EP_PT(cuMemsetD16Async, 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz),
    EP_PT(cuMemsetD32Async, 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    EP(cuMemCreate, 10020, cuMemCreate),
    EP(cuMemRelease, 10020, cuMemRelease),
    EP(cuMemAddressReserve, 10020, cuMemAddressReserve),
    EP(cuMemAddressFree, 10020, cuMemAddressFree),
    EP(cuMemMap, 10020, cuMemMap),
    EP(cuMemUnmap, 10020, cuMemUnmap),
    EP(cuMemSetAccess, 10020, cuMemSetAccess),
    EP(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
    EP(cuArrayCreate, 3020, cuArrayCreate_v2),
    EP(cuArray3DCreate, 3020, cuArray3DCreate_v2),
    EP(cuArrayDestroy, 2000, cuArrayDestroy),
    EP(cuMipmappedArrayCreate, 5000, cuMipmappedArrayCreate),
    EP(cuMipmappedArrayDestroy, 5000, cuMipmappedArrayDestroy),
};

FC_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn || cuda_version <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const struct entry_point *best = NULL;
    bool known = false;
    for (size_t i = 0; i < sizeof entry_points / sizeof entry_points[0]; i++) {
        const struct entry_point *e = &entry_points[i];
        if (strcmp(e->base, symbol) != 0)
            continue;
        known = true;
        if (e->version <= cuda_version && (!best || e->version > best->version))
            best = e;
    }
    *pfn = NULL;
    if (!best) {
        if (status)
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    fc_entry chosen = per_thread && best->per_thread ? best->per_thread : best->legacy;
    /* ISO C has no cast from a function to an object pointer; POSIX
     * guarantees that the bits carry over. */
    memcpy(pfn, &chosen, sizeof *pfn);
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, NULL);
}
