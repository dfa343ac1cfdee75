/*
 * The hook points every wrapper calls around the real driver call: the
 * launch gate around compute submissions, and context tracking.
 *
 * Hot path: gs_hook_launch_enter for a thread whose device already holds
 * a slice with budget left is three relaxed loads and one atomic add; no
 * lock, no system call, no clock read. Everything else is gs_gate_slow.
 */
#ifndef GPUSLICE_HOOKS_H
#define GPUSLICE_HOOKS_H

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

static inline CUresult gs_hook_launch_enter(struct gs_dev **out)
{
    struct gs_dev *d = gs_tls_dev;
    if (__builtin_expect(d != NULL, 1) &&
        __builtin_expect(atomic_load_explicit(&d->open, memory_order_relaxed), 1) &&
        __builtin_expect(atomic_load_explicit(&d->admitted, memory_order_relaxed) <
                             atomic_load_explicit(&d->budget, memory_order_relaxed), 1)) {
        atomic_fetch_add_explicit(&d->admitted, 1, memory_order_relaxed);
        *out = d;
        return CUDA_SUCCESS;
    }
    *out = NULL;
    CUresult rc = gs_gate_slow(out);
    /* No current context: let the driver answer the launch itself. */
    return rc == CUDA_ERROR_INVALID_CONTEXT ? CUDA_SUCCESS : rc;
}

static inline void gs_hook_launch_exit(struct gs_dev *d)
{
    if (d)
        atomic_fetch_add_explicit(&d->submitted, 1, memory_order_release);
}

/* The calling thread's current context may have changed. */
static inline void gs_hook_context_changed(void)
{
    gs_tls_dev = NULL;
}

void gs_hooks_before_fork(void);
void gs_hooks_after_fork_parent(void);
/* Called in a forked child, before it returns from fork(). */
void gs_hooks_after_fork_child(void);
void gs_memory_after_fork_child(void);

#endif
