/*
 * fork(): the child of a process that uses the shim is consistent, and
 * starts with no gate thread, no connection, no GPUs, contexts, captures
 * or device memory of its own; it may use CUDA as any process does.
 *
 * atfork_prepare takes every lock of the table in gs_locks.h, in its
 * order, so that no other thread is in the middle of changing anything a
 * lock guards when the process is copied; the parent lets them go; the
 * child lets them go and forgets what was its parent's, file by file.
 * (Other threads of the parent do not exist in the child.)
 *
 * Owns nothing.
 */
#include "gs_capture.h"
#include "gs_conn.h"
#include "gs_contexts.h"
#include "gs_ctxmem.h"
#include "gs_dispatch.h"
#include "gs_drain.h"
#include "gs_gate_thread.h"
#include "gs_graphcost.h"
#include "gs_graphmem.h"
#include "gs_launch.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_memory.h"
#include "gs_nvml.h"
#include "gs_pools.h"

static void atfork_prepare(void)
{
    gs_locks_before_fork();
}

static void atfork_parent(void)
{
    gs_locks_after_fork_parent();
}

static void atfork_child(void)
{
    gs_conn_after_fork_child();
    gs_gate_thread_after_fork_child();
    gs_dispatch_after_fork_child();
    gs_launch_after_fork_child();
    gs_capture_after_fork_child();
    gs_drain_after_fork_child();
    gs_graphcost_after_fork_child();
    gs_contexts_after_fork_child();
    gs_memory_after_fork_child();
    gs_lease_after_fork_child();
    gs_pools_after_fork_child();
    gs_ctxmem_after_fork_child();
    gs_graphmem_after_fork_child();
    gs_nvml_after_fork_child();
    gs_locks_after_fork_child();
}

__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}
