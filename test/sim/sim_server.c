/*
 * The server's side of the simulation: the real scheduler state machine
 * (sched_step), fed with events as the server's clients.c and devices.c
 * feed it, its actions carried out as dispatch.c carries them out, but
 * onto simulated connections and timers. Messages take a random transport
 * delay, in order per connection and direction; timers fire a little late,
 * as a busy loop's do.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#define CLIENT_BUFFER_MSGS 200   /* messages queued to a client that does not read */
#define GRACE_NS (250 * MS)

static uint64_t transport_delay(struct world *w)
{
    /* mostly tens of microseconds, now and then a wake-up's milliseconds */
    return rng_chance(&w->rng, 0.02) ? rng_range(&w->rng, 200 * US, 3 * MS) : rng_range(&w->rng, 5 * US, 60 * US);
}

void send_to_server(struct world *w, int conn, const struct gs_msg *m)
{
    struct sim_conn *c = &w->conn[conn];
    uint64_t at = w->now + transport_delay(w);
    if (at <= c->last_to_server)
        at = c->last_to_server + 1;
    c->last_to_server = at;
    w->fig.messages++;
    post_msg(w, at, EV_TO_SERVER, conn, m, w->now);
}

static void drop_conn(struct world *w, int conn, const char *reason);

static void send_to_proc(struct world *w, int conn, const struct gs_msg *m)
{
    struct sim_conn *c = &w->conn[conn];
    if (!c->open || c->closing)
        return;
    if (c->queued_to >= CLIENT_BUFFER_MSGS) { /* client_send: it does not read */
        drop_conn(w, conn, "does not read its messages");
        return;
    }
    uint64_t at = w->now + transport_delay(w);
    if (at <= c->last_to_proc)
        at = c->last_to_proc + 1;
    c->last_to_proc = at;
    c->queued_to++;
    w->fig.messages++;
    post_msg(w, at, EV_TO_PROC, conn, m, w->now);
}

/* ---- the scheduler's steps ------------------------------------------------------- */

static int gpu_of_device(const struct world *w, const struct device *d)
{
    for (int g = 0; g < w->ngpus; g++)
        if (w->server.gpus[g] == d)
            return g;
    return -1;
}

static int conn_of_slot(const struct world *w, const struct sched_slot *slot)
{
    return (int)((const struct sim_conn *)slot->owner - w->conn);
}

/* Carries out one action as dispatch.c does: a message through the
 * shared translation (sched_wire_message), onto the simulated connection;
 * the rest onto the simulated timers and connections. */
static void carry_out(struct world *w, const struct sched_action *a)
{
    struct gs_msg m;
    if (a->type == SCHED_GRANT && a->notice) {
        /* one notice per GPU per BOUND_NOTICE_GAP_NS (its holders get it
         * at once, in one step) */
        int g = gpu_of_device(w, a->slot->device);
        uint64_t *last = &w->server.last_notice[g];
        if (*last && w->now != *last && w->now - *last < BOUND_NOTICE_GAP_NS)
            fail(w, "GPU %d: a GRANT for a new bound %.3f ms after the last one (at least %.1f ms apart)", g,
                 (double)(w->now - *last) / 1e6, (double)BOUND_NOTICE_GAP_NS / 1e6);
        *last = w->now;
    }
    if (a->type == SCHED_GRANT) {
        check_grant(w, a);
        w->fig.grants++;
        trace(w, "server: GRANT conn %d slot %u grant %llu deadline +%.3f ms flags %u%s", conn_of_slot(w, a->slot),
              a->slot->number, (unsigned long long)a->grant, (double)(a->at - w->now) / 1e6, a->flags,
              a->notice ? " (a new bound)" : "");
    } else if (a->type == SCHED_REVOKE) {
        trace(w, "server: REVOKE conn %d slot %u grant %llu", conn_of_slot(w, a->slot), a->slot->number,
              (unsigned long long)a->grant);
    }
    if (sched_wire_message(a, 0, &m)) {
        send_to_proc(w, conn_of_slot(w, a->slot), &m);
        return;
    }
    switch (a->type) {
    case SCHED_SET_TIMER: {
        int g = gpu_of_device(w, a->device);
        w->server.timer_gen[g]++;
        if (a->at) {
            /* the loop wakes up to a few hundred microseconds late */
            uint64_t late = rng_chance(&w->rng, 0.05) ? rng_range(&w->rng, 100 * US, 2 * MS) : rng_range(&w->rng, 0, 80 * US);
            post(w, a->at + late, EV_SERVER_TIMER, g, w->server.timer_gen[g]);
        }
        break;
    }
    case SCHED_DROP:
        drop_conn(w, conn_of_slot(w, a->slot), a->reason);
        break;
    case SCHED_LATE: {
        /* its work still on the GPU is its own: the slice is taken back */
        const struct sim_conn *c = &w->conn[conn_of_slot(w, a->slot)];
        trace(w, "server: proc %d did not release within the grace period", c->proc);
        gpu_excuse(w, c->proc);
        break;
    }
    case SCHED_SET_WAKE:
        post(w, a->at, EV_SERVER_WAKE, 0, ++w->server.wake_gen);
        break;
    default: /* messages (above), and OVER_CAP: a log line */
        break;
    }
}

