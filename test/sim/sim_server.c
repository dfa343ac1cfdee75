/*
 * The server's side of the simulation: what clients.c does with a
 * connection (a message in, turned into an event by the shared
 * translation; a close; a drop), onto the server's own devices.c (a
 * DEVICE, a close, the ghosts' check) and dispatch.c (each step and its
 * actions), which run unchanged; below them sim_driver.c puts the sends
 * onto simulated connections and the timers into the event queue.
 * Messages take a random transport delay, in order per connection and
 * direction; on a scripted case's node (world.exact) none: they arrive
 * as they are sent, in the order sent.
 */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLIENT_BUFFER_MSGS 200   /* messages queued to a client that does not read */

static uint64_t transport_delay(struct world *w)
{
    if (w->exact)
        return 0;
    /* mostly tens of microseconds, now and then a wake-up's milliseconds */
    return rng_chance(&w->rng, 0.02) ? rng_range(&w->rng, 200 * US, 3 * MS) : rng_range(&w->rng, 5 * US, 60 * US);
}

void send_to_server(struct world *w, int conn, const struct gs_msg *m)
{
    struct sim_conn *c = &w->conn[conn];
    uint64_t at = w->now + transport_delay(w);
    if (at <= c->last_to_server && !w->exact)
        at = c->last_to_server + 1;
    c->last_to_server = at;
    w->fig.messages++;
    post_msg(w, at, EV_TO_SERVER, conn, m, w->now);
}

void send_to_proc(struct world *w, int conn, const struct gs_msg *m)
{
    struct sim_conn *c = &w->conn[conn];
    if (!c->open || c->closing)
        return;
    if (c->queued_to >= CLIENT_BUFFER_MSGS) { /* client_send: it does not read */
        drop_conn(w, conn, "does not read its messages");
        return;
    }
    uint64_t at = w->now + transport_delay(w);
    if (at <= c->last_to_proc && !w->exact)
        at = c->last_to_proc + 1;
    c->last_to_proc = at;
    c->queued_to++;
    w->fig.messages++;
    post_msg(w, at, EV_TO_PROC, conn, m, w->now);
}

/* ---- the scheduler's steps ------------------------------------------------------- */

int gpu_of_device(const struct world *w, const struct device *d)
{
    for (int g = 0; g < w->ngpus; g++)
        if (d && w->server.gpus[g] == d)
            return g;
    return -1;
}

/* Runs one step through the server's driver (dispatch.c's sched_run: the
 * step and its actions carried out, onto sim_driver.c), with the
 * simulation's figures and traces around it. */
static void run(struct world *w, const struct sched_event *ev)
{
    w->fig.steps++;
    const struct sched_tenant *forming = server_sched.forming_gang;
    sched_run(ev);
    const struct sched *s = &server_sched;
    if (s->forming_gang != forming)
        trace(w, "server: %s%s%s", s->forming_gang ? "gang " : "", s->forming_gang ? s->forming_gang->name : "",
              s->forming_gang ? " gathers its GPUs" : "no gang gathers now");
    if ((w->flags & SIM_TRACE) && s->forming_gang && (w->fig.steps % 64) == 0)
        for (const struct device *d = s->devices; d; d = d->next)
            for (size_t i = 0; i < d->ntenants; i++)
                trace(w, "  GPU %d %s vtime %.6f waiting %u state %d", d->uuid[0] - 1, d->tenants[i].tenant->name,
                      d->tenants[i].vtime / 1e9, d->tenants[i].waiting, d->state);
    if (s->forming_gang && s->forming_gang != forming)
        trace(w, "server: until +%.3f ms", ((double)s->forming_until - (double)w->now) / 1e6);
}

/* ---- the server's life -------------------------------------------------------------- */

