/*
 * The simulated stand-ins for what the shim's dispatch, the gate thread's
 * handling of messages and the lease ledger (shim/gs_dispatch.c,
 * shim/gs_gate_messages.c, shim/gs_lease.c), compiled into the simulation
 * unchanged, call in the rest of the shim: the connection (gs_conn.c:
 * connecting and losing it, sending, the answers awaited, the gate thread
 * and the launcher reading the socket woken), the locks and the gate
 * lock's condition variables (gs_locks.c: nothing to lock, the launchers
 * waiting for admission and the drainers woken), the drainers' start
 * (gs_drain.c) and the log (gs_log.c).
 * Each acts on the simulated process whose shim runs (shim_current,
 * sim_shim.c) in the simulated world (sim_world), mostly through
 * sim_shim.c. No socket, eventfd, thread or clock: these are what the
 * simulation cannot run. No state of its own but the log's threshold,
 * which stays as it starts.
 */
#include "sim.h"

#include "gs_conn.h"
#include "gs_drain.h"
#include "gs_locks.h"
#include "gs_log.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- gs_conn.c ---------------------------------------------------------------- */

bool gs_conn_policy_open_locked(void)
{
    return shim_policy_open(sim_world, shim_current);
}

bool gs_conn_connected_locked(void)
{
    return shim_current->conn >= 0 && shim_current->welcomed;
}

bool gs_conn_connect_locked(void)
{
    return shim_connects(sim_world, shim_current);
}

void gs_conn_welcomed_locked(const char *tenant)
{
    (void)tenant;
    shim_current->welcomed = true;
}

void gs_conn_lost_locked(const char *why)
{
    (void)why; /* the caller closed the simulated connection */
    shim_conn_lost(shim_current);
}

/* One clock for the whole node. */
int64_t gs_conn_clock_offset_locked(void)
{
    return 0;
}

int gs_conn_send_locked(const struct gs_msg *m)
{
    return shim_sends(sim_world, shim_current, NULL, m);
}

int gs_conn_send_about_locked(struct gs_dev *d, const struct gs_msg *m)
{
    return shim_sends(sim_world, shim_current, d, m);
}

void gs_conn_declare_locked(struct gs_dev *d)
{
    shim_declares(sim_world, shim_current, d);
}

/* The answers waited for are the simulated process's leases (sim_shim.c:
 * gs_reserve.c's requests, asked without a thread that waits). */
struct gs_answer *gs_conn_answer_arrived_locked(uint64_t id, const struct gs_msg *m)
{
    return shim_answer_arrived(shim_current, id, m);
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

/* ---- gs_locks.c ---------------------------------------------------------------- */

/* One thread runs every simulated process: nothing to lock. */
void gs_lock(enum gs_lock lock)
{
    (void)lock;
}

void gs_unlock(enum gs_lock lock)
{
    (void)lock;
}

void gs_gate_cv_broadcast(void)
{
    shim_wake_launchers(sim_world, shim_current);
}

void gs_drainer_cv_broadcast(void)
{
    shim_wake_drainers(sim_world, shim_current);
}

/* ---- gs_drain.c, gs_log.c -------------------------------------------------------- */

/* The log's threshold (gs_log.c's, set from the environment there): never
 * changed here, so that debug lines stay out of the traces. */
int gs_log_threshold = GS_LOG_WARN;

/* Its drainer runs from the GPU's first use (shim_start). */
void gs_drain_start_locked(struct gs_dev *d)
{
    (void)d;
}

void gs_log(enum gs_log_level level, const char *fmt, ...)
{
    (void)level;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    trace(sim_world, "proc %d: shim: %s", shim_current->id, line);
}
