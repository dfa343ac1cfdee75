/*
 * cuGetProcAddress and cuGetProcAddress_v2: how CUDA 11.3+ runtimes fetch
 * every driver entry point. The real driver picks the variant for the
 * caller's CUDA version and stream flags; the shim then swaps in its
 * wrapper of that same variant, so version selection stays the driver's
 * (no guessing at _v2/_v3 names) and status and errors are the driver's.
 */
#include "gs_driver.h"
#include "gs_log.h"

static CUresult finish_lookup(const char *symbol, void **pfn, CUresult rc)
{
    if (rc == CUDA_SUCCESS && pfn && *pfn) {
        void *wrapped = gs_driver_wrap(*pfn);
        if (wrapped != *pfn)
            GS_DEBUG("cuGetProcAddress(%s): wrapped", symbol);
        *pfn = wrapped;
    }
    return rc;
}

GS_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    CUresult rc = gs_driver_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!gs_real_fn[GS_IDX_cuGetProcAddress])
        return CUDA_ERROR_NOT_FOUND;
    GS_DEBUG("intercepted cuGetProcAddress");
    return finish_lookup(symbol, pfn, GS_REAL(cuGetProcAddress)(symbol, pfn, version, flags));
}

GS_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status)
{
    CUresult rc = gs_driver_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!gs_real_fn[GS_IDX_cuGetProcAddress_v2])
        return CUDA_ERROR_NOT_FOUND;
    GS_DEBUG("intercepted cuGetProcAddress_v2");
    return finish_lookup(symbol, pfn, GS_REAL(cuGetProcAddress_v2)(symbol, pfn, version, flags, status));
}
