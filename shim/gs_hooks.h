/*
 * The hook points every wrapper calls around the real driver call. The
 * launch gate (time-slice tokens) and memory accounting fill them in; on
 * their own they pass everything through.
 *
 * Hot-path rule: gs_hook_launch_enter with a valid slice takes no lock and
 * makes no system call.
 */
#ifndef GPUSLICE_HOOKS_H
#define GPUSLICE_HOOKS_H

#include "gs_driver.h"

/* Before and after a compute submission on `stream` (NULL: the default
 * stream). A non-success result from enter is returned to the application
 * instead of launching. */
static inline CUresult gs_hook_launch_enter(CUstream stream)
{
    (void)stream;
    return CUDA_SUCCESS;
}

static inline void gs_hook_launch_exit(CUstream stream, CUresult rc)
{
    (void)stream;
    (void)rc;
}

/* Called in a forked child, before it returns from fork(). */
void gs_hooks_after_fork_child(void);

#endif
