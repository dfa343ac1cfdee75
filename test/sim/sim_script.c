/*
 * The scripted cases' harness (sim_script.h): the scripted processes
 * (APP_SCRIPT), which speak the protocol to the simulation's server as
 * their case says and note what they receive; the meters the cases read;
 * the clock a case moves; its checks; and one run of a case. The cases
 * themselves are in sim_scripted_*.c, listed at the bottom.
 */
#include "sim_script.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the scripted processes ---------------------------------------------------------- */

static struct world *world_of(const struct script_proc *sp)
{
    return sp->s->w;
}

static struct script_slot *slot_of(struct script_proc *sp, uint32_t slot)
{
    return slot < SIM_MAX_GPUS ? &sp->slot[slot] : NULL;
}

/* Sends m, and carries it and all it causes through to the end of the
 * instant. */
static void send_now(struct script_proc *sp, const struct gs_msg *m)
{
    struct world *w = world_of(sp);
    if (sp->p->conn < 0) {
        fail(w, "scripted proc %d sends a message of type %d with no connection", sp->p->id, (int)m->type);
        return;
    }
    send_to_server(w, sp->p->conn, m);
    world_advance(w, w->now);
}

static void asks(struct script_proc *sp, struct script_slot *ss)
{
    ss->asked_ns = world_of(sp)->now;
    ss->grants_asked = ss->grants;
}

static void send_release(struct script_proc *sp, int slot, bool more)
{
    struct world *w = world_of(sp);
    struct script_slot *ss = &sp->slot[slot];
    struct gs_msg m = {.type = GS_MSG_RELEASE};
    m.u.release.slot = (uint32_t)slot;
    m.u.release.grant = ss->held;
    m.u.release.flags = more ? GS_RELEASE_MORE : 0;
    trace(w, "proc %d: RELEASE slot %d grant %llu%s", sp->p->id, slot, (unsigned long long)ss->held,
          more ? " (more)" : "");
    ss->held = 0;
    if (more)
        asks(sp, ss);
    if (sp->p->conn >= 0)
        send_to_server(w, sp->p->conn, &m); /* (the caller's instant goes on) */
}

void script_receive(struct world *w, struct sim_proc *p, const struct gs_msg *m)
{
    struct script_proc *sp = &w->script->procs[p->id];
    switch (m->type) {
    case GS_MSG_GRANT: {
        struct script_slot *ss = slot_of(sp, m->u.grant.slot);
        if (!ss)
            break;
        ss->grants++;
        ss->last_grant_ns = w->now;
        ss->last_ahead_ns = m->u.grant.ahead_ns;
        ss->last_deadline = m->u.grant.deadline_ns;
        ss->held = m->u.grant.grant;
        break;
    }
    case GS_MSG_REVOKE: {
        struct script_slot *ss = slot_of(sp, m->u.grant.slot);
        if (ss && sp->busy && ss->held && ss->held == m->u.grant.grant)
            send_release(sp, (int)m->u.grant.slot, true);
        break;
    }
    case GS_MSG_MEM_LEASED:
        sp->lease_status = m->u.leased.status;
        sp->lease_granted = m->u.leased.granted;
        /* what it holds now, as the shim counts it (sim_check.c compares
         * the server's count with it after this event) */
        p->dev[sp->lease_slot].script_counted += m->u.leased.granted;
        break;
    case GS_MSG_ERROR:
        fail(w, "scripted proc %d: its connection was closed: %s", p->id, m->u.error.reason);
        break;
    default: /* WELCOME, a recall: none of these cases' concern */
        break;
    }
}

void script_notice(struct world *w, int conn, const struct gs_msg *m)
{
    struct sim_proc *p = &w->proc[w->conn[conn].proc];
    if (p->app != APP_SCRIPT)
        return;
    struct script_slot *ss = slot_of(&w->script->procs[p->id], m->u.grant.slot);
    if (!ss)
        return;
    uint64_t gap = w->now - ss->last_notice_ns;
    if (ss->notices++ && (!ss->least_notice_gap || gap < ss->least_notice_gap))
        ss->least_notice_gap = gap;
    ss->last_notice_ns = w->now;
}

struct script_proc *script_process(struct script *s, int tenant, bool busy)
{
    struct world *w = s->w;
    if (w->nprocs >= SIM_MAX_PROCS) {
        fprintf(stderr, "sim: case %s makes more than %d processes\n", s->name, SIM_MAX_PROCS);
        exit(2);
    }
    struct sim_proc *p = scenario_proc(w, tenant, APP_SCRIPT);
    p->started = true;
    p->ngpus = w->ngpus;
    for (int k = 0; k < w->ngpus; k++) {
        p->dev[k].gpu = k;
        p->dev[k].slot = k;
    }
    struct script_proc *sp = &s->procs[p->id];
    *sp = (struct script_proc){.s = s, .p = p, .busy = busy};
    p->conn = server_connect(w, p->id);
    p->welcomed = true;
    trace(w, "proc %d: scripted, tenant %s%s, conn %d", p->id, w->tenant[tenant].name, busy ? ", busy" : "",
          p->conn);
    struct gs_msg hello = {.type = GS_MSG_HELLO};
    hello.u.hello.pid = (uint32_t)(SIM_PID_BASE + p->id);
    send_now(sp, &hello);
    return sp;
}

