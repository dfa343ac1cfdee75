/*
 * The one translation between the wire protocol and the slice machine
 * (gs_slice.h), both ways: the server's GRANT and REVOKE become slice
 * events (gs_slice_wire_event), and the machine's SEND_ACQUIRE and
 * SEND_RELEASE become the messages sent (gs_slice_wire_message). The
 * shim's gate thread and dispatch, and the simulation's shim, all use it.
 * Pure: no lock, no syscall.
 */
#include "gs_slice_wire.h"
#include "gpuslice/transport.h"

#include <string.h>

bool gs_slice_wire_event(const struct gs_msg *m, uint64_t sent_ns, int64_t clock_offset_ns, struct gs_slice_event *ev)
{
    memset(ev, 0, sizeof *ev);
    switch (m->type) {
    case GS_MSG_GRANT:
        ev->type = GS_SLICE_GRANT;
        ev->grant = m->u.grant.grant;
        ev->flags = m->u.grant.flags;
        ev->sent_ns = sent_ns;
        ev->deadline_ns = gs_transport_clock_from_wire(m->u.grant.deadline_ns, clock_offset_ns);
        ev->ahead_ns = m->u.grant.ahead_ns;
        return true;
    case GS_MSG_REVOKE:
        ev->type = GS_SLICE_REVOKE;
        ev->grant = m->u.grant.grant;
        ev->flags = m->u.grant.flags;
        ev->sent_ns = sent_ns;
        return true;
    default:
        return false;
    }
}

bool gs_slice_wire_message(const struct gs_slice_action *a, uint32_t slot, struct gs_msg *m)
{
    memset(m, 0, sizeof *m);
    switch (a->type) {
    case GS_SLICE_SEND_ACQUIRE:
        m->type = GS_MSG_ACQUIRE;
        m->u.acquire.slot = slot;
        return true;
    case GS_SLICE_SEND_RELEASE:
        m->type = GS_MSG_RELEASE;
        m->u.release.slot = slot;
        m->u.release.grant = a->grant;
        m->u.release.idle_ns = a->idle_ns;
        m->u.release.flags = a->more ? GS_RELEASE_MORE : 0;
        return true;
    case GS_SLICE_START_ROUND:
    case GS_SLICE_WAKE_LAUNCHERS:
    case GS_SLICE_ARM_TIMER:
    case GS_SLICE_FORGET_STREAMS:
        return false;
    }
    return false;
}
