/*
 * The real CUDA driver behind libgpuslice.so (see gs_driver.h): finding
 * glibc's own dlsym, opening libcuda.so.1 (or GPUSLICE_REAL_LIBCUDA, which
 * a set-uid or set-gid program never reads: gs_settings.c) on first use,
 * and resolving every listed symbol in it. (Which of them the shim wraps,
 * and with what, is gs_symbols.c's.)
 *
 * Nothing here runs when the library loads except finding dlsym and
 * reading the log level: a process that never calls CUDA never opens the
 * driver.
 */
#include "gs_driver.h"
#include "gs_glibc_compat.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_settings.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

gs_entry gs_real_fn[GS_ENTRY_COUNT];
_Atomic int gs_driver_state;

/* glibc's dlsym; written once by resolve_real_dlsym (this library's
 * constructor, or the driver loading if that comes first), read by the
 * dlsym stub in gs_dlsym_*.S without a lock. Until it is set the stub
 * passes every lookup straight to glibc. */
__attribute__((visibility("hidden"))) void *gs_real_dlsym_ptr;

/* Driver loading is serialised by the driver_init lock (gs_locks.h);
 * in_driver_init marks the loading thread (its own) so that calls back
 * from the real driver's constructor are not re-entered. */
static __thread bool in_driver_init;

#define GS_ENTRY(name, params, wrapped) #name,
static const char *const entry_names[GS_ENTRY_COUNT] = {
#include "gs_entries.h"
};

void *gs_entry_to_ptr(gs_entry fn)
{
    void *ptr;
    memcpy(&ptr, &fn, sizeof ptr);
    return ptr;
}

gs_entry gs_ptr_to_entry(void *ptr)
{
    gs_entry fn;
    memcpy(&fn, &ptr, sizeof fn);
    return fn;
}

typedef void *(*dlsym_fn)(void *, const char *);

/* Finds glibc's dlsym. Newest version first: 2.34 moved dlsym into libc;
 * before that it lived in libdl at the architecture's base version.
 * Called by the dlsym stub before this library's constructor has run, and
 * possibly before a sanitizer runtime is ready: so it is not instrumented
 * and calls nothing but dlvsym. */
__attribute__((visibility("hidden"), no_sanitize("address", "thread", "undefined")))
void *gs_resolve_real_dlsym_early(void);

void *gs_resolve_real_dlsym_early(void)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    void *found = NULL;
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !found; i++)
        found = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    return found;
}

static dlsym_fn resolve_real_dlsym(void)
{
    void *found = __atomic_load_n(&gs_real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (!found) {
        /* Storing it arms the dlsym stub: from here on, lookups go through
         * gs_dlsym_hook. */
        if (!(found = gs_resolve_real_dlsym_early())) {
            gs_log(GS_LOG_ERROR, "cannot find glibc's dlsym: %s", dlerror());
            return NULL;
        }
        __atomic_store_n(&gs_real_dlsym_ptr, found, __ATOMIC_RELEASE);
    }
    return (dlsym_fn)gs_ptr_to_entry(found);
}

void *gs_call_real_dlsym(void *handle, const char *name)
{
    dlsym_fn real = resolve_real_dlsym();
    return real ? real(handle, name) : NULL;
}

static void load_driver(void)
{
    const char *path = gs_getenv("GPUSLICE_REAL_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        gs_log(GS_LOG_ERROR, "cannot load the CUDA driver %s: %s", path, dlerror());
        atomic_store_explicit(&gs_driver_state, GS_DRIVER_FAILED, memory_order_release);
        return;
    }
    for (int i = 0; i < GS_ENTRY_COUNT; i++)
        gs_real_fn[i] = gs_ptr_to_entry(gs_call_real_dlsym(handle, entry_names[i]));
    if (gs_is_own(gs_entry_to_ptr(gs_real_fn[GS_IDX_cuInit]))) {
        gs_log(GS_LOG_ERROR, "%s resolves to libgpuslice itself; point GPUSLICE_REAL_LIBCUDA at NVIDIA's libcuda.so.1", path);
        memset(gs_real_fn, 0, sizeof gs_real_fn);
        atomic_store_explicit(&gs_driver_state, GS_DRIVER_FAILED, memory_order_release);
        return;
    }
    if (GS_LOG_ENABLED(GS_LOG_DEBUG)) {
        Dl_info info;
        void *where = gs_entry_to_ptr(gs_real_fn[GS_IDX_cuInit]);
        const char *file = where && dladdr(where, &info) && info.dli_fname ? info.dli_fname : path;
        gs_log(GS_LOG_DEBUG, "real CUDA driver loaded from %s", file);
    }
    atomic_store_explicit(&gs_driver_state, GS_DRIVER_READY, memory_order_release);
}

CUresult gs_driver_init_slow(void)
{
    int state = atomic_load_explicit(&gs_driver_state, memory_order_acquire);
    if (state == GS_DRIVER_UNLOADED && !in_driver_init) {
        gs_lock(GS_LOCK_DRIVER_INIT);
        if (atomic_load_explicit(&gs_driver_state, memory_order_acquire) == GS_DRIVER_UNLOADED) {
            in_driver_init = true;
            load_driver();
            in_driver_init = false;
        }
        gs_unlock(GS_LOCK_DRIVER_INIT);
        state = atomic_load_explicit(&gs_driver_state, memory_order_acquire);
        /* Registered after the driver's own fork handlers, so that ours
         * take the shim's locks before the driver takes its own (after
         * the lock: a fork meanwhile takes it too). */
        if (state == GS_DRIVER_READY)
            gs_locks_fork_after_driver();
    }
    return state == GS_DRIVER_READY ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

int gs_driver_entry_index(const char *name)
{
    if (!name || name[0] != 'c' || name[1] != 'u')
        return -1;
    for (int i = 0; i < GS_ENTRY_COUNT; i++)
        if (strcmp(entry_names[i], name) == 0)
            return i;
    return -1;
}

const char *gs_driver_entry_name(int index)
{
    return entry_names[index];
}

bool gs_is_own(const void *fn)
{
    Dl_info found, own;
    return fn && dladdr(fn, &found) && dladdr(gs_entry_to_ptr((gs_entry)gs_call_real_dlsym), &own) &&
           found.dli_fbase == own.dli_fbase;
}

/* Entries already reported by gs_driver_note_unknown_pointer; bits set
 * with atomic OR, from any thread. */
static _Atomic uint64_t unknown_reported[(GS_ENTRY_COUNT + 63) / 64];

void gs_driver_note_unknown_pointer(int index, const char *path, const char *asked)
{
    uint64_t bit = 1ull << (index % 64);
    if (atomic_fetch_or(&unknown_reported[index / 64], bit) & bit)
        return;
    gs_log(GS_LOG_INFO, "%s(%s) returned a pointer that is not the driver's %s: wrapped as %s all the same",
           path, asked, entry_names[index], entry_names[index]);
}

__attribute__((constructor)) static void gpuslice_load(void)
{
    gs_log_init(gs_getenv("GPUSLICE_LOG"));
    resolve_real_dlsym();
}
