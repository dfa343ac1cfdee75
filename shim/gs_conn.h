/*
 * The shim's connection to gpuslice-server (gs_conn.c): the socket and what
 * is known of it, sending on it, the answers that came back for requests,
 * and the eventfds that wake the threads reading it. No thread of its own:
 * the gate thread (gs_gate_thread.c) makes the connection and reads it, and
 * the remote calls (gs_rpc.c) wait for their answers here.
 *
 * Everything is guarded by the gate lock (gs_locks.h), which every
 * function ending in _locked expects held; the wake-ups take no lock.
 */
#ifndef GPUSLICE_CONN_H
#define GPUSLICE_CONN_H

#include "gs_dev.h"

#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/protocol.h"

/* ---- what is known of the connection ------------------------------------------ */

/* The server-down policy (read once, then again after each failed
 * connection): true for open (run ungated while no server answers). */
bool gs_conn_policy_open_locked(void);
bool gs_conn_connected_locked(void);
/* Not welcomed yet, but the server may be up: the gate thread runs and has
 * not tried to connect yet, or a connection is made and its WELCOME has not
 * come. */
bool gs_conn_connecting_locked(void);
/* The gate thread runs (set by it, once it started). */
bool gs_conn_reader_started_locked(void);
void gs_conn_set_reader_started_locked(void);
/* Whether a connection was tried and refused: no server answers now. */
bool gs_conn_server_down_locked(void);

/* ---- making and losing it (the gate thread) ---------------------------------------- */

/* Connects and sends HELLO: true if a connection is made (its WELCOME is
 * to come); false when the server is unreachable (gs_conn_lost_locked was
 * called with the reason). */
bool gs_conn_connect_locked(void);
/* WELCOME came: connected as `tenant`. */
void gs_conn_welcomed_locked(const char *tenant);
/* The connection broke (or could not be made): the socket is closed,
 * requests waiting for an answer are lost, the policy is read again and the
 * outage logged (rate-limited). */
void gs_conn_lost_locked(const char *why);
/* The socket (-1: none), for the thread reading it. */
int gs_conn_socket_locked(void);
/* This process's clock less the protocol's (its time namespace's offset,
 * gpuslice/transport.h), as of the connection. */
int64_t gs_conn_clock_offset_locked(void);

/* ---- sending -------------------------------------------------------------------- */

/* Sends m: 0, or -1 (no socket, or the send failed). */
int gs_conn_send_locked(const struct gs_msg *m);
/* Sends m, a message about d, if connected: declared (DEVICE) first. -1
 * when not connected. */
int gs_conn_send_about_locked(struct gs_dev *d, const struct gs_msg *m);
/* DEVICE for d, unless it was declared on this connection already. */
void gs_conn_declare_locked(struct gs_dev *d);

/* ---- answers to requests ------------------------------------------------------------- */

/* A request waiting for its answer (MEM_RESULT, MEM_LEASED or USAGE, by id). */
struct gs_answer {
    uint64_t id;             /* 0: a free entry */
    bool done;
    bool lost;               /* asked on a connection that went down */
    struct gs_dev *dev;      /* the GPU asked about (NULL: none) */
    struct gs_msg msg;
};
/* A free entry with a fresh id (NULL: all are taken). */
struct gs_answer *gs_conn_answer_take_locked(void);
/* Gives the entry back. */
void gs_conn_answer_give_locked(struct gs_answer *a);
/* An answer arrived (the gate thread): its entry is done, and the waiters
 * are woken (gs_gate_cv); the entry, or NULL for an answer nobody waits
 * for (dropped). */
struct gs_answer *gs_conn_answer_arrived_locked(uint64_t id, const struct gs_msg *m);

/* ---- wake-ups (no lock) ---------------------------------------------------------------- */

/* The eventfds: made when the gate thread starts (false: they cannot be). */
bool gs_conn_open_wake_fds(void);
void gs_conn_close_wake_fds(void);
int gs_conn_wake_fd(void);
int gs_conn_reader_fd(void);
/* Wakes the gate thread. */
void gs_conn_wake_gate_thread(void);
/* A launcher reads the socket meanwhile (gs_gate_thread.c); gate lock held. */
bool gs_conn_launcher_reads_locked(void);
void gs_conn_set_launcher_reads_locked(bool reads);
/* Wakes the launcher that reads the socket (if none does, the next one to
 * read returns once, early, and reads again). */
void gs_conn_wake_reader(void);

void gs_conn_after_fork_child(void);

#endif
