/*
 * The real NVML behind libgpuslice.so (see gs_nvml.h): loading it, the
 * table of its functions the shim wraps or uses, and the map from a name
 * to the shim's wrapper, for the dlsym path (gs_dlsym.c).
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
#include "gs_log.h"
#include "gs_settings.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

gs_entry gs_nvml_real[GS_NVML_COUNT];

enum { NVML_UNLOADED = 0, NVML_READY = 1, NVML_FAILED = 2 };
/* Whether gs_nvml_real is filled; set once under init_lock (release). */
static _Atomic int nvml_state;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

#define GS_NVML_ENTRY(name, params, wrapped) #name,
static const char *const names[GS_NVML_COUNT] = {
#include "gs_nvml_entries.h"
};

/* The wrappers, declared and listed (NULL for an internal entry). */
#define GS_NVML(name, params) GS_EXPORT nvmlReturn_t name params;
#define GS_NVML_INTERNAL(name, params)
#include "gs_nvml_entries.h"
#define GS_NVML(name, params) (gs_entry)name,
#define GS_NVML_INTERNAL(name, params) NULL,
static const gs_entry wrappers[GS_NVML_COUNT] = {
#include "gs_nvml_entries.h"
};

static int index_of(const char *name)
{
    if (!name || strncmp(name, "nvml", 4) != 0)
        return -1;
    for (int i = 0; i < GS_NVML_COUNT; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

bool gs_nvml_is_wrapped_name(const char *name)
{
    int i = index_of(name);
    return i >= 0 && wrappers[i];
}

static bool resolve(void *handle, const char *what)
{
    for (int i = 0; i < GS_NVML_COUNT; i++)
        gs_nvml_real[i] = gs_ptr_to_entry(gs_call_real_dlsym(handle, names[i]));
    for (int i = 0; i < GS_NVML_COUNT; i++)
        if (wrappers[i] && gs_nvml_real[i] == wrappers[i]) {
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
        pthread_mutex_lock(&init_lock);
        if (atomic_load_explicit(&nvml_state, memory_order_acquire) == NVML_UNLOADED)
            load(hint);
        pthread_mutex_unlock(&init_lock);
        state = atomic_load_explicit(&nvml_state, memory_order_acquire);
    }
    return state == NVML_READY ? NVML_SUCCESS : NVML_ERROR_LIBRARY_NOT_FOUND;
}

/* Entries already reported by lookup as found elsewhere; bits set with
 * atomic OR, from any thread. */
static _Atomic uint64_t unknown_reported[(GS_NVML_COUNT + 63) / 64];

void *gs_nvml_lookup(const char *name, void *found)
{
    int i = index_of(name);
    if (!found || i < 0 || !wrappers[i])
        return found;
    gs_entry fn = gs_ptr_to_entry(found);
    if (fn == wrappers[i])
        return found; /* the shim's own export (RTLD_DEFAULT finds it first) */
    if (gs_nvml_init(found) == NVML_SUCCESS && fn != gs_nvml_real[i]) {
        uint64_t bit = 1ull << (i % 64);
        if (!(atomic_fetch_or(&unknown_reported[i / 64], bit) & bit))
            gs_log(GS_LOG_INFO, "dlsym(%s) returned a pointer that is not NVML's %s: wrapped all the same", name,
                   name);
    }
    GS_DEBUG("dlsym(%s): wrapped", name);
    return gs_entry_to_ptr(wrappers[i]);
}