void script_declare_as(struct script_proc *sp, int slot, int gpu)
{
    struct gs_msg m = {.type = GS_MSG_DEVICE};
    m.u.device.slot = (uint32_t)slot;
    m.u.device.uuid[0] = (uint8_t)(gpu + 1);
    memcpy(m.u.device.uuid + 1, "simulated-gpu", 13);
    sp->p->dev[slot].gpu = gpu;
    trace(world_of(sp), "proc %d: DEVICE slot %d GPU %d", sp->p->id, slot, gpu);
    send_now(sp, &m);
}

void script_declare(struct script_proc *sp, int gpu)
{
    script_declare_as(sp, gpu, gpu);
}

void script_acquire(struct script_proc *sp, int slot)
{
    struct gs_msg m = {.type = GS_MSG_ACQUIRE};
    m.u.acquire.slot = (uint32_t)slot;
    asks(sp, &sp->slot[slot]);
    trace(world_of(sp), "proc %d: ACQUIRE slot %d", sp->p->id, slot);
    send_now(sp, &m);
}

void script_release(struct script_proc *sp, int slot, bool more)
{
    send_release(sp, slot, more);
    world_advance(world_of(sp), world_of(sp)->now);
}

void script_asks(struct script_proc *sp, int slot)
{
    asks(sp, &sp->slot[slot]);
}

void script_disconnect(struct script_proc *sp)
{
    struct world *w = world_of(sp);
    trace(w, "proc %d: closes its connection, and lives on", sp->p->id);
    close_from_proc(w, sp->p->conn);
    sp->p->conn = -1;
    world_advance(w, w->now);
}

void script_exit(struct script_proc *sp)
{
    struct world *w = world_of(sp);
    struct sim_proc *p = sp->p;
    trace(w, "proc %d: exits", p->id);
    p->alive = false;
    p->died_at = w->now;
    close_from_proc(w, p->conn);
    p->conn = -1;
    post(w, w->now, EV_PROCESS_GONE, p->id, 0);
    world_advance(w, w->now);
}

uint32_t script_lease(struct script_proc *sp, int slot, uint64_t bytes)
{
    struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
    m.u.lease.slot = (uint32_t)slot;
    m.u.lease.id = ++sp->p->dev[slot].lease_id;
    m.u.lease.need = m.u.lease.want = bytes;
    sp->lease_status = UINT32_MAX;
    sp->lease_granted = 0;
    sp->lease_slot = slot;
    send_now(sp, &m);
    return sp->lease_status;
}

/* ---- the server ---------------------------------------------------------------------- */

void script_tenant_changed(struct script *s, int t, struct tenant_config config)
{
    struct world *w = s->w;
    struct tenant_plan *tp = &w->tenant[t];
    if (config.limit != tp->config.limit) {
        w->limit_changed[t] = true;
        w->limit_changed_at[t] = w->now;
    }
    tp->config = config;
    if (config.share > tp->share_most)
        tp->share_most = config.share;
    if (config.share < tp->share_least)
        tp->share_least = config.share;
    if (config.quantum_ns > tp->quantum_most)
        tp->quantum_most = config.quantum_ns;
    trace(w, "tenant %s: configuration changed", tp->name);
    server_tenant_changed(w, t);
    world_advance(w, w->now);
}

uint64_t script_timer_late(struct script *s, int g, uint64_t late)
{
    return server_timer_late(s->w, g, late);
}

/* ---- the meters ------------------------------------------------------------------------ */

/* Whether a slot holds d's current grant. */
static bool device_held(const struct device *d)
{
    if (d->state != DEV_RUNNING && d->state != DEV_REVOKING)
        return false;
    for (size_t i = 0; i < d->nslots; i++)
        if (d->slots[i]->holds && d->slots[i]->holds == d->grant)
            return true;
    return false;
}

void script_meter(struct world *w, uint64_t until)
{
    struct script *s = w->script;
    uint64_t span = until - w->now;
    if (!w->server.up)
        return;
    for (int g = 0; g < w->ngpus; g++) {
        const struct device *d = w->server.gpus[g];
        bool waited = false;
        for (size_t i = 0; d && i < d->nslots && !waited; i++)
            waited = d->slots[i]->wants;
        if (waited && !device_held(d))
            s->unheld_wait_ns[g] += span;
    }
    for (int i = 0; i < w->nprocs; i++) {
        const struct sim_proc *p = &w->proc[i];
        if (p->app != APP_SCRIPT || p->conn < 0 || !w->conn[p->conn].open)
            continue;
        for (int k = 0; k < SIM_MAX_GPUS; k++) {
            const struct sched_slot *slot = &w->conn[p->conn].client.slots[k];
            if (slot->device && slot->wants)
                s->procs[i].slot[k].waited_ns += span;
        }
    }
}

