/*
 * The real CUDA driver behind libgpuslice.so: loading it, and the table of
 * its functions the shim wraps or calls. The prologue every wrapper shares.
 */
#ifndef GPUSLICE_DRIVER_H
#define GPUSLICE_DRIVER_H

#define __CUDA_API_VERSION_INTERNAL 1 /* every versioned name, literally */
#include <cuda.h>

#include <stdatomic.h>
#include <stdbool.h>

#include "gs_log.h"

#define GS_EXPORT __attribute__((visibility("default")))

/* A generic function pointer: what the tables hold. */
typedef void (*gs_entry)(void);

#define GS_ENTRY(name, params, wrapped) GS_IDX_##name,
enum gs_entry_index {
#include "gs_entries.h"
    GS_ENTRY_COUNT
};

/* A typedef and a declaration for every wrapped symbol. The declarations
 * also check each listed signature against cuda.h. */
#define GS_ENTRY(name, params, wrapped) typedef CUresult (*gs_fn_##name) params; CUresult name params;
#include "gs_entries.h"

/* The real driver's functions, by GS_IDX_*; NULL where the driver lacks
 * one. Written once by gs_driver_init before gs_driver_state becomes
 * GS_DRIVER_READY (release); read-only afterwards, without a lock. */
extern gs_entry gs_real_fn[GS_ENTRY_COUNT];

enum { GS_DRIVER_UNLOADED = 0, GS_DRIVER_READY = 1, GS_DRIVER_FAILED = 2 };
extern _Atomic int gs_driver_state;

#define GS_REAL(name) ((gs_fn_##name)gs_real_fn[GS_IDX_##name])

/* Loads the real driver once, from any thread. Returns CUDA_SUCCESS, or
 * CUDA_ERROR_NOT_INITIALIZED when it cannot be loaded (logged once) or
 * when called back from inside the real driver's own loading. */
CUresult gs_driver_init_slow(void);

static inline CUresult gs_driver_init(void)
{
    if (__builtin_expect(atomic_load_explicit(&gs_driver_state, memory_order_acquire) == GS_DRIVER_READY, 1))
        return CUDA_SUCCESS;
    return gs_driver_init_slow();
}

/* The index of the exact symbol `name` among the entries, or -1. */
int gs_driver_entry_index(const char *name);
/* An entry's exact symbol name. */
const char *gs_driver_entry_name(int index);

/* Whether fn lies in libgpuslice.so itself (a lookup that found the shim's
 * own export rather than the real library's). */
bool gs_is_own(const void *fn);

/* Logs, once per entry, that a lookup of a wrapped name returned a pointer
 * that is not the driver's exported function: it is wrapped all the same. */
void gs_driver_note_unknown_pointer(int index, const char *path, const char *asked);

/* glibc's dlsym, found with dlvsym; NULL only if no known version exists. */
void *gs_call_real_dlsym(void *handle, const char *name);

/* Converts between object and function pointers, which ISO C does not
 * cast but POSIX guarantees to have the same representation. */
void *gs_entry_to_ptr(gs_entry fn);
gs_entry gs_ptr_to_entry(void *ptr);

/* The prologue every wrapper shares. A symbol the real driver lacks is
 * "not found", as the driver itself would answer through cuGetProcAddress. */
#define GS_PROLOGUE(name)                                               \
    CUresult gs_rc = gs_driver_init();                                  \
    if (__builtin_expect(gs_rc != CUDA_SUCCESS, 0))                     \
        return gs_rc;                                                   \
    if (__builtin_expect(!gs_real_fn[GS_IDX_##name], 0))                \
        return CUDA_ERROR_NOT_FOUND;                                    \
    GS_DEBUG("intercepted %s", #name)

#endif
