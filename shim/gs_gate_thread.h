/*
 * The gate thread (gs_gate_thread.c): the shim's one reader of its
 * connection to gpuslice-server. Started by the first call that needs the
 * server (a GPU's first use), so a process that never calls CUDA never
 * connects and starts no thread.
 */
#ifndef GPUSLICE_GATE_THREAD_H
#define GPUSLICE_GATE_THREAD_H

#include <stdbool.h>

/* Starts the gate thread, unless it runs (gate lock held). Its start may
 * fail (a container at its pids.max): the calls that need it try again. */
void gs_gate_thread_start_locked(void);

/* A launch waits (gate lock held; released meanwhile) until something may
 * have changed: a message from the server, a broadcast of gs_gate_cv, or
 * 50 ms. for_grant: it waits for a GRANT, and may read the server's
 * socket itself (one launcher at a time; the gate thread leaves the socket
 * to it meanwhile), so that the GRANT wakes it directly rather than
 * through the gate thread: one thread hop less per handoff. */
void gs_gate_thread_wait_locked(bool for_grant);

void gs_gate_thread_after_fork_child(void);

#endif
