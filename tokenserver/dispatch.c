/*
 * The scheduler's driver in the server: each event goes through one
 * sched_step (sched.h) at one reading of the clock, and its actions are
 * carried out in order here. This is the only place the scheduler's
 * decisions reach a socket, a timer or the log.
 *
 * Carrying out an action never calls the scheduler back: a send that fails
 * marks its client for closing (clients.c), and the close comes back as
 * a CLIENT_GONE event at the client's next event.
 */
#include "server.h"
#include "gpuslice/transport.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The scheduler's wake-up (SET_WAKE); owned by the loop's thread. */
static struct timer wake_timer;

static void wake_fired(void *arg)
{
    (void)arg;
    struct sched_event ev = {.type = SCHED_WAKE};
    sched_run(&ev);
}

static void set_wake(uint64_t at)
{
    if (!wake_timer.fn)
        timer_init(&wake_timer, wake_fired, NULL);
    timer_at(&wake_timer, at);
}

static struct client *client_of(const struct sched_slot *slot)
{
    return slot->owner;
}

static void send_slot(const struct sched_slot *slot, struct gs_msg *msg)
{
    client_send(client_of(slot), msg);
}

static void carry_out(const struct sched_action *a)
{
    struct gs_msg msg;
    memset(&msg, 0, sizeof msg);
    switch (a->type) {
    case SCHED_GRANT:
        msg.type = GS_MSG_GRANT;
        msg.u.grant.slot = a->slot->number;
        msg.u.grant.grant = a->grant;
        msg.u.grant.deadline_ns = gs_transport_clock_to_wire(a->at, options.clock_offset_ns);
        msg.u.grant.flags = a->flags;
        msg.u.grant.ahead_ns = a->ahead_ns;
        if (a->notice)
            client_notify(client_of(a->slot), &msg);
        else
            send_slot(a->slot, &msg);
        break;
    case SCHED_REVOKE:
        msg.type = GS_MSG_REVOKE;
        msg.u.grant.slot = a->slot->number;
        msg.u.grant.grant = a->grant;
        send_slot(a->slot, &msg);
        break;
    case SCHED_SET_TIMER:
        device_set_timer(a->device, a->at);
        break;
    case SCHED_LEASED:
        msg.type = GS_MSG_MEM_LEASED;
        msg.u.leased.id = a->id;
        msg.u.leased.status = a->status;
        msg.u.leased.granted = a->granted;
        msg.u.leased.cap = a->cap;
        msg.u.leased.used = a->used;
        if (a->status == GS_LEASE_REFUSED)
            client_memory_refused(client_of(a->slot), a->slot, a->need, a->cap, a->used);
        send_slot(a->slot, &msg);
        break;
    case SCHED_MEM_RESULT:
        msg.type = GS_MSG_MEM_RESULT;
        msg.u.mem_result.id = a->id;
        msg.u.mem_result.cap = a->cap;
        msg.u.mem_result.used = a->used;
        send_slot(a->slot, &msg);
        break;
    case SCHED_RECALL:
        msg.type = GS_MSG_MEM_RECALL;
        msg.u.recall.slot = a->slot->number;
        send_slot(a->slot, &msg);
        break;
    case SCHED_DROP:
        client_drop(client_of(a->slot), a->reason);
        break;
    case SCHED_LATE: {
        const struct client *c = client_of(a->slot);
        slog_limited(c->tenant, LOG_WARN, "tenant %s pid %u: did not release within %llu ms of its deadline; "
                     "slice revoked", c->tenant->name, c->pid, (unsigned long long)(options.grace_ns / 1000000));
        break;
    }
    case SCHED_SET_WAKE:
        set_wake(a->at);
        break;
    case SCHED_OVER_CAP: {
        const struct client *c = client_of(a->slot);
        slog_limited(c->tenant, LOG_WARN, "tenant %s: %llu bytes in use after pid %u reconnected, over its cap of %llu",
                     c->tenant->name, (unsigned long long)a->used, c->pid, (unsigned long long)a->cap);
        break;
    }
    }
}

void sched_run(const struct sched_event *ev)
{
    static uint64_t lost_logged; /* the loop's thread only */
    sched_step(&server_sched, ev, now_ns());
    for (size_t i = 0; i < server_sched.nactions; i++)
        carry_out(&server_sched.actions[i]);
    server_sched.nactions = 0;
    if (server_sched.actions_lost != lost_logged) {
        lost_logged = server_sched.actions_lost;
        slog(LOG_ERR, "the scheduler lost %llu actions for want of room (a bug)", (unsigned long long)lost_logged);
    }
}

void sched_timer_fired(struct device *d)
{
    struct sched_event ev = {.type = SCHED_TIMER, .device = d};
    sched_run(&ev);
}
