/*
 * The one translation between the wire protocol and the scheduler, both
 * ways: a client's message about one of its slots becomes a scheduler
 * event (sched_wire_event), and an action for a slot becomes the message
 * its client gets (sched_wire_message). The server (clients.c,
 * dispatch.c), the simulation, the scheduler's fuzzer and its cases all
 * use it, so what they test is what ships; an event or an action that
 * travels on the wire is added here and nowhere else.
 */
#include "sched.h"
#include "gpuslice/transport.h"

#include <string.h>

bool sched_wire_event(const struct gs_msg *m, struct sched_slot *slots, uint64_t sent_ns, struct sched_event *ev)
{
    memset(ev, 0, sizeof *ev);
    switch (m->type) {
    case GS_MSG_ACQUIRE:
        ev->type = SCHED_ACQUIRE;
        ev->slot = &slots[m->u.acquire.slot];
        return true;
    case GS_MSG_RELEASE:
        ev->type = SCHED_RELEASE;
        ev->slot = &slots[m->u.release.slot];
        ev->grant = m->u.release.grant;
        ev->more = m->u.release.flags & GS_RELEASE_MORE;
        ev->idle_ns = m->u.release.idle_ns;
        ev->sent_ns = sent_ns;
        return true;
    case GS_MSG_MEM_FREE:
    case GS_MSG_MEM_DECLARE:
        ev->type = m->type == GS_MSG_MEM_FREE ? SCHED_MEM_FREE : SCHED_MEM_DECLARE;
        ev->slot = &slots[m->u.mem.slot];
        ev->bytes = m->u.mem.bytes;
        return true;
    case GS_MSG_MEM_QUERY:
        ev->type = SCHED_MEM_QUERY;
        ev->slot = &slots[m->u.mem_query.slot];
        ev->id = m->u.mem_query.id;
        return true;
    case GS_MSG_MEM_LEASE:
        ev->type = SCHED_MEM_LEASE;
        ev->slot = &slots[m->u.lease.slot];
        ev->id = m->u.lease.id;
        ev->bytes = m->u.lease.need;
        ev->want = m->u.lease.want;
        return true;
    default:
        return false;
    }
}

bool sched_wire_message(const struct sched_action *a, int64_t clock_offset_ns, struct gs_msg *m)
{
    memset(m, 0, sizeof *m);
    switch (a->type) {
    case SCHED_GRANT:
        m->type = GS_MSG_GRANT;
        m->u.grant.slot = a->slot->number;
        m->u.grant.grant = a->grant;
        m->u.grant.deadline_ns = gs_transport_clock_to_wire(a->at, clock_offset_ns);
        m->u.grant.flags = a->flags;
        m->u.grant.ahead_ns = a->ahead_ns;
        return true;
    case SCHED_REVOKE:
        m->type = GS_MSG_REVOKE;
        m->u.grant.slot = a->slot->number;
        m->u.grant.grant = a->grant;
        return true;
    case SCHED_LEASED:
        m->type = GS_MSG_MEM_LEASED;
        m->u.leased.id = a->id;
        m->u.leased.status = a->status;
        m->u.leased.granted = a->granted;
        m->u.leased.cap = a->cap;
        m->u.leased.used = a->used;
        return true;
    case SCHED_MEM_RESULT:
        m->type = GS_MSG_MEM_RESULT;
        m->u.mem_result.id = a->id;
        m->u.mem_result.cap = a->cap;
        m->u.mem_result.used = a->used;
        return true;
    case SCHED_RECALL:
        m->type = GS_MSG_MEM_RECALL;
        m->u.recall.slot = a->slot->number;
        return true;
    case SCHED_SET_TIMER:
    case SCHED_DROP:
    case SCHED_LATE:
    case SCHED_OVER_CAP:
    case SCHED_SET_WAKE:
        return false;
    }
    return false;
}
