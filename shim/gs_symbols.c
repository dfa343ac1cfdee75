/*
 * Symbol lookups: which driver and NVML names the shim wraps and the
 * wrapper of each (the tables refer to every wrapper of every file, so
 * they stand above all of them), and the wrappers of cuGetProcAddress and
 * cuGetProcAddress_v2, how CUDA 11.3+ runtimes fetch every driver entry
 * point. (The dlsym override, gs_dlsym.c, uses the tables too.)
 *
 * cuGetProcAddress: the real driver picks the variant for the caller's
 * CUDA version and stream flags, and its status and errors are returned
 * unchanged. The pointer it returns is then replaced by the shim's wrapper
 * of the same variant, and this fails closed: when the pointer is the
 * driver's exported function, the variant is the one it is; when it is
 * anything else (a tool's trampoline, an internal alias), the variant is
 * chosen by name, version and flags from the table below, as the driver
 * would, and wrapped all the same. A wrapped name never reaches the
 * application unwrapped.
 *
 * Owns nothing mutable but the NVML lookups' log-once bits (atomic).
 */
#include "gs_symbols.h"
#include "gs_log.h"
#include "gs_nvml.h"

#include <string.h>

#define GS_WRAPPER_1(name) (gs_entry)name,
#define GS_WRAPPER_0(name) NULL, /* not wrapped */
#define GS_ENTRY(name, params, wrapped) GS_WRAPPER_##wrapped(name)
static const gs_entry driver_wrappers[GS_ENTRY_COUNT] = {
#include "gs_entries.h"
};

gs_entry gs_symbols_driver_wrapper(int index)
{
    return driver_wrappers[index];
}

bool gs_symbols_driver_wrapped(const char *name)
{
    int i = gs_driver_entry_index(name);
    return i >= 0 && driver_wrappers[i];
}

/* The NVML wrappers, declared and listed (NULL for an internal entry). */
#define GS_NVML(name, params) GS_EXPORT nvmlReturn_t name params;
#define GS_NVML_INTERNAL(name, params)
#include "gs_nvml_entries.h"
#define GS_NVML(name, params) (gs_entry)name,
#define GS_NVML_INTERNAL(name, params) NULL,
static const gs_entry nvml_wrappers[GS_NVML_COUNT] = {
#include "gs_nvml_entries.h"
};

bool gs_symbols_nvml_wrapped(const char *name)
{
    int i = gs_nvml_index(name);
    return i >= 0 && nvml_wrappers[i];
}

/* Entries already reported by the lookup as found elsewhere; bits set with
 * atomic OR, from any thread. */
static _Atomic uint64_t unknown_reported[(GS_NVML_COUNT + 63) / 64];

void *gs_symbols_nvml_lookup(const char *name, void *found)
{
    int i = gs_nvml_index(name);
    if (!found || i < 0 || !nvml_wrappers[i])
        return found;
    gs_entry fn = gs_ptr_to_entry(found);
    if (fn == nvml_wrappers[i])
        return found; /* the shim's own export (RTLD_DEFAULT finds it first) */
    if (gs_nvml_init(found) == NVML_SUCCESS && fn != gs_nvml_real[i]) {
        uint64_t bit = 1ull << (i % 64);
        if (!(atomic_fetch_or(&unknown_reported[i / 64], bit) & bit))
            gs_log(GS_LOG_INFO, "dlsym(%s) returned a pointer that is not NVML's %s: wrapped all the same", name,
                   name);
    }
    GS_DEBUG("dlsym(%s): wrapped", name);
    return gs_entry_to_ptr(nvml_wrappers[i]);
}

/* ---- cuGetProcAddress ---- */

/* The CUDA version each versioned variant appeared in (cudaTypedefs.h
 * names them PFN_<base>_v<version>); a variant not listed here is the
 * original, present since the base name existed. */
