/*
 * The scheduler's driver in the server: each event goes through one
 * sched_step (sched.h) at one reading of the clock, and its actions are
 * carried out in order here. This is the only place the scheduler's
 * decisions reach a socket, a timer or the log.
 *
 * It owns what the steps act on: the scheduler's state, each GPU's timer
 * (a GPU is made and freed here, for devices.c) and the scheduler's
 * wake-up. Carrying out an action never calls the scheduler back: a send
 * that fails marks its client for closing (client_out.c), and the close
 * comes back as a CLIENT_GONE event at the client's next event.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

/* A GPU as the server knows it: the scheduler's part first, so that the
 * scheduler's struct device * is this struct's address. */
struct gpu {
    struct device d;
    struct timer timer;
};

/* The scheduler's state, its wake-up (SET_WAKE) and the next GPU's id;
 * owned by the loop's thread. */
struct sched server_sched;
static struct timer wake_timer;
static uint64_t next_device_id = 1;

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

static void carry_out(const struct sched_action *a)
{
    struct gs_msg msg;
    if (sched_wire_message(a, options.clock_offset_ns, &msg)) {
        if (a->type == SCHED_LEASED && a->status == GS_LEASE_REFUSED)
            client_memory_refused(client_of(a->slot), a->slot, a->need, a->cap, a->used);
        if (a->notice)
            client_notify(client_of(a->slot), &msg);
        else
            client_send(client_of(a->slot), &msg);
        return;
    }
    switch (a->type) {
    case SCHED_SET_TIMER:
        timer_at(&((struct gpu *)a->device)->timer, a->at);
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
    default: /* the rest are messages (sched_wire_message) */
        break;
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

static void gpu_timer(void *arg)
{
    struct sched_event ev = {.type = SCHED_TIMER, .device = &((struct gpu *)arg)->d};
    sched_run(&ev);
}

struct device *dispatch_device_new(const uint8_t uuid[16])
{
    struct gpu *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    timer_init(&g->timer, gpu_timer, g);
    memcpy(g->d.uuid, uuid, 16);
    g->d.id = next_device_id++;
    sched_device_add(&server_sched, &g->d, now_ns());
    return &g->d;
}

void dispatch_device_free(struct device *d)
{
    struct gpu *g = (struct gpu *)d;
    sched_device_remove(&server_sched, d);
    timer_close(&g->timer);
    free(g);
}
