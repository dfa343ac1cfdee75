/*
 * The server's side of the simulation: what clients.c does with a
 * connection (a message in, turned into an event by the shared
 * translation; a close; a drop), what tenants.c does when a tenant's
 * file changes, goes or comes back, and the periodic sweep of unused GPUs,
 * onto the server's own devices.c (a DEVICE, a close, the ghosts' check,
 * the sweep) and dispatch.c (each step and its actions), which run
 * unchanged; below them sim_driver.c puts the sends onto simulated
 * connections and the timers into the event queue.
 * Messages take a random transport delay, in order per connection and
 * direction; on an exact node (world.exact: a scripted case's, the fuzz
 * target's) none: they arrive as they are sent, in the order sent.
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
/* What the traces show of a gang's gathering after a step (forming: the
 * gang that gathered before it). */
static void traced_gang(struct world *w, const struct sched_tenant *forming)
{
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

static void run(struct world *w, const struct sched_event *ev)
{
    w->fig.steps++;
    const struct sched_tenant *forming = server_sched.forming_gang;
    sched_run(ev);
    traced_gang(w, forming);
}

/* A step outside any event (a tenant's file read, a sweep) is checked as
 * an event's are (sim_world.c, handle_next). */
static void checked_outside_event(struct world *w)
{
    if (w->check_sched && !w->failed)
        check_sched_state(w);
}

/* ---- the server's life -------------------------------------------------------------- */

/* The server's tenant t, as its configuration says (tenants.c's
 * apply_file makes a new one). */
static void tenant_made(struct world *w, int t)
{
    struct tenant *st = &w->server.tenants[t];
    _Static_assert(sizeof st->name >= sizeof w->tenant[t].name, "a tenant's name fits the server's");
    memset(st, 0, sizeof *st);
    memcpy(st->name, w->tenant[t].name, sizeof w->tenant[t].name); /* (NUL-terminated: snprintf wrote it) */
    st->sched.name = st->name;
    st->sched.config = w->tenant[t].config;
    st->sched.index = (unsigned)t;
}

/* The simulated GPUs devices.c knows now: it frees one nobody uses at a
 * sweep, or to make room for another one declared. */
static void gpus_known(struct world *w)
{
    struct sim_server *sv = &w->server;
    struct device *known[SIM_MAX_GPUS] = {NULL};
    for (struct device *d = server_sched.devices; d; d = d->next)
        if (d->uuid[0] >= 1 && d->uuid[0] <= w->ngpus) /* (the access check lets no other in) */
            known[d->uuid[0] - 1] = d;
    for (int g = 0; g < w->ngpus; g++) {
        if (!known[g])
            sv->last_notice[g] = 0; /* a GPU made again notices afresh */
        sv->gpus[g] = known[g];
    }
}

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
    for (int t = 0; t < w->ntenants; t++)
        tenant_made(w, t);
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

/* Whether a connection's place may take another: on an exact node, one
 * closed at the server with nothing on its way to its process and that no
 * process names any more (on an exact node nothing of a closed connection
 * waits in the queue once its instant is handled). */
static bool place_free(const struct world *w, int c)
{
    const struct sim_conn *conn = &w->conn[c];
    if (!w->exact || conn->open || conn->closing || conn->queued_to > 0)
        return false;
    for (int i = 0; i < w->nprocs; i++)
        if (w->proc[i].conn == c)
            return false;
    return true;
}

/* Where a process's new connection goes: on an exact node, the place of
 * one of its own closed ones if one is free (so that a process that
 * connects again and again keeps to one), else the next unused place, or,
 * once every place has been used, any free one; -1 if none. */
static int conn_place(struct world *w, int proc)
{
    for (int c = 0; w->exact && c < w->nconns; c++)
        if (w->conn[c].proc == proc && place_free(w, c))
            return c;
    if (w->nconns < SIM_MAX_CONNS)
        return w->nconns++;
    for (int c = 0; c < w->nconns; c++)
        if (place_free(w, c))
            return c;
    return -1;
}

int server_connect(struct world *w, int proc)
{
    if (!w->server.up || w->server.tenant_gone[w->proc[proc].tenant])
        return -1;
    int c = conn_place(w, proc);
    if (c < 0)
        return -1;
    struct sim_conn *conn = &w->conn[c];
    memset(conn, 0, sizeof *conn);
    conn->open = true;
    conn->proc = proc;
    conn->tenant = w->proc[proc].tenant;
    struct client *cl = &conn->client;
    cl->fd = -1;
    cl->tenant = &w->server.tenants[conn->tenant];
    cl->pid = (uint32_t)(SIM_PID_BASE + proc);
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        cl->slots[i] = (struct sched_slot){.owner = cl, .number = (uint32_t)i, .tenant = &cl->tenant->sched,
                                           .pid = cl->pid};
    w->proc[proc].end_noted = false;
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
    if (w->proc[c->proc].conn == conn)
        shim_connection_ends(&w->proc[c->proc]);
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
    if (w->proc[c->proc].conn == conn)
        shim_connection_ends(&w->proc[c->proc]);
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
void server_receive(struct world *w, int conn, const struct gs_msg *m, uint64_t sent)
{
    struct sim_conn *c = &w->conn[conn];
    if (!w->server.up || !c->open || c->closing)
        return;
    if (m->type == GS_MSG_MEM_DECLARE) /* counted again, whatever the server makes of it */
        w->proc[c->proc].ghosted = w->proc[c->proc].lease_lost = false;
    /* clients.c's part, from what its read and decoded on (the same
     * function; no descriptor comes with a simulated DEVICE) */
    w->fig.steps++;
    const struct sched_tenant *forming = server_sched.forming_gang;
    client_message(&c->client, m, sent, -1);
    if (m->type == GS_MSG_DEVICE)
        gpus_known(w);
    traced_gang(w, forming);
}

/* A tenant's configuration changed (F_CONFIG). */
void server_tenant_changed(struct world *w, int t)
{
    struct sim_server *sv = &w->server;
    if (!sv->up || sv->tenant_gone[t])
        return;
    sv->tenants[t].sched.config = w->tenant[t].config;
    struct sched_event ev = {.type = SCHED_TENANT_CHANGED, .tenant = &sv->tenants[t].sched};
    run(w, &ev);
    checked_outside_event(w);
}

void server_tenant_removed(struct world *w, int t)
{
    struct sim_server *sv = &w->server;
    if (sv->tenant_gone[t])
        return;
    sv->tenant_gone[t] = true;
    if (!sv->up)
        return;
    trace(w, "server: tenant %s removed", w->tenant[t].name);
    for (int c = 0; c < w->nconns; c++)
        if (w->conn[c].open && w->conn[c].tenant == t) {
            struct gs_msg m = {.type = GS_MSG_ERROR};
            snprintf(m.u.error.reason, sizeof m.u.error.reason, "tenant %s was removed from the configuration",
                     w->tenant[t].name);
            send_to_proc(w, c, &m);
            close_conn(w, c);
        }
    struct sched_event ev = {.type = SCHED_TENANT_GONE, .tenant = &sv->tenants[t].sched};
    run(w, &ev);
    checked_outside_event(w);
}

void server_tenant_added(struct world *w, int t)
{
    struct sim_server *sv = &w->server;
    if (!sv->tenant_gone[t])
        return;
    sv->tenant_gone[t] = false;
    if (sv->up) { /* (a server that starts makes every tenant) */
        trace(w, "server: tenant %s added", w->tenant[t].name);
        tenant_made(w, t);
    }
}

void server_sweep(struct world *w)
{
    if (!w->server.up)
        return;
    devices_sweep();
    gpus_known(w);
    checked_outside_event(w);
}