static const struct {
    const char *name;
    int since;
} variant_versions[] = {
    {"cuMemAlloc_v2", 3020},          {"cuMemAllocPitch_v2", 3020},
    {"cuMemFree_v2", 3020},           {"cuMemGetInfo_v2", 3020},
    {"cuDeviceTotalMem_v2", 3020},    {"cuArrayCreate_v2", 3020},
    {"cuArray3DCreate_v2", 3020},     {"cuCtxCreate_v2", 3020},
    {"cuCtxCreate_v3", 11040},        {"cuCtxCreate_v4", 12050},
    {"cuCtxDestroy_v2", 4000},        {"cuCtxPushCurrent_v2", 4000},
    {"cuCtxPopCurrent_v2", 4000},     {"cuStreamDestroy_v2", 4000},
    {"cuDevicePrimaryCtxRelease_v2", 11000}, {"cuDevicePrimaryCtxReset_v2", 11000},
    {"cuGetProcAddress_v2", 12000},   {"cuStreamBeginCapture_v2", 10010},
    {"cuStreamBeginCapture_v2_ptsz", 10010},
};

static int since_version(const char *name)
{
    for (size_t i = 0; i < sizeof variant_versions / sizeof variant_versions[0]; i++)
        if (strcmp(variant_versions[i].name, name) == 0)
            return variant_versions[i].since;
    return 0;
}

static bool ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* Whether entry `name` is a variant of base symbol `base`: the base, then
 * optionally _vN, then optionally _ptsz. */
static bool is_variant_of(const char *name, const char *base, bool *ptsz)
{
    size_t blen = strlen(base), len = strlen(name);
    if (len < blen || memcmp(name, base, blen) != 0)
        return false;
    *ptsz = ends_with(name, len, "_ptsz");
    if (*ptsz)
        len -= 5;
    const char *rest = name + blen;
    size_t rlen = len - blen;
    if (rlen == 0)
        return true;
    if (rlen < 3 || rest[0] != '_' || rest[1] != 'v')
        return false;
    for (size_t i = 2; i < rlen; i++)
        if (rest[i] < '0' || rest[i] > '9')
            return false;
    return true;
}

/* The wrapped entry the driver would give for (symbol, version, flags),
 * or -1 when the shim wraps no variant of it. */
static int choose_variant(const char *symbol, int version, cuuint64_t flags)
{
    int exact = gs_driver_entry_index(symbol);
    bool want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int best = -1, best_since = -1, fallback = -1, fallback_since = -1;
    for (int i = 0; i < GS_ENTRY_COUNT; i++) {
        bool ptsz;
        if (!gs_symbols_driver_wrapper(i) || !is_variant_of(gs_driver_entry_name(i), symbol, &ptsz))
            continue;
        int since = since_version(gs_driver_entry_name(i));
        if (since > version)
            continue;
        if (ptsz == want_ptsz && since > best_since)
            best = i, best_since = since;
        if (!ptsz && since > fallback_since)
            fallback = i, fallback_since = since;
    }
    if (best < 0)
        best = fallback; /* no per-thread variant: the plain one serves both */
    if (best < 0 && exact >= 0 && gs_symbols_driver_wrapper(exact))
        best = exact;
    return best;
}

static CUresult finish_lookup(const char *path, const char *symbol, int version, cuuint64_t flags,
                              void **pfn, CUresult rc)
{
    if (rc != CUDA_SUCCESS || !pfn || !*pfn || !symbol)
        return rc;
    gs_entry real = gs_ptr_to_entry(*pfn);
    /* The driver's own exported function: its choice of variant stands. */
    for (int i = 0; i < GS_ENTRY_COUNT; i++) {
        bool ptsz;
        if (gs_real_fn[i] == real && gs_symbols_driver_wrapper(i) &&
            (is_variant_of(gs_driver_entry_name(i), symbol, &ptsz) || strcmp(gs_driver_entry_name(i), symbol) == 0)) {
            GS_DEBUG("%s(%s): wrapped %s", path, symbol, gs_driver_entry_name(i));
            *pfn = gs_entry_to_ptr(gs_symbols_driver_wrapper(i));
            return rc;
        }
    }
    int chosen = choose_variant(symbol, version, flags);
    if (chosen >= 0) {
        gs_driver_note_unknown_pointer(chosen, path, symbol);
        *pfn = gs_entry_to_ptr(gs_symbols_driver_wrapper(chosen));
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
    return finish_lookup("cuGetProcAddress", symbol, version, flags, pfn,
                         GS_REAL(cuGetProcAddress)(symbol, pfn, version, flags));
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
    return finish_lookup("cuGetProcAddress_v2", symbol, version, flags, pfn,
                         GS_REAL(cuGetProcAddress_v2)(symbol, pfn, version, flags, status));
}
