/*
 * The simulated stand-ins for what the shim's dispatch and the gate
 * thread's handling of messages (shim/gs_dispatch.c,
 * shim/gs_gate_messages.c), compiled into the simulation unchanged, call
 * in the rest of the shim: the connection (gs_conn.c: connecting and
 * losing it, sending, the answers awaited, the gate thread and the
 * launcher reading the socket woken), the gate lock's condition variables
 * (gs_locks.c: the launchers waiting for admission and the drainers
 * woken), the lease ledger (gs_lease.c: what a process counts, headroom
 * recalled), the drainers' start (gs_drain.c) and the log (gs_log.c).
 * Each acts on the simulated process whose shim runs (shim_current,
 * sim_shim.c) in the simulated world (sim_world), mostly through
 * sim_shim.c. No socket, eventfd, thread or clock: these are what the
 * simulation cannot run. No state of its own.
 */
#include "sim.h"

#include "gs_conn.h"
#include "gs_drain.h"
#include "gs_lease.h"
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

/* The simulated process waits for its leases' answers itself (a model of
 * gs_lease.c's requests, sim_shim.c): no entry of gs_conn.c's waits. */
struct gs_answer *gs_conn_answer_arrived_locked(uint64_t id, const struct gs_msg *m)
{
    (void)id;
    shim_answered(sim_world, shim_current, m);
    return NULL;
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

void gs_gate_cv_broadcast(void)
{
    shim_wake_launchers(sim_world, shim_current);
}

void gs_drainer_cv_broadcast(void)
{
    shim_wake_drainers(sim_world, shim_current);
}

/* ---- gs_lease.c ---------------------------------------------------------------- */

uint64_t gs_lease_count(const struct gs_dev *d)
{
    return shim_counted(shim_current, d);
}

uint64_t gs_lease_recall(const struct gs_dev *d, uint64_t now)
{
    return shim_recalled(shim_current, d, now);
}

/* Only for an answer gs_conn.c's entry waits for: none here. */
void gs_lease_granted(struct gs_dev *d, uint64_t granted)
{
    (void)d;
    (void)granted;
}

/* ---- gs_drain.c, gs_log.c -------------------------------------------------------- */

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