/* Runs one step and carries out its actions, as dispatch.c does. */
static void run(struct world *w, const struct sched_event *ev)
{
    struct sim_server *sv = &w->server;
    w->fig.steps++;
    const struct sched_tenant *forming = sv->s.forming_gang;
    sched_step(&sv->s, ev, w->now);
    if (sv->s.forming_gang != forming)
        trace(w, "server: %s%s%s", sv->s.forming_gang ? "gang " : "", sv->s.forming_gang ? sv->s.forming_gang->name : "",
              sv->s.forming_gang ? " gathers its GPUs" : "no gang gathers now");
    if ((w->flags & SIM_TRACE) && sv->s.forming_gang && (w->fig.steps % 64) == 0)
        for (const struct device *d = sv->s.devices; d; d = d->next)
            for (size_t i = 0; i < d->ntenants; i++)
                trace(w, "  GPU %d %s vtime %.6f waiting %u state %d", d->uuid[0] - 1, d->tenants[i].tenant->name,
                      d->tenants[i].vtime / 1e9, d->tenants[i].waiting, d->state);
    if (sv->s.forming_gang && sv->s.forming_gang != forming)
        trace(w, "server: until +%.3f ms", ((double)sv->s.forming_until - (double)w->now) / 1e6);
    /* A drop only marks the connection (closed by a later event, as
     * clients.c does), so nothing here steps again. */
    for (size_t i = 0; i < sv->s.nactions && !w->failed; i++)
        carry_out(w, &sv->s.actions[i]);
    sv->s.nactions = 0;
    if (sv->s.actions_lost)
        fail(w, "the scheduler lost %llu actions for want of room", (unsigned long long)sv->s.actions_lost);
}

/* ---- the server's life -------------------------------------------------------------- */

void server_start(struct world *w)
{
    struct sim_server *sv = &w->server;
    if (sv->up)
        return;
    memset(&sv->s, 0, sizeof sv->s);
    sched_init(&sv->s, GRACE_NS);
    if (!sched_actions_reserve(&sv->s, 0)) {
        fail(w, "out of memory");
        return;
    }
    for (int t = 0; t < w->ntenants; t++) {
        struct sched_tenant *st = &sv->tenants[t];
        memset(st, 0, sizeof *st);
        st->name = w->tenant[t].name;
        st->config = w->tenant[t].config;
        st->index = (unsigned)t;
    }
    memset(sv->gpus, 0, sizeof sv->gpus);
    memset(sv->last_notice, 0, sizeof sv->last_notice);
    sv->declared = 0;
    /* processes of the last server declare what they hold first (its
     * .clients mark: they were connected when it died) */
    if (sv->starts++ > 0)
        sv->s.recovering_until = w->now + 1500 * MS;
    sv->up = true;
    sv->started_at = w->now;
    trace(w, "server: started");
}

