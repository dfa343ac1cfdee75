/*
 * The real NVML behind libgpuslice.so (see gs_nvml.h): loading it, and the
 * table of its functions the shim wraps or uses. (The map from a name to
 * the shim's wrapper, for the dlsym path, is gs_symbols.c's.)
 *
 * NVML is reached the ways the CUDA driver is, and wrapped on each:
 *   - linked (libnvidia-ml.so.1 in DT_NEEDED): the shim, preloaded, exports
 *     the wrapped names, so the application's references bind to them;
 *   - dlopen + dlsym (nvidia-smi, pynvml, go-nvml, DCGM): a wrapped name
 *     returns the wrapper, by name, whatever dlsym found (fail closed), so
 *     a tool's trampoline or an alias never reaches the application;
 *   - versioned names (_v2, _v3): each is an exact name of its own, and
 *     the application gets the wrapper of the variant it named.
 * Nothing is loaded until a wrapped name is looked up or called: a process
 * that never uses NVML never opens it.
 *
 * The library the wrappers call is the one the application loaded: the
 * object holding the function its lookup found (dladdr), so an
 * application that opens NVML by a path of its own gets that library;
 * failing that GPUSLICE_REAL_LIBNVML, then libnvidia-ml.so.1.
 */
#include "gs_nvml.h"
#include "gs_glibc_compat.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_settings.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

gs_entry gs_nvml_real[GS_NVML_COUNT];

enum { NVML_UNLOADED = 0, NVML_READY = 1, NVML_FAILED = 2 };
/* Whether gs_nvml_real is filled; set once under the nvml_init lock
 * (release). */
static _Atomic int nvml_state;

#define GS_NVML_ENTRY(name, params, wrapped) #name,
static const char *const names[GS_NVML_COUNT] = {
#include "gs_nvml_entries.h"
};

int gs_nvml_index(const char *name)
{
    if (!name || strncmp(name, "nvml", 4) != 0)
        return -1;
    for (int i = 0; i < GS_NVML_COUNT; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

static bool resolve(void *handle, const char *what)
{
    for (int i = 0; i < GS_NVML_COUNT; i++)
        gs_nvml_real[i] = gs_ptr_to_entry(gs_call_real_dlsym(handle, names[i]));
    for (int i = 0; i < GS_NVML_COUNT; i++)
        if (gs_nvml_real[i] && gs_is_own(gs_entry_to_ptr(gs_nvml_real[i]))) {
            gs_log(GS_LOG_ERROR, "%s resolves %s to libgpuslice itself; point GPUSLICE_REAL_LIBNVML at "
                   "NVIDIA's libnvidia-ml.so.1", what, names[i]);
            memset(gs_nvml_real, 0, sizeof gs_nvml_real);
            return false;
        }
    GS_DEBUG("real NVML: %s", what);
    return true;
}

static void load(void *hint)
{
    Dl_info info;
    if (hint && dladdr(hint, &info) && info.dli_fname) {
        /* The library the application's own lookup found, already loaded. */
        void *handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (handle && resolve(handle, info.dli_fname)) {
            atomic_store_explicit(&nvml_state, NVML_READY, memory_order_release);
            return;
        }
    }
    const char *path = gs_getenv("GPUSLICE_REAL_LIBNVML");
    if (!path || !*path)
        path = "libnvidia-ml.so.1";
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        gs_log(GS_LOG_INFO, "cannot load NVML %s: %s", path, dlerror());
        atomic_store_explicit(&nvml_state, NVML_FAILED, memory_order_release);
        return;
    }
    atomic_store_explicit(&nvml_state, resolve(handle, path) ? NVML_READY : NVML_FAILED, memory_order_release);
}

nvmlReturn_t gs_nvml_init(void *hint)
{
    int state = atomic_load_explicit(&nvml_state, memory_order_acquire);
    if (state == NVML_UNLOADED) {
        gs_lock(GS_LOCK_NVML_INIT);
        if (atomic_load_explicit(&nvml_state, memory_order_acquire) == NVML_UNLOADED)
            load(hint);
        gs_unlock(GS_LOCK_NVML_INIT);
        state = atomic_load_explicit(&nvml_state, memory_order_acquire);
    }
    return state == NVML_READY ? NVML_SUCCESS : NVML_ERROR_LIBRARY_NOT_FOUND;
}