/* ---- the node and the clock ---------------------------------------------------------------- */

void script_gpus(struct script *s, int n)
{
    s->w->ngpus = n;
}

int script_tenant(struct script *s, const char *name, double share)
{
    struct tenant_plan *tp = scenario_tenant(s->w, share);
    snprintf(tp->name, sizeof tp->name, "%s", name);
    tp->config.quantum_ns = SCRIPT_QUANTUM_NS;
    return s->w->ntenants - 1;
}

struct tenant_config *script_config(struct script *s, int t)
{
    return &s->w->tenant[t].config;
}

void script_start(struct script *s)
{
    scenario_describe(s->w, s->name);
    world_start(s->w);
    s->started = true;
    world_advance(s->w, SCRIPT_START_NS);
}

void script_run_until(struct script *s, uint64_t at)
{
    world_advance(s->w, at);
}

void script_run_for(struct script *s, uint64_t ns)
{
    world_advance(s->w, s->w->now + ns);
}

uint64_t script_until_granted(struct script_proc *sp, int slot, uint64_t limit)
{
    struct world *w = world_of(sp);
    const struct script_slot *ss = &sp->slot[slot];
    uint64_t until = ss->asked_ns + limit;
    while (ss->grants == ss->grants_asked && w->now < until) {
        uint64_t next = world_next_at(w);
        world_advance(w, next < until ? next : until);
    }
    return ss->grants == ss->grants_asked ? limit : ss->last_grant_ns - ss->asked_ns;
}

/* ---- what is measured ------------------------------------------------------------------------ */

struct device *script_device(struct script *s, int g)
{
    return s->w->server.gpus[g];
}

struct sched_tenant *script_sched_tenant(struct script *s, int t)
{
    return &s->w->server.tenants[t].sched;
}

const struct device_tenant *script_entry(struct script *s, int g, int t)
{
    const struct device *d = script_device(s, g);
    return d ? sched_entry_find(d, script_sched_tenant(s, t)) : NULL;
}

uint64_t script_held_ns(struct script *s, int g, int t)
{
    const struct device_tenant *dt = script_entry(s, g, t);
    return dt ? dt->used_ns : 0;
}

uint64_t script_mem_counted(struct script *s, int g, int t)
{
    const struct device_tenant *dt = script_entry(s, g, t);
    return dt ? dt->mem_used : 0;
}

bool script_holds(const struct script_proc *sp, int slot)
{
    const struct world *w = sp->s->w;
    if (sp->p->conn < 0 || !w->conn[sp->p->conn].open)
        return false;
    const struct sched_slot *ss = &w->conn[sp->p->conn].client.slots[slot];
    return ss->device && ss->holds && ss->holds == ss->device->grant;
}

void script_check(struct script *s, bool ok, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    printf("%s %s: %s\n", ok ? "ok  " : "FAIL", s->name, what);
    s->checks++;
    if (!ok && s->failures++ == 0)
        snprintf(s->failure, sizeof s->failure, "%s", what);
}

/* ---- a run ------------------------------------------------------------------------------------ */

/* The longest a case may run, in simulated time. */
#define SCRIPT_MOST_NS (3600 * 1000 * MS)

void script_run(struct world *w, uint64_t seed, unsigned flags, const struct sim_case *c)
{
    struct script *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "sim: out of memory\n");
        exit(2);
    }
    world_reset(w, seed, flags, SCRIPT_MOST_NS);
    w->exact = true;
    w->check_sched = true; /* (a case's node is small: the whole check costs little) */
    w->policy = ON_DOWN_WAIT;
    w->script = s;
    s->w = w;
    s->name = c->name;
    c->script(s);
    if (!s->started)
        fail(w, "the case never started its node");
    w->end = w->now; /* (the checks at the end judge limits over the run) */
    world_finish(w);
    if (s->failures)
        fail(w, "%u of %u checks failed, the first: %s", s->failures, s->checks, s->failure);
    else if (s->checks == 0)
        fail(w, "the case checked nothing");
    w->script = NULL;
    free(s);
}

/* ---- the cases ------------------------------------------------------------------------------- */

#include "sim_scripted.h"

const struct sim_case sim_scripted_cases[] = {
#define SCRIPTED(name, fn, what) {name, what, NULL, fn, 0},
    SCRIPTED_CASES
#undef SCRIPTED
};
const int sim_nscripted_cases = (int)(sizeof sim_scripted_cases / sizeof sim_scripted_cases[0]);
