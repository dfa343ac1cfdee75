/*
 * The wrappers libgpuslice.so exports under the driver's own names, one per
 * line of gs_entries.h. Each one makes sure the real driver is loaded, logs
 * the call at debug level, runs the hook points and calls the real function.
 *
 * Hot path: once the driver is loaded, a wrapper costs an acquire load, a
 * predictable branch on the log level and the hooks; no lock, no syscall.
 */
#include "gs_driver.h"
#include "gs_hooks.h"
#include "gs_log.h"

#define GS_LAUNCH(name, params, args, stream)                           \
    GS_EXPORT CUresult name params                                      \
    {                                                                   \
        GS_PROLOGUE(name);                                              \
        struct gs_dev *gs_dev;                                          \
        (void)(stream);                                                 \
        if ((gs_rc = gs_hook_launch_enter(&gs_dev)) != CUDA_SUCCESS)    \
            return gs_rc;                                               \
        gs_rc = GS_REAL(name) args;                                     \
        gs_hook_launch_exit(gs_dev);                                    \
        return gs_rc;                                                   \
    }

#define GS_PASS(name, params, args)                                     \
    GS_EXPORT CUresult name params                                      \
    {                                                                   \
        GS_PROLOGUE(name);                                              \
        return GS_REAL(name) args;                                      \
    }

/* Context calls may change the calling thread's current device. */
#define GS_LIFECYCLE(name, params, args)                                \
    GS_EXPORT CUresult name params                                      \
    {                                                                   \
        GS_PROLOGUE(name);                                              \
        gs_rc = GS_REAL(name) args;                                     \
        gs_hook_context_changed();                                      \
        return gs_rc;                                                   \
    }

#define GS_CTX_DESTROY(name, params, args, ctx)                         \
    GS_EXPORT CUresult name params                                      \
    {                                                                   \
        GS_PROLOGUE(name);                                              \
        gs_gate_forget_ctx(ctx);                                        \
        gs_rc = GS_REAL(name) args;                                     \
        gs_hook_context_changed();                                      \
        return gs_rc;                                                   \
    }

#define GS_MEMORY(name, params, args) /* gs_memory.c */
#define GS_LOOKUP(name, params, args) /* gs_procaddress.c */
#define GS_INTERNAL(name, params, args) /* not wrapped */

#include "gs_entries.h"
