/*
 * The simulated stand-ins for what shim/gs_dispatch.c, compiled into the
 * simulation unchanged, calls in the rest of the shim: the connection
 * (gs_conn.c: a message about a GPU sent, the gate thread and the launcher
 * reading the socket woken) and the gate lock's condition variables
 * (gs_locks.c: the launchers waiting for admission and the drainers
 * woken). Each acts on the simulated process whose shim runs
 * (shim_current, sim_shim.c) in the simulated world (sim_world). No
 * socket, eventfd or thread: these are what the simulation cannot run.
 */
#include "sim.h"

#include "gs_conn.h"
#include "gs_locks.h"

int gs_conn_send_about_locked(struct gs_dev *d, const struct gs_msg *m)
{
    return shim_sends(sim_world, shim_current, d, m);
}

void gs_conn_wake_gate_thread(void)
{
    shim_wake_gate(sim_world, shim_current);
}

/* No launcher reads the socket here: a launch that waits waits on
 * gs_gate_cv (gs_gate_cv_broadcast wakes it). */
bool gs_conn_launcher_reads_locked(void)
{
    return false;
}

void gs_conn_wake_reader(void)
{
}

void gs_gate_cv_broadcast(void)
{
    shim_wake_launchers(sim_world, shim_current);
}

void gs_drainer_cv_broadcast(void)
{
    shim_wake_drainers(sim_world, shim_current);
}
