/*
 * What the server's glue (tokenserver/client_messages.c, dispatch.c and
 * devices.c, linked unchanged) calls below it, here on the simulated
 * world: the virtual clock; timers that wait in the event queue and fire a little late, as a
 * busy loop's do (on time on an exact node, a scripted case's or the
 * fuzz target's, unless a case's script says otherwise); a client's sends, onto its simulated connection and
 * checked as they go; the log (traced, and the one line the checks read);
 * the check of a GPU's access (the simulated GPUs are the ones the node's
 * driver lists); whether a process lives; USAGE answers and PID
 * namespaces (not simulated: nothing).
 *
 * The real ones (clock.c, timers.c, client_out.c, log.c, gpu_access.c,
 * process_lives.c, usage.c) stand on epoll, sockets and /proc, and do not
 * run here; each is a thin layer over those.
 */
#include "sim.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The world whose run is under way: set by world_run_for, one run at a
 * time per process (sim_main.c runs seeds one after another, or in
 * separate processes). */
struct world *sim_world;

uint64_t now_ns(void)
{
    return sim_world->now;
}

/* ---- timers.c ------------------------------------------------------------------------- */

/* t's place among the server's timers, taking a free one for a timer not
 * seen yet; -1 (the run failed) if none is free. */
static int timer_index(struct world *w, struct timer *t)
{
    struct sim_server *sv = &w->server;
    int free_at = -1;
    for (int i = 0; i < sv->ntimers; i++) {
        if (sv->timers[i] == t)
            return i;
        if (!sv->timers[i] && free_at < 0)
            free_at = i;
    }
    if (free_at < 0 && sv->ntimers < SIM_TIMERS)
        free_at = sv->ntimers++;
    if (free_at < 0) {
        fail(w, "the server has more than %d timers", SIM_TIMERS);
        return -1;
    }
    sv->timers[free_at] = t;
    return free_at;
}

void timer_init(struct timer *t, void (*fn)(void *), void *arg)
{
    memset(t, 0, sizeof *t);
    t->fn = fn;
    t->arg = arg;
}

void timer_at(struct timer *t, uint64_t when_ns)
{
    struct world *w = sim_world;
    int i = timer_index(w, t);
    if (i < 0)
        return;
    w->server.timer_gen[i]++;
    t->at = when_ns;
    if (when_ns) {
        /* the loop wakes up to a few hundred microseconds late, now and
         * then milliseconds (on time on an exact node) */
        uint64_t late = 0;
        if (!w->exact)
            late = rng_chance(&w->rng, 0.05) ? rng_range(&w->rng, 100 * US, 2 * MS) : rng_range(&w->rng, 0, 80 * US);
        post(w, when_ns + late, EV_SERVER_TIMER, i, w->server.timer_gen[i]);
    }
}

void timer_close(struct timer *t)
{
    struct world *w = sim_world;
    int i = timer_index(w, t);
    if (i < 0)
        return;
    w->server.timer_gen[i]++;
    w->server.timers[i] = NULL;
    t->at = 0;
}

uint64_t server_timer_late(struct world *w, int g, uint64_t late)
{
    struct sim_server *sv = &w->server;
    for (int i = 0; i < sv->ntimers && sv->gpus[g]; i++) {
        struct timer *t = sv->timers[i];
        /* a GPU's timer calls back with the GPU, whose first member is the
         * scheduler's device (dispatch.c) */
        if (t && t->at && t->arg == (void *)sv->gpus[g]) {
            post(w, t->at + late, EV_SERVER_TIMER, i, ++sv->timer_gen[i]);
            return t->at;
        }
    }
    return 0;
}

/* EV_SERVER_TIMER: timer number i fires, unless it was armed again,
 * disarmed or closed since (gen), or the server is down. */
void server_timer(struct world *w, int i, uint64_t gen)
{
    struct sim_server *sv = &w->server;
    if (!sv->up || gen != sv->timer_gen[i] || !sv->timers[i])
        return;
    struct timer *t = sv->timers[i];
    t->at = 0;
    t->fn(t->arg);
}

/* ---- client_out.c ------------------------------------------------------------------------ */

int sim_conn_of(const struct world *w, const struct client *c)
{
    const struct sim_conn *conn = (const struct sim_conn *)(const void *)((const char *)c - offsetof(struct sim_conn, client));
    return (int)(conn - w->conn);
}

static void trace_grant(struct world *w, int conn, const struct gs_msg *m, const char *what)
{
    if (m->type == GS_MSG_GRANT) {
        w->fig.grants++;
        trace(w, "server: GRANT conn %d slot %u grant %llu deadline +%.3f ms flags %u%s", conn, m->u.grant.slot,
              (unsigned long long)m->u.grant.grant, ((double)m->u.grant.deadline_ns - (double)w->now) / 1e6,
              m->u.grant.flags, what);
    } else if (m->type == GS_MSG_REVOKE) {
        trace(w, "server: REVOKE conn %d slot %u grant %llu", conn, m->u.grant.slot,
              (unsigned long long)m->u.grant.grant);
    }
}

