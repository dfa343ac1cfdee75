/*
 * The wire and the slice machine (gs_slice_wire.c): one translation each
 * way, shared by the shim and the simulation.
 */
#ifndef GS_SLICE_WIRE_H
#define GS_SLICE_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/protocol.h"
#include "gs_slice.h"

/* The slice event a message from the server makes (GRANT, REVOKE; sent_ns:
 * when the server sent it, on this process's clock; clock_offset_ns: this
 * process's clock less the protocol's, gpuslice/transport.h): false for
 * any other message, the caller's to handle. */
bool gs_slice_wire_event(const struct gs_msg *m, uint64_t sent_ns, int64_t clock_offset_ns, struct gs_slice_event *ev);
/* The message an action sends about the GPU of slot `slot` (SEND_ACQUIRE,
 * SEND_RELEASE): false for an action that sends none. */
bool gs_slice_wire_message(const struct gs_slice_action *a, uint32_t slot, struct gs_msg *m);

#endif
