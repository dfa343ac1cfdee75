/*
 * The dlsym override: how libgpuslice.so sees the entry points that
 * libcudart, PyTorch, JAX and CuPy fetch with dlopen("libcuda.so.1") and
 * dlsym, and NVML's, which nvidia-smi and pynvml fetch the same way.
 * Lookups of wrapped CUDA and NVML names return the wrapper; every other
 * lookup returns exactly what glibc's dlsym returns.
 *
 * glibc's dlsym(RTLD_NEXT, ...) searches after the object that called it,
 * which it learns from its return address. So the exported dlsym is a small
 * assembly stub (gs_dlsym_<arch>.S) that tail-jumps straight into glibc's
 * dlsym for RTLD_NEXT, leaving the caller's return address in place, and
 * jumps here for every other handle. Only public interfaces are used:
 * glibc's dlsym is found with dlvsym(RTLD_NEXT, "dlsym", version).
 */
#include "gs_driver.h"
#include "gs_symbols.h"
#include "gs_log.h"
#include "gs_nvml.h"

#include <dlfcn.h>

__attribute__((visibility("hidden"))) void *gs_dlsym_hook(void *handle, const char *name);

void *gs_dlsym_hook(void *handle, const char *name)
{
    void *result = gs_call_real_dlsym(handle, name);
    /* NVML names: the same rule, for libnvidia-ml.so.1 (gs_nvml.c). */
    if (result && handle != RTLD_NEXT && name && name[0] == 'n' && gs_symbols_nvml_wrapped(name))
        return gs_symbols_nvml_lookup(name, result);
    /* Only names the shim wraps can load the driver: a process that looks
     * up curl_easy_init must not find libcuda opened behind its back.
     * Matched by name, not address (fail closed): whatever the lookup
     * found for a wrapped name, the application gets the wrapper. */
    if (!result || handle == RTLD_NEXT || !gs_symbols_driver_wrapped(name))
        return result;
    /* Even when the shim cannot load the driver itself: the wrapper then
     * answers CUDA_ERROR_NOT_INITIALIZED rather than let work run ungated. */
    int index = gs_driver_entry_index(name);
    if (gs_driver_init() == CUDA_SUCCESS && gs_ptr_to_entry(result) != gs_real_fn[index])
        gs_driver_note_unknown_pointer(index, "dlsym", name);
    GS_DEBUG("dlsym(%s): wrapped", name);
    return gs_entry_to_ptr(gs_symbols_driver_wrapper(index));
}

#if !defined(__x86_64__) && !defined(__aarch64__)
/* No tail-jump stub for this architecture: RTLD_NEXT lookups made through
 * this path resolve relative to libgpuslice.so instead of the caller. */
GS_EXPORT void *dlsym(void *handle, const char *name)
{
    return gs_dlsym_hook(handle, name);
}
#endif
