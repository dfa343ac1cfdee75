/*
 * fakecuda entry-point lookup: cuGetProcAddress and cuGetProcAddress_v2.
 *
 * A lookup names a base symbol ("cuMemAlloc") and the CUDA version the
 * caller was built for. Like the real driver, fakecuda returns the newest
 * variant introduced at or before that version ("cuMemAlloc" at 12000 is
 * cuMemAlloc_v2, introduced in 3.2; the versions are those of
 * cudaTypedefs.h's PFN_* names), and the per-thread default stream
 * variant when the flags ask for it and one exists.
 *
 * With FAKECUDA_TRAMPOLINES=1 every pointer handed out is a trampoline, a
 * stub of its own that jumps to the implementation, as a driver behind a
 * profiler or an injection library hands out: it differs from what dlsym
 * finds, yet calls the same function.
 */
#include "fc_internal.h"
#include "fc_trampolines.h"

#include <stdlib.h>
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
    EP(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags),
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
    EP(cuCtxPushCurrent, 2000, cuCtxPushCurrent),
    EP(cuCtxPopCurrent, 2000, cuCtxPopCurrent),
    EP(cuCtxGetDevice, 2000, cuCtxGetDevice),
    EP(cuCtxGetDevice, 13000, cuCtxGetDevice_v2),
    EP(cuCtxGetFlags, 7000, cuCtxGetFlags),
    EP(cuCtxSynchronize, 2000, cuCtxSynchronize),
    EP(cuModuleLoad, 2000, cuModuleLoad),
    EP(cuModuleLoadData, 2000, cuModuleLoadData),
    EP(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx),
    EP(cuModuleUnload, 2000, cuModuleUnload),
    EP(cuModuleGetFunction, 2000, cuModuleGetFunction),
    EP(cuLibraryLoadData, 12000, cuLibraryLoadData),
    EP(cuLibraryUnload, 12000, cuLibraryUnload),
    EP(cuLibraryGetKernel, 12000, cuLibraryGetKernel),
    EP(cuKernelGetFunction, 12000, cuKernelGetFunction),
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
    EP(cuGraphInstantiate, 10000, cuGraphInstantiate),
    EP(cuGraphInstantiate, 11000, cuGraphInstantiate_v2),
    EP(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    EP_PT(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz),
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
    EP_PT(cuStreamGetCtx, 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz),
    EP_PT(cuStreamGetCtx, 12050, cuStreamGetCtx_v2, cuStreamGetCtx_v2_ptsz),
    EP_PT(cuStreamGetDevice, 12080, cuStreamGetDevice, cuStreamGetDevice_ptsz),
    EP_PT(cuStreamGetFlags, 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    EP_PT(cuStreamGetPriority, 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    EP_PT(cuStreamGetId, 12000, cuStreamGetId, cuStreamGetId_ptsz),
    EP_PT(cuStreamBeginCapture, 10000, cuStreamBeginCapture, cuStreamBeginCapture_ptsz),
    EP_PT(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    EP_PT(cuStreamBeginCaptureToGraph, 12030, cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz),
    EP_PT(cuStreamEndCapture, 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    EP_PT(cuStreamIsCapturing, 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    EP_PT(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz),
    EP_PT(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz),
    EP_PT(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz),
    EP(cuThreadExchangeStreamCaptureMode, 10010, cuThreadExchangeStreamCaptureMode),
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
    EP(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool),
    EP(cuDeviceSetMemPool, 11020, cuDeviceSetMemPool),
    EP(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
    EP(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute),
    EP(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute),
    EP(cuDeviceGraphMemTrim, 11040, cuDeviceGraphMemTrim),
    EP(cuDeviceGetGraphMemAttribute, 11040, cuDeviceGetGraphMemAttribute),
    EP(cuDeviceSetGraphMemAttribute, 11040, cuDeviceSetGraphMemAttribute),
    EP_PT(cuMemcpy, 4000, cuMemcpy, cuMemcpy_ptds),
    EP_PT(cuMemcpyAsync, 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
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

#define ENTRY_COUNT (sizeof entry_points / sizeof entry_points[0])

#ifdef FC_HAVE_TRAMPOLINES
_Static_assert(2 * ENTRY_COUNT <= FC_TRAMPOLINE_COUNT, "FC_TRAMPOLINE_COUNT too small for the table");

/* The stubs (fc_trampolines_<arch>.S) and where each jumps: entry i's
 * legacy variant through stub 2i, its per-thread variant through 2i+1.
 * Filled once by load_trampolines under trampolines_once; read-only
 * afterwards. */
extern const char fc_trampolines[];
fc_entry fc_trampoline_targets[FC_TRAMPOLINE_COUNT];
#endif
/* Whether lookups hand out trampolines (FAKECUDA_TRAMPOLINES); written by
 * load_trampolines under trampolines_once, read-only afterwards. */
static pthread_once_t trampolines_once = PTHREAD_ONCE_INIT;
static bool trampolines;

static void load_trampolines(void)
{
    const char *v = getenv("FAKECUDA_TRAMPOLINES");
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
#ifdef FC_HAVE_TRAMPOLINES
    for (size_t i = 0; i < ENTRY_COUNT; i++) {
        fc_trampoline_targets[2 * i] = entry_points[i].legacy;
        fc_trampoline_targets[2 * i + 1] = entry_points[i].per_thread;
    }
    trampolines = true;
#else
    fc_log("FAKECUDA_TRAMPOLINES: no trampolines on this architecture; handing out the functions");
#endif
}

/* What a lookup hands out for entry e (per_thread: its _ptsz twin). */
static fc_entry handed_out(const struct entry_point *e, bool per_thread)
{
    pthread_once(&trampolines_once, load_trampolines);
    if (!trampolines)
        return per_thread ? e->per_thread : e->legacy;
#ifdef FC_HAVE_TRAMPOLINES
    size_t stub = 2 * (size_t)(e - entry_points) + (per_thread ? 1 : 0);
    fc_entry f;
    const char *address = fc_trampolines + stub * FC_TRAMPOLINE_SIZE;
    memcpy(&f, &address, sizeof f);
    return f;
#else
    return per_thread ? e->per_thread : e->legacy;
#endif
}

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
    fc_entry chosen = handed_out(best, per_thread && best->per_thread);
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
