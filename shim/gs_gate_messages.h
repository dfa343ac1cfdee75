/*
 * What the gate thread does, less its loop (gs_gate_messages.c): a
 * message from the server handed to whom it concerns, a connection made
 * or lost told to every slice machine, a look at every GPU, and when the
 * next look is due. The thread, its poll and the socket's reading are
 * gs_gate_thread.c's; this part reads no clock (the caller passes `now`)
 * and makes no system call of its own, so the simulation (test/sim) runs
 * it unchanged. Every function expects the gate lock held.
 */
#ifndef GPUSLICE_GATE_MESSAGES_H
#define GPUSLICE_GATE_MESSAGES_H

#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/protocol.h"

/* A message from the server. sent_ns: when the server sent it
 * (gpuslice/transport.h), at most now. */
void gs_gate_handle_locked(const struct gs_msg *msg, uint64_t now, uint64_t sent_ns);
/* The connection broke or could not be made (why): every slice machine
 * hears it (admission closes, or opens wide under the open policy). */
void gs_gate_lost_locked(const char *why, uint64_t now);
/* Connects: true if a connection is made (launches wait for its WELCOME),
 * false if the server is unreachable. */
bool gs_gate_connect_locked(uint64_t now);
/* Every GPU: declared once connected, its drainer started if its start
 * failed before (a drain without a drainer ends at once), and its slice
 * machine told that time passed. */
void gs_gate_look_locked(uint64_t now);
/* The earliest moment a slice machine asked to be looked at (its
 * deadline, the last moment a launch still fits, the end of an idle
 * spell, a backstop): UINT64_MAX for none. */
uint64_t gs_gate_next_look_locked(void);

#endif
