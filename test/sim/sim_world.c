/*
 * The simulation's clock, event queue and random source, and one run:
 * events are taken in order of time (ties in order of posting), each is
 * handled to the end, and the invariants are checked after it. Nothing
 * reads a real clock; everything random comes from the seed. A run goes
 * in one call (world_run_for), or a step at a time for a scripted case
 * or a fuzz input (world_reset or world_reuse, world_start, world_advance,
 * world_finish: sim_script.c, test/sched/sched_fuzz.c).
 */
#include "sim.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- the random source ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + rng_next(r) % (hi - lo + 1);
}

double rng_unit(struct rng *r)
{
    return (double)(rng_next(r) >> 11) / 9007199254740992.0;
}

bool rng_chance(struct rng *r, double p)
{
    return rng_unit(r) < p;
}

/* ---- the event queue -------------------------------------------------------------- */

static heap_key heap_key_of(const struct event *e)
{
    return (heap_key)e->at << 64 | e->seq;
}

static void heap_push(struct world *w, int idx)
{
    int i = w->nheap++;
    struct heap_entry e = {.key = heap_key_of(&w->pool[idx]), .idx = idx};
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (e.key >= w->heap[parent].key)
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = e;
}

/* Moves `moving` down from place i to where the keys below it are larger. */
static void heap_sift_down(struct world *w, int i, struct heap_entry moving)
{
    int n = w->nheap;
    for (;;) {
        int l = 2 * i + 1;
        if (l >= n)
            break;
        /* the earlier child, chosen without a branch */
        int m = l + (l + 1 < n && w->heap[l + 1].key < w->heap[l].key);
        if (w->heap[m].key >= moving.key)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    w->heap[i] = moving;
}

static int heap_pop(struct world *w)
{
    int top = w->heap[0].idx;
    struct heap_entry last = w->heap[--w->nheap];
    if (w->nheap > 0)
        heap_sift_down(w, 0, last);
    return top;
}

/* Takes off the queue the server's timer events that no arming will fire:
 * timer_at (sim_driver.c) posts one for each arming and leaves the one it
 * supersedes, which does nothing when its time comes (server_timer), and a
 * timer armed thousands of times before it fires fills the queue with
 * them. Their place in time was only a step of the clock and a look of the
 * checks with nothing changed, so the runs that never fill the queue are
 * the same with or without this; the order of the rest is their keys'.
 * Returns how many it dropped. */
static int drop_superseded_timers(struct world *w)
{
    int kept = 0, dropped = 0;
    for (int i = 0; i < w->nheap; i++) {
        struct heap_entry h = w->heap[i];
        const struct event *e = &w->pool[h.idx];
        if (e->kind == EV_SERVER_TIMER && e->gen != w->server.timer_gen[e->a]) {
            w->free_list[w->nfree++] = h.idx;
            dropped++;
        } else {
            w->heap[kept++] = h;
        }
    }
    w->nheap = kept;
    for (int i = kept / 2 - 1; i >= 0; i--)
        heap_sift_down(w, i, w->heap[i]);
    return dropped;
}

static struct event *new_event(struct world *w, uint64_t at, enum ev_kind kind, int a)
{
    if (w->nfree == 0 && drop_superseded_timers(w) == 0) {
        fail(w, "the event queue is full (%d events): something grows without bound", SIM_EVENTS);
        return NULL;
    }
    int idx = w->free_list[--w->nfree];
    struct event *e = &w->pool[idx];
    e->at = at < w->now ? w->now : at;
    e->seq = w->seq++;
    e->kind = kind;
    e->a = a;
    e->gen = 0;
    e->sent = 0;
    e->mem = false;
    e->mem_tenant = -1;
    heap_push(w, idx);
    return e;
}

void post(struct world *w, uint64_t at, enum ev_kind kind, int a, uint64_t gen)
{
    struct event *e = new_event(w, at, kind, a);
    if (!e)
        return;
    e->gen = gen;
    if (kind == EV_CLOSED || kind == EV_PROCESS_GONE) {
        e->mem = true;
        w->mem_in_flight++;
    }
}

/* Whether a message changes what the server or the process counts of
 * device memory (or who is counted): the counts can differ meanwhile. */
static bool changes_counts(enum gs_msg_type type)
{
    return type == GS_MSG_MEM_LEASE || type == GS_MSG_MEM_LEASED || type == GS_MSG_MEM_FREE ||
           type == GS_MSG_MEM_DECLARE || type == GS_MSG_DEVICE || type == GS_MSG_ERROR;
}

/* The bytes of m its type uses: most messages are a few words of a union
 * sized for the largest (a USAGE's table), and each is copied into the
 * event that carries it. Any other type is copied whole. */
static size_t msg_bytes(const struct gs_msg *m)
{
    size_t head = offsetof(struct gs_msg, u);
    switch (m->type) {
    case GS_MSG_HELLO: return head + sizeof m->u.hello;
    case GS_MSG_DEVICE: return head + sizeof m->u.device;
    case GS_MSG_ACQUIRE: return head + sizeof m->u.acquire;
    case GS_MSG_GRANT:
    case GS_MSG_REVOKE: return head + sizeof m->u.grant;
    case GS_MSG_RELEASE: return head + sizeof m->u.release;
    case GS_MSG_MEM_FREE:
    case GS_MSG_MEM_DECLARE: return head + sizeof m->u.mem;
    case GS_MSG_MEM_QUERY: return head + sizeof m->u.mem_query;
    case GS_MSG_MEM_RESULT: return head + sizeof m->u.mem_result;
    case GS_MSG_MEM_LEASE: return head + sizeof m->u.lease;
    case GS_MSG_MEM_LEASED: return head + sizeof m->u.leased;
    case GS_MSG_MEM_RECALL: return head + sizeof m->u.recall;
    case GS_MSG_USAGE_QUERY: return head + sizeof m->u.usage_query;
    default: return sizeof *m;
    }
}

void post_msg(struct world *w, uint64_t at, enum ev_kind kind, int a, const struct gs_msg *m, uint64_t sent)
{
    struct event *e = new_event(w, at, kind, a);
    if (!e)
        return;
    memcpy(&e->msg, m, msg_bytes(m));
    e->sent = sent;
    if (changes_counts(m->type)) {
        e->mem = true;
        w->mem_in_flight++;
        e->mem_tenant = (int8_t)w->conn[a].tenant;
        if (e->mem_tenant >= 0)
            w->mem_in_flight_of[e->mem_tenant]++;
    }
}

/* ---- reports ----------------------------------------------------------------- */

void trace(struct world *w, const char *fmt, ...)
{
    if (!(w->flags & SIM_TRACE))
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("%10.6f ", (double)w->now / 1e9);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

void fail(struct world *w, const char *fmt, ...)
{
    if (w->failed)
        return;
    w->failed = true;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(w->failure, sizeof w->failure, "at %.6f s: ", (double)w->now / 1e9);
    vsnprintf(w->failure + n, sizeof w->failure - (size_t)n, fmt, ap);
    va_end(ap);
    trace(w, "FAILED: %s", w->failure);
}

/* ---- a run ------------------------------------------------------------------- */

static void handle(struct world *w, struct event *e)
{
    if (++w->fig.events > 20000000) {
        fail(w, "20 million events: something loops (the last: kind %d for %d)", (int)e->kind, e->a);
        return;
    }
    switch (e->kind) {
    case EV_TO_SERVER:
        server_receive(w, e->a, &e->msg, e->sent);
        break;
    case EV_TO_PROC: {
        struct sim_conn *c = &w->conn[e->a];
        struct sim_proc *p = &w->proc[c->proc];
        if (c->queued_to > 0)
            c->queued_to--;
        if (p->alive && p->conn == e->a) {
            if (p->stopped) { /* it reads when it runs again, in the order sent: every message
                                  waits on the same 100 us grid, ties in the order they came */
                post_msg(w, (w->now / (100 * US) + 1) * (100 * US), EV_TO_PROC, e->a, &e->msg, e->sent);
                c->queued_to++;
            } else if (p->app == APP_HOSTILE) {
                hostile_receive(w, p, &e->msg);
            } else if (p->app == APP_SCRIPT) {
                script_receive(w, p, &e->msg);
            } else if (p->app == APP_DRIVEN) {
                if (w->driven_receive)
                    w->driven_receive(w, p, &e->msg);
            } else {
                shim_receive(w, p, &e->msg, e->sent);
            }
        }
        break;
    }
    case EV_CLOSED:
        server_closed(w, e->a);
        break;
    case EV_SERVER_TIMER:
        server_timer(w, e->a, e->gen);
        break;
    case EV_GPU:
        gpu_event(w, e->a, e->gen);
        break;
    case EV_APP: {
        struct sim_proc *p = &w->proc[e->a];
        if (p->alive && e->gen == p->app_gen) {
            if (p->stopped)
                post(w, w->now + 100 * US, EV_APP, e->a, e->gen);
            else if (p->app == APP_HOSTILE)
                hostile_act(w, p);
            else if (p->app != APP_SCRIPT && p->app != APP_DRIVEN) /* a script or a driver acts for them */
                app_step(w, p);
        }
        break;
    }
    case EV_SHIM: {
        struct sim_proc *p = &w->proc[e->a];
        if (p->alive && e->gen == p->shim_gen) {
            if (p->stopped)
                post(w, w->now + 100 * US, EV_SHIM, e->a, e->gen);
            else
                shim_timer(w, p);
        }
        break;
    }
    case EV_FAULT:
        proc_fault(w, e->a);
        break;
    case EV_SERVER_START:
        server_start(w);
        break;
    case EV_PROCESS_GONE:
        server_process_gone(w, e->a);
        break;
    }
}

/* Handles the next event if it is due by `until`; false if none is (or
 * the run failed). */
static bool handle_next(struct world *w, uint64_t until)
{
    if (w->nheap == 0 || w->failed || (uint64_t)(w->heap[0].key >> 64) > until)
        return false;
    int idx = heap_pop(w);
    struct event *e = &w->pool[idx];
    enum ev_kind kind = e->kind;
    if (w->script && e->at > w->now)
        script_meter(w, e->at);
    w->now = e->at;
    if (!w->warm && w->now >= w->warmup) {
        w->warm = true;
        for (int g = 0; g < w->ngpus; g++)
            for (int t = 0; t < w->ntenants; t++)
                w->busy_at_warmup[g][t] = w->gpu[g].busy_tenant[t];
    }
    if (e->mem_tenant >= 0) /* arrived: its handling sees it no longer on its way */
        w->mem_in_flight_of[e->mem_tenant]--;
    handle(w, e);
    if (e->mem) {
        w->mem_in_flight--;
        w->mem_changed = true;
    }
    w->free_list[w->nfree++] = idx;
    if (!w->failed)
        check_after_step(w);
    /* (what a process receives changes nothing at the server) */
    if (!w->failed && w->check_sched && kind != EV_TO_PROC)
        check_sched_state(w);
    return true;
}

/* What world_reset and world_reuse do after clearing. */
static void world_begin(struct world *w, uint64_t seed, unsigned flags, uint64_t duration)
{
    sim_world = w;
    w->seed = seed;
    w->flags = flags;
    w->end = duration;
    rng_seed(&w->rng, seed);
    w->late_wakes = 0.05;
    w->nfree = SIM_EVENTS;
    for (int i = 0; i < SIM_EVENTS; i++)
        w->free_list[i] = SIM_EVENTS - 1 - i;
}

void world_reset(struct world *w, uint64_t seed, unsigned flags, uint64_t duration)
{
    memset(w, 0, offsetof(struct world, free_list));
    world_begin(w, seed, flags, duration);
}

/* Clears n elements of `size` bytes from `first`, each from byte `from`. */
static void clear_used(void *first, int n, size_t size, size_t from)
{
    for (int i = 0; i < n; i++)
        memset((char *)first + (size_t)i * size + from, 0, size - from);
}

/* world_reuse clears everything before the event queue: the arrays lie
 * next to each other, between what it clears whole. */
#define ADJACENT(a, b) (offsetof(struct world, a) + sizeof ((struct world *)0)->a == offsetof(struct world, b))
_Static_assert(ADJACENT(gpu, tenant) && ADJACENT(tenant, proc) && ADJACENT(proc, conn) && ADJACENT(conn, fault) &&
               ADJACENT(fault, server), "world_reuse clears every field of the world");

void world_reuse(struct world *w, uint64_t seed, unsigned flags, uint64_t duration)
{
    clear_used(w->gpu, w->ngpus, sizeof w->gpu[0], offsetof(struct sim_gpu, head));
    clear_used(w->tenant, w->ntenants, sizeof w->tenant[0], 0);
    clear_used(w->proc, w->nprocs, sizeof w->proc[0], 0);
    clear_used(w->conn, w->nconns, sizeof w->conn[0], 0);
    clear_used(w->fault, w->nfaults, sizeof w->fault[0], 0);
    /* what lies before the arrays and after them, up to the event queue */
    memset(w, 0, offsetof(struct world, gpu));
    memset(&w->server, 0, offsetof(struct world, free_list) - offsetof(struct world, server));
    world_begin(w, seed, flags, duration);
}

void world_start(struct world *w)
{
    server_start(w);
    for (int i = 0; i < w->nprocs; i++) {
        struct sim_proc *p = &w->proc[i];
        post(w, p->start_at, EV_APP, i, p->app_gen);
    }
    for (int f = 0; f < w->nfaults; f++)
        post(w, w->fault[f].at, EV_FAULT, f, 0);
}

uint64_t world_next_at(const struct world *w)
{
    return w->nheap > 0 && !w->failed ? (uint64_t)(w->heap[0].key >> 64) : UINT64_MAX;
}

void world_advance(struct world *w, uint64_t until)
{
    while (handle_next(w, until))
        ;
    if (until > w->now) { /* (also once the run failed: a script's clock still moves) */
        if (w->script)
            script_meter(w, until);
        w->now = until;
    }
}

void world_finish(struct world *w)
{
    if (!w->failed)
        check_end(w);
    if ((w->flags & SIM_TRACE) && w->server.up) {
        const struct sched *sc = &server_sched;
        trace(w, "server's state: forming gang %s until %.3f", sc->forming_gang ? sc->forming_gang->name : "-",
              (double)sc->forming_until / 1e9);
        for (const struct device *d = sc->devices; d; d = d->next) {
            trace(w, "GPU %d: state %d holder %s holders %u floor %.6f", d->uuid[0] - 1, (int)d->state,
                  d->holder ? d->holder->tenant->name : "-", d->holders, d->vtime_floor / 1e9);
            for (size_t i = 0; i < d->ntenants; i++) {
                const struct device_tenant *dt = &d->tenants[i];
                trace(w, "  %s: vtime %.6f waiting %u tenant_waits %d active %d eligible %+.3f refs %u", dt->tenant->name,
                      dt->vtime / 1e9, dt->waiting, dt->tenant_waits, dt->active,
                      ((double)dt->eligible_at - (double)w->now) / 1e9, dt->refs);
            }
        }
    }
    server_stop(w);
}

void world_run_for(struct world *w, uint64_t seed, unsigned flags, uint64_t duration, scenario_fn *make)
{
    world_reset(w, seed, flags, duration);
    make(w);
    world_start(w);
    while (handle_next(w, w->end))
        ;
    /* The first event past the end is taken off the queue, and the clock
     * moves to the end only if others remain: check_end reads the clock. */
    if (w->nheap > 0 && !w->failed)
        w->free_list[w->nfree++] = heap_pop(w);
    if (w->nheap > 0 && w->now < w->end)
        w->now = w->end;
    world_finish(w);
}
