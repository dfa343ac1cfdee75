/*
 * Keeping the gate consistent across fork(): the gate lock is held over
 * the fork so that the child never inherits it mid-update, and the child
 * starts with no gate thread, no connection and no devices.
 */
#include "gs_hooks.h"
#include "gs_nvml.h"
#include "gs_contexts.h"
#include "gs_graph.h"

void gs_hooks_before_fork(void)
{
    pthread_mutex_lock(&gs_gate_lock);
}

void gs_hooks_after_fork_parent(void)
{
    pthread_mutex_unlock(&gs_gate_lock);
}

void gs_hooks_after_fork_child(void)
{
    gs_memory_after_fork_child();
    gs_client_after_fork_child();
    gs_capture_after_fork_child();
    gs_drain_after_fork_child();
    gs_graph_after_fork_child();
    gs_contexts_after_fork_child();
    gs_gate_after_fork_child();
    gs_nvml_after_fork_child();
}