void server_stop(struct world *w)
{
    struct sim_server *sv = &w->server;
    if (!sv->up)
        return;
    if (w->flags & SIM_TRACE)
        for (int g = 0; g < w->ngpus; g++)
            for (size_t i = 0; sv->gpus[g] && i < sv->gpus[g]->ntenants; i++) {
                const struct device_tenant *dt = &sv->gpus[g]->tenants[i];
                uint64_t sum = 0;
                for (int k = 0; k < w->nprocs; k++)
                    if (w->proc[k].tenant == (int)dt->tenant->index && w->proc[k].alive && w->proc[k].conn >= 0 &&
                        w->proc[k].dev[0].gpu == g)
                        sum += shim_count(&w->proc[k], 0);
                trace(w, "server: stops with tenant %s counting %llu on GPU %d (its processes %llu, %d messages on the way)",
                      dt->tenant->name, (unsigned long long)dt->mem_used, g, (unsigned long long)sum, w->mem_in_flight);
            }
    sv->up = false;
    for (int c = 0; c < w->nconns; c++)
        if (w->conn[c].open) {
            w->conn[c].open = false;
            struct sim_proc *p = &w->proc[w->conn[c].proc];
            if (p->alive && p->conn == c) {
                struct gs_msg m = {.type = GS_MSG_ERROR};
                strcpy(m.u.error.reason, "server gone");
                post_msg(w, w->now + transport_delay(w), EV_TO_PROC, c, &m, w->now);
                w->conn[c].queued_to++;
            }
        }
    for (int g = 0; g < w->ngpus; g++) {
        if (sv->gpus[g]) {
            sched_device_remove(&sv->s, sv->gpus[g]);
            free(sv->gpus[g]);
            sv->gpus[g] = NULL;
        }
        sv->timer_gen[g]++;
    }
    free(sv->s.actions);
    sv->s.actions = NULL;
    for (int i = 0; i < w->nprocs; i++)
        w->proc[i].ghosted = w->proc[i].lease_lost = false; /* the next server keeps nothing */
    trace(w, "server: stopped");
}

int server_connect(struct world *w, int proc)
{
    if (!w->server.up || w->nconns >= SIM_MAX_CONNS)
        return -1;
    int c = w->nconns++;
    struct sim_conn *conn = &w->conn[c];
    memset(conn, 0, sizeof *conn);
    conn->open = true;
    conn->proc = proc;
    conn->tenant = w->proc[proc].tenant;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        conn->slots[i] = (struct sched_slot){.owner = conn, .number = (uint32_t)i,
                                             .tenant = &w->server.tenants[conn->tenant],
                                             .pid = (uint32_t)(1000 + proc)};
    return c;
}

static void undeclare(struct world *w, struct sim_conn *c, int slot, bool lives_on)
{
    if (!c->slots[slot].device)
        return;
    struct sched_event ev = {.type = SCHED_UNDECLARE, .slot = &c->slots[slot], .lives_on = lives_on};
    run(w, &ev);
    w->server.declared--;
}

/* The server closes its end (a drop), or sees the process's close. */
static void close_conn(struct world *w, int conn)
{
    struct sim_conn *c = &w->conn[conn];
    if (!c->open)
        return;
    bool lives_on = w->proc[c->proc].alive; /* the server's kill(pid, 0) */
    w->proc[c->proc].ghosted |= lives_on;
    unsigned named = 0;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        named += c->slots[i].device != NULL;
    if (named) {
        struct sched_event ev = {.type = SCHED_CLIENT_GONE, .slot = c->slots, .nslots = GS_MAX_DEVICES,
                                 .lives_on = lives_on};
        run(w, &ev);
        w->server.declared -= named;
    }
    c->open = false;
    c->closing = false;
}

static void drop_conn(struct world *w, int conn, const char *reason)
{
    struct sim_conn *c = &w->conn[conn];
    if (!c->open || c->closing)
        return;
    trace(w, "server: drops conn %d (proc %d): %s", conn, c->proc, reason);
    struct gs_msg m = {.type = GS_MSG_ERROR};
    strncpy(m.u.error.reason, reason, sizeof m.u.error.reason - 1);
    uint64_t at = w->now + transport_delay(w);
    if (at <= c->last_to_proc)
        at = c->last_to_proc + 1;
    c->last_to_proc = at;
    post_msg(w, at, EV_TO_PROC, conn, &m, w->now);
    c->queued_to++;
    c->closing = true; /* closed at its next event, which the shutdown makes now */
    post(w, w->now, EV_CLOSED, conn, 0);
}

void server_closed(struct world *w, int conn)
{
    if (w->server.up)
        close_conn(w, conn);
}

void close_from_proc(struct world *w, int conn)
{
    if (conn < 0)
        return;
    struct sim_conn *c = &w->conn[conn];
    uint64_t at = w->now + transport_delay(w);
    if (at <= c->last_to_server)
        at = c->last_to_server + 1;
    c->last_to_server = at;
    post(w, at, EV_CLOSED, conn, 0);
}

