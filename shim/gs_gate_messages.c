/*
 * What the gate thread does with what it reads, and at each look (see
 * gs_gate_messages.h): a GPU's slice machine gets GRANT and REVOKE
 * (gs_dispatch.c), every machine WELCOME and a lost or new connection; the
 * lease ledger MEM_RECALL and the counts a WELCOME declares (gs_lease.c);
 * the requests waiting for an answer MEM_RESULT, MEM_LEASED and USAGE
 * (gs_conn.c). No state of its own: the table of GPUs is gs_dispatch.c's,
 * the connection gs_conn.c's. No thread, poll, socket or clock: the
 * simulation links this file unchanged and stands in for what it calls.
 */
#include "gs_gate_messages.h"
#include "gs_conn.h"
#include "gs_dispatch.h"
#include "gs_drain.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_slice_wire.h"

void gs_gate_handle_locked(const struct gs_msg *msg, uint64_t now, uint64_t sent_ns)
{
    switch (msg->type) {
    case GS_MSG_WELCOME: {
        gs_conn_welcomed_locked(msg->u.welcome.tenant);
        /* Declare every GPU and what this process holds on it (even
         * nothing), so that the count survives a server restart and the
         * server lets go of what it kept counted for this process while
         * it had no connection. */
        for (int i = 0; i < GS_MAX_DEVICES; i++) {
            struct gs_dev *d = &gs_devs[i];
            if (!d->used)
                continue;
            struct gs_msg m = {.type = GS_MSG_MEM_DECLARE};
            m.u.mem.slot = (uint32_t)d->slot;
            m.u.mem.bytes = gs_lease_count(d);
            gs_conn_send_about_locked(d, &m);
        }
        /* throttled from here on; ACQUIRE where launches wait */
        struct gs_slice_event ev = {.type = GS_SLICE_WELCOME};
        gs_dispatch_all_locked(&ev, now);
        gs_gate_cv_broadcast(); /* requests waiting for the server */
        break;
    }
    case GS_MSG_MEM_RESULT:
        gs_conn_answer_arrived_locked(msg->u.mem_result.id, msg);
        break;
    case GS_MSG_MEM_LEASED: {
        /* A grant is counted as it arrives, under the gate lock: a later
         * connection's declaration has it in it. Counted by its requester,
         * once awake, it could come after that declaration, and be missing
         * from the server's count. Only what a request waits for: the
         * answer to gs_lease_take_anyway's lease is counted already. */
        struct gs_answer *a = gs_conn_answer_arrived_locked(msg->u.leased.id, msg);
        if (a && a->dev && msg->u.leased.status == GS_LEASE_GRANTED)
            gs_lease_granted(a->dev, msg->u.leased.granted);
        break;
    }
    case GS_MSG_USAGE:
        gs_conn_answer_arrived_locked(msg->u.usage.id, msg);
        break;
    case GS_MSG_MEM_RECALL: {
        /* A sibling needs room: give back all headroom, and answer even
         * with nothing to give. */
        struct gs_dev *d = &gs_devs[msg->u.recall.slot];
        struct gs_msg m = {.type = GS_MSG_MEM_FREE};
        m.u.mem.slot = msg->u.recall.slot;
        m.u.mem.bytes = d->used ? gs_lease_recall(d, now) : 0;
        gs_conn_send_locked(&m);
        break;
    }
    case GS_MSG_GRANT:
    case GS_MSG_REVOKE: {
        struct gs_dev *d = &gs_devs[msg->u.grant.slot];
        if (!d->used)
            break;
        struct gs_slice_event ev;
        gs_slice_wire_event(msg, sent_ns, gs_conn_clock_offset_locked(), &ev);
        struct gs_slice_actions out;
        gs_dispatch_locked(d, &ev, now, &out);
        break;
    }
    case GS_MSG_ERROR:
        gs_log(GS_LOG_WARN, "gpuslice-server: %s", msg->u.error.reason);
        break;
    default:
        gs_log(GS_LOG_WARN, "unexpected %s message from gpuslice-server", gs_msg_type_str(msg->type));
        break;
    }
}

void gs_gate_lost_locked(const char *why, uint64_t now)
{
    gs_conn_lost_locked(why);
    struct gs_slice_event ev = {.type = GS_SLICE_DISCONNECTED, .policy_open = gs_conn_policy_open_locked()};
    gs_dispatch_all_locked(&ev, now);
}

bool gs_gate_connect_locked(uint64_t now)
{
    if (!gs_conn_connect_locked()) {
        /* (gs_conn_connect_locked has called gs_conn_lost_locked) */
        struct gs_slice_event ev = {.type = GS_SLICE_DISCONNECTED, .policy_open = gs_conn_policy_open_locked()};
        gs_dispatch_all_locked(&ev, now);
        return false;
    }
    struct gs_slice_event ev = {.type = GS_SLICE_CONNECTING}; /* launches wait for its WELCOME */
    gs_dispatch_all_locked(&ev, now);
    return true;
}

void gs_gate_look_locked(uint64_t now)
{
    struct gs_slice_event tick = {.type = GS_SLICE_TIMER};
    struct gs_slice_actions out;
    bool connected = gs_conn_connected_locked();
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        struct gs_dev *d = &gs_devs[i];
        if (!d->used)
            continue;
        if (connected)
            gs_conn_declare_locked(d);
        if (d->slice.state == GS_SLICE_HOLD)
            gs_drain_start_locked(d);
        gs_dispatch_locked(d, &tick, now, &out);
    }
}

uint64_t gs_gate_next_look_locked(void)
{
    uint64_t at = UINT64_MAX;
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        const struct gs_dev *d = &gs_devs[i];
        if (d->used && d->slice.timer_at && d->slice.timer_at < at)
            at = d->slice.timer_at;
    }
    return at;
}
