/*
 * The wrappers libgpuslice.so exports under the driver's own names, one per
 * line of gs_entries.h. Each one makes sure the real driver is loaded, logs
 * the call at debug level, runs the hook points and calls the real function.
 *
 * Hot path: once the driver is loaded, a wrapper costs an acquire load, a
 * predictable branch on the log level and the launch gate's fast path
 * (gs_launch.h); no lock, no syscall.
 */
#include "gs_driver.h"
#include "gs_launch.h"
#include "gs_log.h"

#define GS_LAUNCH(name, params, args, stream, ptsz)                     \
    GS_EXPORT CUresult name params                                      \
    {                                                                   \
        GS_PROLOGUE(name);                                              \
        struct gs_admit gs_admit;                                       \
        if ((gs_rc = gs_launch_enter(stream, ptsz, &gs_admit)) != CUDA_SUCCESS) \
            return gs_rc;                                               \
        gs_rc = GS_REAL(name) args;                                     \
        gs_launch_exit(&gs_admit, gs_rc);                          \
        return gs_rc;                                                   \
    }

/* Context calls may change the calling thread's current device. */
#define GS_LIFECYCLE(name, params, args)                                \
    GS_EXPORT CUresult name params                                      \
    {                                                                   \
        GS_PROLOGUE(name);                                              \
        gs_rc = GS_REAL(name) args;                                     \
        gs_launch_context_changed();                                      \
        return gs_rc;                                                   \
    }

#define GS_CUSTOM(name, params, args) /* gs_graph.c, gs_streams.c, gs_lifetimes.c, gs_sync.c, ... */
#define GS_MEMORY(name, params, args) /* gs_memory.c */
#define GS_LOOKUP(name, params, args) /* gs_symbols.c */
#define GS_INTERNAL(name, params, args) /* not wrapped */

#include "gs_entries.h"