int client_send(struct client *c, const struct gs_msg *msg)
{
    struct world *w = sim_world;
    int conn = sim_conn_of(w, c);
    check_sent(w, &w->conn[conn], msg);
    if (!w->conn[conn].open || w->conn[conn].closing)
        return -1;
    trace_grant(w, conn, msg, "");
    send_to_proc(w, conn, msg);
    return w->conn[conn].closing ? -1 : 0;
}

/* A GRANT for a new bound alone: at most one per GPU per
 * BOUND_NOTICE_GAP_NS (its holders get it at once, in one step). The real
 * one waits for room in the client's socket; a simulated connection
 * always has room until the client stops reading. */
void client_notify(struct client *c, const struct gs_msg *msg)
{
    struct world *w = sim_world;
    int conn = sim_conn_of(w, c);
    check_sent(w, &w->conn[conn], msg);
    if (!w->conn[conn].open || w->conn[conn].closing || msg->type != GS_MSG_GRANT || msg->u.grant.slot >= GS_MAX_DEVICES)
        return;
    int g = gpu_of_device(w, c->slots[msg->u.grant.slot].device);
    if (g >= 0) {
        uint64_t *last = &w->server.last_notice[g];
        if (*last && w->now != *last && w->now - *last < BOUND_NOTICE_GAP_NS)
            fail(w, "GPU %d: a GRANT for a new bound %.3f ms after the last one (at least %.1f ms apart)", g,
                 (double)(w->now - *last) / 1e6, (double)BOUND_NOTICE_GAP_NS / 1e6);
        *last = w->now;
    }
    trace_grant(w, conn, msg, " (a new bound)");
    send_to_proc(w, conn, msg);
    if (w->script)
        script_notice(w, conn, msg);
}

void client_drop(struct client *c, const char *what)
{
    struct world *w = sim_world;
    drop_conn(w, sim_conn_of(w, c), what);
}

void client_cap_above_memory(const struct client *c, const uint8_t uuid[16], uint64_t cap, uint64_t total)
{
    (void)uuid;
    trace(sim_world, "server: tenant %s pid %u: its cap of %llu bytes is above the GPU's %llu", c->tenant->name,
          c->pid, (unsigned long long)cap, (unsigned long long)total);
}

void client_memory_refused(const struct client *c, const struct sched_slot *slot, uint64_t need, uint64_t cap,
                           uint64_t used)
{
    struct world *w = sim_world;
    trace(w, "server: tenant %s pid %u: a lease of %llu bytes refused at its cap of %llu (%llu in use)",
          c->tenant->name, c->pid, (unsigned long long)need, (unsigned long long)cap, (unsigned long long)used);
    int conn = sim_conn_of(w, c), g = gpu_of_device(w, slot->device);
    if (conn >= 0 && g >= 0)
        check_lease_refused(w, &w->proc[w->conn[conn].proc], g, need);
}

/* ---- usage.c: a tenant's own use of a GPU, for its NVML (not simulated) --------- */

void usage_answer(struct client *c, const struct gs_msg_usage_query *q)
{
    (void)c;
    (void)q;
}

uint64_t usage_pid_namespace(uint32_t pid)
{
    (void)pid;
    return 0;
}

/* ---- log.c ---------------------------------------------------------------------------------- */

static void logged(int level, const char *fmt, va_list ap)
{
    struct world *w = sim_world;
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    trace(w, "server log: %s", text);
    /* The scheduler's LATE (dispatch.c logs it): its holder's work still
     * on the GPU is its own now, as fakecuda's meter would show. */
    const char *pid = strstr(text, " pid ");
    unsigned proc_pid;
    if (strstr(text, "did not release within") && pid && sscanf(pid, " pid %u", &proc_pid) == 1 &&
        proc_pid >= SIM_PID_BASE && proc_pid < SIM_PID_BASE + (unsigned)w->nprocs)
        gpu_excuse(w, (int)(proc_pid - SIM_PID_BASE));
    if (level == LOG_ERR)
        fail(w, "the server logged an error: %s", text);
}

void slog(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    logged(level, fmt, ap);
    va_end(ap);
}

void slog_limited(const void *tag, int level, const char *fmt, ...)
{
    (void)tag;
    va_list ap;
    va_start(ap, fmt);
    logged(level, fmt, ap);
    va_end(ap);
}

/* ---- gpu_access.c, process_lives.c ------------------------------------------------------------- */

/* The node's driver lists the simulated GPUs (sim_shim.c declares GPU g
 * as g + 1 and "simulated-gpu"); any other UUID is refused, as
 * gpu_access.c refuses a GPU the driver does not list. */
bool gpu_access_allowed(int node_fd, const uint8_t uuid[16], uint64_t now, char *why, size_t whylen)
{
    (void)node_fd;
    (void)now;
    int g = uuid[0] - 1;
    if (g >= 0 && g < sim_world->ngpus && memcmp(uuid + 1, "simulated-gpu", 13) == 0)
        return true;
    snprintf(why, whylen, "declared a GPU this node's NVIDIA driver does not list");
    return false;
}

bool process_lives(pid_t pid)
{
    struct world *w = sim_world;
    return pid >= SIM_PID_BASE && pid < SIM_PID_BASE + w->nprocs && w->proc[pid - SIM_PID_BASE].alive;
}