void server_start(struct world *w)
{
    struct sim_server *sv = &w->server;
    if (sv->up)
        return;
    memset(&server_sched, 0, sizeof server_sched);
    sched_init(&server_sched, options.grace_ns);
    if (!sched_actions_reserve(&server_sched, 0)) {
        fail(w, "out of memory");
        return;
    }
    for (int t = 0; t < w->ntenants; t++) {
        struct tenant *st = &sv->tenants[t];
        memset(st, 0, sizeof *st);
        snprintf(st->name, sizeof st->name, "%s", w->tenant[t].name);
        st->sched.name = st->name;
        st->sched.config = w->tenant[t].config;
        st->sched.index = (unsigned)t;
    }
    memset(sv->gpus, 0, sizeof sv->gpus);
    memset(sv->last_notice, 0, sizeof sv->last_notice);
    /* processes of the last server declare what they hold first (its
     * .clients mark: they were connected when it died) */
    if (sv->starts++ > 0)
        server_sched.recovering_until = w->now + 1500 * MS;
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
    /* The process dies: its GPUs and timers go with it (devices.c frees
     * them as a shutdown does), and no timer of it fires any more. */
    devices_free_all();
    memset(sv->gpus, 0, sizeof sv->gpus);
    for (int i = 0; i < sv->ntimers; i++) {
        sv->timer_gen[i]++;
        sv->timers[i] = NULL;
    }
    sv->up = false;
    free(server_sched.actions);
    server_sched.actions = NULL;
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
    struct client *cl = &conn->client;
    cl->fd = -1;
    cl->tenant = &w->server.tenants[conn->tenant];
    cl->pid = (uint32_t)(SIM_PID_BASE + proc);
    cl->greeted = true;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        cl->slots[i] = (struct sched_slot){.owner = cl, .number = (uint32_t)i, .tenant = &cl->tenant->sched,
                                           .pid = cl->pid};
    return c;
}

/* The server closes its end (a drop), or sees the process's close:
 * clients.c's client_close, onto devices.c. */
static void close_conn(struct world *w, int conn)
{
    struct sim_conn *c = &w->conn[conn];
    if (!c->open)
        return;
    bool lives_on = w->proc[c->proc].alive; /* the server's kill(pid, 0) */
    w->proc[c->proc].ghosted |= lives_on;
    devices_client_gone(&c->client, lives_on);
    c->open = false;
    c->closing = false;
}

void drop_conn(struct world *w, int conn, const char *reason)
{
    struct sim_conn *c = &w->conn[conn];
    if (!c->open || c->closing)
        return;
    trace(w, "server: drops conn %d (proc %d): %s", conn, c->proc, reason);
    struct gs_msg m = {.type = GS_MSG_ERROR};
    strncpy(m.u.error.reason, reason, sizeof m.u.error.reason - 1);
    uint64_t at = w->now + transport_delay(w);
    if (at <= c->last_to_proc && !w->exact)
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
    if (at <= c->last_to_server && !w->exact)
        at = c->last_to_server + 1;
    c->last_to_server = at;
    post(w, at, EV_CLOSED, conn, 0);
}

/* The server's check of its ghosts' processes (every second; devices.c)
 * finds the process gone. */
void server_process_gone(struct world *w, int proc)
{
    if (!w->server.up)
        return;
    w->proc[proc].ghosted = false;
    devices_check_ghosts();
}

/* DEVICE: as clients.c hands it to devices.c (device_declare: the
 * access check, the limits, the GPU made ready, the step). */
static void declare(struct world *w, int conn, const struct gs_msg *m)
{
    struct sim_server *sv = &w->server;
    struct sim_conn *c = &w->conn[conn];
    const struct sched_slot *slot = &c->client.slots[m->u.device.slot];
    if (slot->device && (slot->wants || slot->holds) && memcmp(slot->device->uuid, m->u.device.uuid, 16) != 0) {
        drop_conn(w, conn, "re-declared a device slot it is using");
        return;
    }
    const char *why = NULL;
    struct device *d = device_declare(&c->client, (int)m->u.device.slot, m->u.device.uuid, -1, &why);
    if (!d) {
        drop_conn(w, conn, why);
        return;
    }
    sv->gpus[m->u.device.uuid[0] - 1] = d;
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
        if (!sched_wire_event(m, c->client.slots, sent, &ev)) {
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
    sv->tenants[t].sched.config = w->tenant[t].config;
    struct sched_event ev = {.type = SCHED_TENANT_CHANGED, .tenant = &sv->tenants[t].sched};
    run(w, &ev);
}
