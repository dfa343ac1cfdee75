/*
 * The hook points every wrapper calls around the real driver call: the
 * launch gate around compute submissions, and context tracking.
 *
 * Hot path: gs_hook_launch_enter for a thread that launched into the same
 * stream before in this slice, while its device holds a slice with budget
 * left and no graph capture is under way in the process, is a few relaxed
 * loads, one atomic add and two loads after it; no lock, no system call,
 * no clock read, no driver call. (The first launch after a synchronization that left the
 * GPU idle also reads the clock, to end the spell: gs_slice_end_idle.)
 * Everything else is gs_gate_slow.
 */
#ifndef GPUSLICE_HOOKS_H
#define GPUSLICE_HOOKS_H

#include "gs_capture.h"
#include "gs_gate.h"
#include "gs_log.h"

/* The prologue every wrapper shares. A symbol the real driver lacks is
 * "not found", as the driver itself would answer through cuGetProcAddress. */
#define GS_PROLOGUE(name)                                               \
    CUresult gs_rc = gs_driver_init();                                  \
    if (__builtin_expect(gs_rc != CUDA_SUCCESS, 0))                     \
        return gs_rc;                                                   \
    if (__builtin_expect(!gs_real_fn[GS_IDX_##name], 0))                \
        return CUDA_ERROR_NOT_FOUND;                                    \
    GS_DEBUG("intercepted %s", #name)

#define GS_RELAXED(x) atomic_load_explicit(&(x), memory_order_relaxed)

static inline CUresult gs_hook_launch_enter(CUstream stream, int ptsz, struct gs_admit *a)
{
    const struct gs_launch_cache *c = gs_tls_launches;
    for (int i = 0; i < GS_LAUNCH_CACHE; i++, c++) {
        if (c->stream != stream || c->ptsz != ptsz || !c->dev)
            continue;
        struct gs_dev *d = c->dev;
        if (__builtin_expect(GS_RELAXED(gs_captures_active) == 0, 1) &&
            __builtin_expect(c->handles_gen == GS_RELAXED(gs_handles_gen), 1) &&
            __builtin_expect(c->stream_set_gen == GS_RELAXED(d->stream_set_gen), 1) &&
            __builtin_expect(gs_slice_admit_fast(&d->slice), 1)) {
            /* Sequentially consistent with the add (gs_slice_admit_fast):
             * a synchronization that marks the device idle either sees
             * this launch or is seen by it (gs_slice.c). */
            if (__builtin_expect(atomic_load(&d->slice.idle_since) != 0, 0))
                gs_slice_end_idle(&d->slice, gs_now_ns());
            a->dev = d;
            a->mark = c->mark;
            return CUDA_SUCCESS;
        }
        break;
    }
    return gs_gate_slow(stream, ptsz, a);
}

static inline void gs_hook_launch_exit(const struct gs_admit *a, CUresult rc)
{
    if (a->mark && rc == CUDA_SUCCESS)
        gs_drain_record_thread_mark(a->mark);
    if (a->dev)
        atomic_fetch_add_explicit(&a->dev->slice.submitted, 1, memory_order_release);
}

/* The calling thread's current context may have changed: what its default
 * streams resolve to may have too. */
static inline void gs_hook_context_changed(void)
{
    gs_tls_dev = NULL;
    for (int i = 0; i < GS_LAUNCH_CACHE; i++)
        gs_tls_launches[i].dev = NULL;
}

void gs_hooks_before_fork(void);
void gs_hooks_after_fork_parent(void);
/* Called in a forked child, before it returns from fork(). */
void gs_hooks_after_fork_child(void);
void gs_memory_after_fork_child(void);

#endif