void server_timer(struct world *w, int gpu, uint64_t gen)
{
    struct sim_server *sv = &w->server;
    if (!sv->up || gen != sv->timer_gen[gpu] || !sv->gpus[gpu])
        return;
    struct sched_event ev = {.type = SCHED_TIMER, .device = sv->gpus[gpu]};
    run(w, &ev);
}

/* The server's check of its ghosts' processes (every second) finds the
 * process gone. */
void server_process_gone(struct world *w, int proc)
{
    if (!w->server.up)
        return;
    w->proc[proc].ghosted = false;
    struct sched_event ev = {.type = SCHED_PROCESS_GONE, .pid = (uint32_t)(1000 + proc)};
    run(w, &ev);
}

void server_wake(struct world *w, uint64_t gen)
{
    if (!w->server.up || gen != w->server.wake_gen)
        return;
    struct sched_event ev = {.type = SCHED_WAKE};
    run(w, &ev);
}

/* DEVICE: as devices.c, with the driver's list being the simulated GPUs. */
static void declare(struct world *w, int conn, const struct gs_msg *m)
{
    struct sim_server *sv = &w->server;
    struct sim_conn *c = &w->conn[conn];
    struct sched_slot *slot = &c->slots[m->u.device.slot];
    int g = m->u.device.uuid[0] - 1;
    if (g < 0 || g >= w->ngpus || memcmp(m->u.device.uuid + 1, "simulated-gpu", 13) != 0) {
        drop_conn(w, conn, "declared a GPU this node's NVIDIA driver does not list");
        return;
    }
    if (slot->device && (slot->wants || slot->holds) && slot->device != sv->gpus[g]) {
        drop_conn(w, conn, "re-declared a device slot it is using");
        return;
    }
    if (slot->device && slot->device == sv->gpus[g])
        return;
    undeclare(w, c, (int)m->u.device.slot, false);
    if (!sv->gpus[g]) {
        struct device *d = calloc(1, sizeof *d);
        if (!d) {
            fail(w, "out of memory");
            return;
        }
        d->uuid[0] = (uint8_t)(g + 1);
        memcpy(d->uuid + 1, "simulated-gpu", 13);
        d->id = (uint64_t)g + 1;
        sched_device_add(&sv->s, d, w->now);
        sv->gpus[g] = d;
    }
    struct device *d = sv->gpus[g];
    if (!sched_entry_get(d, slot->tenant) || !sched_slots_reserve(d) || !sched_actions_reserve(&sv->s, sv->declared + 1)) {
        fail(w, "out of memory");
        return;
    }
    struct sched_event ev = {.type = SCHED_DECLARE, .slot = slot, .device = d};
    run(w, &ev);
    sv->declared++;
}

void server_receive(struct world *w, int conn, const struct gs_msg *m, uint64_t sent)
{
    struct sim_conn *c = &w->conn[conn];
    if (!w->server.up || !c->open || c->closing)
        return;
    struct sched_event ev = {.slot = NULL};
    switch (m->type) {
    case GS_MSG_HELLO: {
        struct gs_msg welcome = {.type = GS_MSG_WELCOME};
        strncpy(welcome.u.welcome.tenant, w->tenant[c->tenant].name, sizeof welcome.u.welcome.tenant - 1);
        send_to_proc(w, conn, &welcome);
        return;
    }
    case GS_MSG_DEVICE:
        declare(w, conn, m);
        return;
    default:
        if (m->type == GS_MSG_MEM_DECLARE)
            w->proc[c->proc].ghosted = w->proc[c->proc].lease_lost = false;
        if (!sched_wire_event(m, c->slots, sent, &ev)) {
            drop_conn(w, conn, "unexpected message");
            return;
        }
    }
    if (!ev.slot->device) {
        drop_conn(w, conn, "a message for an undeclared device");
        return;
    }
    run(w, &ev);
}

/* A tenant's configuration changed (F_CONFIG). */
void server_tenant_changed(struct world *w, int t)
{
    struct sim_server *sv = &w->server;
    if (!sv->up)
        return;
    sv->tenants[t].config = w->tenant[t].config;
    struct sched_event ev = {.type = SCHED_TENANT_CHANGED, .tenant = &sv->tenants[t]};
    run(w, &ev);
}
