/*
 * Keeping the gate consistent across fork(): the gate lock is held over
 * the fork so that the child never inherits it mid-update, and the child
 * starts with no gate thread, no connection and no devices.
 */
#include "gs_hooks.h"

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
    gs_gate_after_fork_child();
}
