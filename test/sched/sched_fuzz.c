/*
 * Fuzz target for the scheduler's lease and slice paths: the bytes become
 * a node's history (client messages, closes, reconnections, time passing,
 * tenants changed or removed, processes exiting, idle GPUs forgotten), each
 * message decoded by the protocol's own decoder and turned into a
 * scheduler event as tokenserver/clients.c turns it, the step's actions
 * carried out as tokenserver/dispatch.c carries them out.
 *
 * After every step it checks what must hold whatever clients send:
 *   - no action lost for want of room;
 *   - a GRANT goes to an open client's declared slot;
 *   - only the holder's tenant holds a GPU's slice, and the GPU's count of
 *     holders is the slots that hold its grant;
 *   - each tenant's memory count on a GPU is exactly what its slots hold
 *     plus the counts kept for processes that lost their connection;
 *   - the counts of waiting slots agree, and virtual times are finite;
 *   - a lease granted bytes leaves the tenant within its cap.
 * At the end every client gives back what it holds and time runs on: each
 * slot still waiting must be granted (no one is starved).
 *
 * Input: records of one byte (what happens, and to which client) and, for
 * a message, one length byte and that many bytes of a datagram.
 *
 * Built as a libFuzzer target (scripts/fuzz, scripts/explore), and with a
 * main() that replays the files named (the corpus; --trace first prints
 * every step's event, actions and GPUs, to read a finding), or with
 * --random N SEED runs N inputs made by mutating the corpus files with a
 * seeded generator (the meson test does both); --write-corpus DIR writes
 * the seed corpus (test/sched/sched_corpus).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/protocol.h"
#include "sched.h"

#define CLIENTS 6
#define TENANTS 3
#define GPUS 2
#define MS 1000000ull
#define GRACE_NS (250 * MS)
#define DRAIN_TICKS 4000      /* of 5 ms: 20 s for every waiting slot to be granted */

enum op { OP_MESSAGE, OP_CLOSE, OP_TIME, OP_PROCESS_GONE, OP_TENANT, OP_TENANT_GONE, OP_SWEEP, OP_COUNT };

struct fuzz_client {
    bool open, greeted, doomed;
    int tenant;
    uint32_t pid;
    struct sched_slot slots[GS_MAX_DEVICES];
    bool granted[GS_MAX_DEVICES]; /* received a GRANT since it last asked */
};

/* The node one input runs on: set up afresh by each input, owned by the
 * fuzzer's single thread. */
static struct node {
    struct sched s;
    struct sched_tenant tenants[TENANTS];
    bool tenant_present[TENANTS];
    struct device *gpus[GPUS];
    struct fuzz_client clients[CLIENTS];
    size_t declared;
    uint64_t now, wake_at;
    uint64_t timer_at[GPUS];
} node;

/* Actions of every kind over all inputs, to show what the inputs reach. */
static uint64_t action_counts[SCHED_SET_WAKE + 1];

static const char *tenant_names[TENANTS] = {"alpha", "beta", "gamma"};

static void fail(const char *what)
{
    fprintf(stderr, "sched_fuzz: %s (at %.3f ms)\n", what, (double)node.now / 1e6);
    abort();
}

static int gpu_of(const struct device *d)
{
    for (int g = 0; g < GPUS; g++)
        if (node.gpus[g] == d)
            return g;
    return -1;
}

/* ---- invariants --------------------------------------------------------------------- */

static void check_device(const struct device *d)
{
    unsigned holding = 0;
    for (size_t i = 0; i < d->nslots; i++) {
        const struct sched_slot *slot = d->slots[i];
        if (slot->device != d || slot->index != i)
            fail("a GPU's slot list and a slot disagree");
        if (!slot->holds)
            continue;
        if (d->state != DEV_RUNNING && d->state != DEV_REVOKING)
            fail("a slot holds a slice of a GPU that runs no slice");
        if (!d->holder || slot->tenant != d->holder->tenant)
            fail("a slot holds a slice of a GPU another tenant holds");
        if (slot->holds == d->grant)
            holding++;
    }
    if (d->state == DEV_RUNNING && holding != d->holders)
        fail("a GPU's count of holders is not the slots that hold its grant");
    for (size_t k = 0; k < d->ntenants; k++) {
        const struct device_tenant *dt = &d->tenants[k];
        if (!isfinite(dt->vtime) || dt->vtime < 0)
            fail("a virtual time is not a finite positive number");
        uint64_t held = 0;
        unsigned waiting = 0;
        for (size_t i = 0; i < d->nslots; i++)
            if (d->slots[i]->tenant == dt->tenant) {
                held += d->slots[i]->mem_held;
                waiting += d->slots[i]->wants;
            }
        for (int g = 0; g < MEM_GHOSTS; g++)
            held += dt->ghosts[g].bytes;
        if (held != dt->mem_used)
            fail("a tenant's memory count is not what its slots and ghosts hold");
        if (waiting != dt->waiting)
            fail("a GPU's count of a tenant's waiting slots is wrong");
    }
}

static void check_state(void)
{
    if (node.s.actions_lost)
        fail("the scheduler lost actions for want of room");
    unsigned waiting[TENANTS] = {0};
    size_t declared = 0;
    for (int c = 0; c < CLIENTS; c++)
        for (int i = 0; i < GS_MAX_DEVICES; i++) {
            const struct sched_slot *slot = &node.clients[c].slots[i];
            if (slot->device) {
                declared++;
                waiting[node.clients[c].tenant] += slot->wants;
            } else if (slot->wants || slot->holds || slot->mem_held) {
                fail("a slot that names no GPU wants, holds or counts memory");
            }
        }
    if (declared != node.declared)
        fail("the count of declared slots is wrong");
    for (int t = 0; t < TENANTS; t++)
        if (node.tenant_present[t] && node.tenants[t].waiting != waiting[t])
            fail("a tenant's count of waiting slots is wrong");
    for (const struct device *d = node.s.devices; d; d = d->next)
        check_device(d);
}

/* ---- the server's side, as clients.c and dispatch.c do it ---------------------------- */

static void close_client(struct fuzz_client *c, bool lives_on);

/* --trace: every step's event and actions on stderr (replay only). */
static bool tracing;

static void trace_step(const struct sched_event *ev)
{
    static const char *events[] = {"tenant-changed", "tenant-gone", "declare", "undeclare", "client-gone",
                                   "acquire", "release", "timer", "mem-lease", "mem-free", "mem-declare",
                                   "mem-query", "wake", "process-gone"};
    static const char *actions[] = {"grant", "revoke", "set-timer", "leased", "mem-result", "recall",
                                    "drop", "late", "over-cap", "set-wake"};
    fprintf(stderr, "%10.3f %s", (double)node.now / 1e6, events[ev->type]);
    if (ev->slot)
        fprintf(stderr, " client %d/%s slot %u", (int)((struct fuzz_client *)ev->slot->owner - node.clients),
                ev->slot->tenant->name, ev->slot->number);
    if (ev->device)
        fprintf(stderr, " gpu %d", gpu_of(ev->device));
    if (ev->tenant)
        fprintf(stderr, " %s share %g limit %g quantum %.0f ms", ev->tenant->name, ev->tenant->config.share,
                ev->tenant->config.limit, (double)ev->tenant->config.quantum_ns / 1e6);
    if (ev->type == SCHED_RELEASE)
        fprintf(stderr, " grant %llu%s idle %llu", (unsigned long long)ev->grant, ev->more ? " more" : "",
                (unsigned long long)ev->idle_ns);
    fprintf(stderr, "\n");
    for (size_t i = 0; i < node.s.nactions; i++) {
        const struct sched_action *a = &node.s.actions[i];
        fprintf(stderr, "             -> %s", actions[a->type]);
        if (a->slot)
            fprintf(stderr, " client %d slot %u", (int)((struct fuzz_client *)a->slot->owner - node.clients),
                    a->slot->number);
        if (a->device)
            fprintf(stderr, " gpu %d", gpu_of(a->device));
        if (a->type == SCHED_GRANT || a->type == SCHED_REVOKE)
            fprintf(stderr, " grant %llu", (unsigned long long)a->grant);
        if (a->at)
            fprintf(stderr, " at %.3f", (double)a->at / 1e6);
        fprintf(stderr, "\n");
    }
    for (const struct device *d = node.s.devices; d; d = d->next) {
        fprintf(stderr, "             gpu %d state %d grant %llu holder %s holders %u timer %.3f:", gpu_of(d),
                (int)d->state, (unsigned long long)d->grant, d->holder ? d->holder->tenant->name : "-",
                d->holders, (double)d->timer_at / 1e6);
        for (size_t k = 0; k < d->ntenants; k++)
            fprintf(stderr, " %s(w%u%s elig %.3f vt %.3f)", d->tenants[k].tenant->name, d->tenants[k].waiting,
                    d->tenants[k].active ? " active" : "", (double)d->tenants[k].eligible_at / 1e6,
                    d->tenants[k].vtime / 1e6);
        fprintf(stderr, "\n");
    }
}

static void step(const struct sched_event *ev)
{
    sched_step(&node.s, ev, node.now);
    if (tracing)
        trace_step(ev);
    for (size_t i = 0; i < node.s.nactions; i++) {
        const struct sched_action *a = &node.s.actions[i];
        action_counts[a->type]++;
        struct fuzz_client *c = a->slot ? a->slot->owner : NULL;
        /* what a client would receive, through the server's own translation */
        struct gs_msg m;
        if (sched_wire_message(a, 0, &m)) {
            if (m.type == GS_MSG_GRANT) {
                if (!c->open || !a->slot->device)
                    fail("a GRANT to a closed client or a slot that names no GPU");
                if (a->slot->holds != m.u.grant.grant)
                    fail("a GRANT the slot is not recorded as holding");
                c->granted[m.u.grant.slot] = true;
            }
            /* (a lease of nothing may be granted to a tenant its processes'
             * declarations after a restart put over its cap) */
            if (m.type == GS_MSG_MEM_LEASED && m.u.leased.status == GS_LEASE_GRANTED && m.u.leased.granted > 0 &&
                m.u.leased.cap && m.u.leased.used > m.u.leased.cap)
                fail("a lease granted over the tenant's cap");
            continue;
        }
        switch (a->type) {
        case SCHED_SET_TIMER:
            node.timer_at[gpu_of(a->device)] = a->at;
            break;
        case SCHED_SET_WAKE:
            node.wake_at = a->at;
            break;
        case SCHED_DROP:
            c->doomed = true; /* closed once the step's actions are carried out */
            break;
        default: /* the messages (above); LATE and OVER_CAP: log lines */
            break;
        }
    }
    node.s.nactions = 0;
    check_state();
    for (int k = 0; k < CLIENTS; k++)
        if (node.clients[k].doomed)
            close_client(&node.clients[k], true);
}

static void undeclare(struct fuzz_client *c, int slot, bool lives_on)
{
    if (!c->slots[slot].device)
        return;
    struct sched_event ev = {.type = SCHED_UNDECLARE, .slot = &c->slots[slot], .lives_on = lives_on};
    node.declared--;
    step(&ev);
}

static void close_client(struct fuzz_client *c, bool lives_on)
{
    if (!c->open)
        return;
    c->open = false;
    c->doomed = false;
    size_t named = 0;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        named += c->slots[i].device != NULL;
    if (named == 0)
        return;
    struct sched_event ev = {.type = SCHED_CLIENT_GONE, .slot = c->slots, .nslots = GS_MAX_DEVICES,
                             .lives_on = lives_on};
    node.declared -= named;
    step(&ev);
}

static void open_client(struct fuzz_client *c, int index)
{
    memset(c, 0, sizeof *c);
    c->open = true;
    c->tenant = index % TENANTS;
    c->pid = 100 + (uint32_t)index;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        c->slots[i] = (struct sched_slot){.owner = c, .number = (uint32_t)i, .pid = c->pid,
                                          .tenant = &node.tenants[c->tenant]};
}

/* DEVICE: as devices.c's device_declare, the node's GPUs being the UUIDs
 * whose first byte is 1 or 2 (any other is not this node's: a drop). */
static void declare(struct fuzz_client *c, const struct gs_msg *m)
{
    struct sched_slot *slot = &c->slots[m->u.device.slot];
    int g = m->u.device.uuid[0] - 1;
    if (g < 0 || g >= GPUS) {
        close_client(c, true);
        return;
    }
    if (slot->device && (slot->wants || slot->holds) && slot->device != node.gpus[g]) {
        close_client(c, true);
        return;
    }
    if (slot->device && slot->device == node.gpus[g])
        return;
    undeclare(c, (int)m->u.device.slot, false);
    if (!node.gpus[g]) {
        struct device *d = calloc(1, sizeof *d);
        if (!d)
            fail("out of memory");
        d->uuid[0] = (uint8_t)(g + 1);
        d->id = (uint64_t)g + 1;
        sched_device_add(&node.s, d, node.now);
        node.gpus[g] = d;
    }
    struct device *d = node.gpus[g];
    if (!sched_entry_get(d, slot->tenant) || !sched_slots_reserve(d) ||
        !sched_actions_reserve(&node.s, node.declared + 1))
        fail("out of memory");
    struct sched_event ev = {.type = SCHED_DECLARE, .slot = slot, .device = d};
    node.declared++;
    step(&ev);
}

static void receive(int index, const uint8_t *bytes, size_t len)
{
    struct fuzz_client *c = &node.clients[index];
    if (!c->open) { /* a connection again: the process's next one */
        if (!node.tenant_present[index % TENANTS])
            return;
        open_client(c, index);
    }
    struct gs_msg m;
    if (gs_msg_decode(bytes, len, &m) != GS_DECODE_OK || (!c->greeted && m.type != GS_MSG_HELLO)) {
        close_client(c, true);
        return;
    }
    struct sched_event ev = {.slot = NULL};
    switch (m.type) {
    case GS_MSG_HELLO:
        if (c->greeted)
            close_client(c, true); /* a second HELLO */
        c->greeted = true;
        return;
    case GS_MSG_DEVICE:
        declare(c, &m);
        return;
    case GS_MSG_USAGE_QUERY:
        return; /* read-only: no step */
    default:
        if (!sched_wire_event(&m, c->slots, node.now, &ev)) {
            close_client(c, true);
            return;
        }
        if (m.type == GS_MSG_ACQUIRE)
            c->granted[m.u.acquire.slot] = false;
    }
    if (!ev.slot->device) {
        close_client(c, true);
        return;
    }
    step(&ev);
}

/* Time passes: timers and the wake-up fire in order, as the loop's do. */
static void advance(uint64_t ns)
{
    uint64_t until = node.now + ns;
    for (;;) {
        uint64_t next = until;
        int which = -1;
        for (int g = 0; g < GPUS; g++)
            if (node.gpus[g] && node.timer_at[g] && node.timer_at[g] <= next) {
                next = node.timer_at[g];
                which = g;
            }
        bool wake = node.wake_at && node.wake_at <= next;
        if (wake)
            next = node.wake_at;
        if (which < 0 && !wake)
            break;
        if (next > node.now)
            node.now = next;
        if (wake) {
            node.wake_at = 0;
            struct sched_event ev = {.type = SCHED_WAKE};
            step(&ev);
        } else {
            node.timer_at[which] = 0;
            struct sched_event ev = {.type = SCHED_TIMER, .device = node.gpus[which]};
            step(&ev);
        }
    }
    node.now = until;
}

static void configure(int t, uint8_t bits)
{
    struct sched_tenant *st = &node.tenants[t];
    struct tenant_config config = {
        .share = (double)(1 + (bits & 7)),
        .limit = (bits & 8) ? 0.25 + 0.25 * (double)((bits >> 6) & 3) : 1.0,
        .quantum_ns = (bits & 16) ? 2 * MS : 20 * MS,
        .memory = (bits & 32) ? (uint64_t)(1 + ((bits >> 6) & 3)) << 30 : 0,
        .gang = GANG_AUTO,
    };
    if (!node.tenant_present[t]) {
        memset(st, 0, sizeof *st);
        st->name = tenant_names[t];
        st->index = (unsigned)t;
        st->config = config;
        node.tenant_present[t] = true;
        return;
    }
    st->config = config;
    struct sched_event ev = {.type = SCHED_TENANT_CHANGED, .tenant = st};
    step(&ev);
}

static void remove_tenant(int t)
{
    if (!node.tenant_present[t])
        return;
    for (int c = 0; c < CLIENTS; c++)
        if (node.clients[c].open && node.clients[c].tenant == t)
            close_client(&node.clients[c], true);
    struct sched_event ev = {.type = SCHED_TENANT_GONE, .tenant = &node.tenants[t]};
    step(&ev);
    for (const struct device *d = node.s.devices; d; d = d->next)
        if (sched_entry_find(d, &node.tenants[t]))
            fail("a removed tenant keeps an entry on a GPU");
    node.tenant_present[t] = false;
}

static void sweep(void)
{
    for (int g = 0; g < GPUS; g++)
        if (node.gpus[g] && sched_device_unused(node.gpus[g])) {
            sched_device_remove(&node.s, node.gpus[g]);
            free(node.gpus[g]);
            node.gpus[g] = NULL;
            node.timer_at[g] = 0;
        }
}

/* The end: every client gives back what it holds and answers recalls with
 * nothing; every slot that still asks must be granted. */
static void drain(void)
{
    for (int tick = 0; tick < DRAIN_TICKS; tick++) {
        bool asking = false;
        for (int k = 0; k < CLIENTS; k++) {
            struct fuzz_client *c = &node.clients[k];
            for (int i = 0; i < GS_MAX_DEVICES && c->open; i++) {
                struct sched_slot *slot = &c->slots[i];
                if (slot->holds) {
                    struct sched_event ev = {.type = SCHED_RELEASE, .slot = slot, .grant = slot->holds,
                                             .sent_ns = node.now};
                    step(&ev);
                }
                asking |= c->open && slot->wants;
            }
        }
        if (!asking)
            return;
        advance(5 * MS);
    }
    fail("a slot still waits for its grant after 20 s of nobody holding");
}

static void release_all(void)
{
    for (int g = 0; g < GPUS; g++)
        free(node.gpus[g]);
    free(node.s.actions);
    memset(&node, 0, sizeof node);
}

static void reset(void)
{
    release_all();
    node.now = 1000 * MS;
    sched_init(&node.s, GRACE_NS);
    if (!sched_actions_reserve(&node.s, 0))
        fail("out of memory");
    for (int t = 0; t < TENANTS; t++)
        configure(t, (uint8_t)(t == 1 ? 2 : t == 2 ? 32 : 0)); /* 1, 3:1, a 1 GiB cap */
}

static void teardown(void)
{
    for (int k = 0; k < CLIENTS; k++)
        close_client(&node.clients[k], false);
    for (int t = 0; t < TENANTS; t++)
        remove_tenant(t);
    sweep();
    for (int g = 0; g < GPUS; g++)
        if (node.gpus[g])
            fail("a GPU no one names is still in use");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reset();
    size_t at = 0;
    if (size > 0 && (data[at++] & 1)) /* a restarted server: leases wait for the recovery */
        node.s.recovering_until = node.now + 1500 * MS;
    while (at < size) {
        uint8_t what = data[at++];
        int index = (what >> 3) % CLIENTS;
        switch ((enum op)((what & 7) % OP_COUNT)) {
        case OP_MESSAGE: {
            if (at >= size)
                break;
            size_t len = data[at++];
            if (len > size - at)
                len = size - at;
            receive(index, data + at, len);
            at += len;
            advance(10000); /* 10 µs a message */
            break;
        }
        case OP_CLOSE:
            close_client(&node.clients[index], (what >> 7) & 1);
            break;
        case OP_TIME:
            advance((uint64_t)((what >> 3) + 1) * ((what >> 3) + 1) * 100000); /* 0.1 to 102 ms */
            break;
        case OP_PROCESS_GONE:
            if (!node.clients[index].open) {
                struct sched_event ev = {.type = SCHED_PROCESS_GONE, .pid = 100 + (uint32_t)index};
                step(&ev);
            }
            break;
        case OP_TENANT:
            configure((what >> 3) % TENANTS, at < size ? data[at++] : 0);
            break;
        case OP_TENANT_GONE:
            remove_tenant((what >> 3) % TENANTS);
            break;
        case OP_SWEEP:
            sweep();
            break;
        case OP_COUNT:
            break;
        }
    }
    drain();
    teardown();
    return 0;
}

#ifndef GS_LIBFUZZER
/* ---- replay and seeded mutation, without libFuzzer --------------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state += 0x9e3779b97f4a7c15ull; /* splitmix64 */
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define INPUT_MAX 8192

static uint64_t rng_chance_idle(void)
{
    /* idle claims: none, some, or a whole slice and more */
    switch (rng_next() % 4) {
    case 0:
        return rng_next() % (30 * MS);
    case 1:
        return UINT64_MAX - rng_next() % 4;
    default:
        return 0;
    }
}

static size_t read_file(const char *path, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* ---- the seed corpus (--write-corpus DIR) ------------------------------------------ */

struct recording {
    uint8_t bytes[INPUT_MAX];
    size_t len;
};

static void rec_byte(struct recording *r, uint8_t b)
{
    if (r->len < sizeof r->bytes)
        r->bytes[r->len++] = b;
}

static void rec_msg(struct recording *r, int client, const struct gs_msg *m)
{
    uint8_t frame[256];
    size_t n = gs_msg_encode(m, frame, sizeof frame);
    if (n == 0) {
        fprintf(stderr, "sched_fuzz: cannot encode a %s\n", gs_msg_type_str(m->type));
        exit(1);
    }
    rec_byte(r, (uint8_t)(client << 3 | OP_MESSAGE));
    rec_byte(r, (uint8_t)n);
    for (size_t i = 0; i < n; i++)
        rec_byte(r, frame[i]);
}

static void rec_hello(struct recording *r, int client)
{
    struct gs_msg m = {.type = GS_MSG_HELLO};
    m.u.hello.pid = 100 + (uint32_t)client;
    rec_msg(r, client, &m);
}

static void rec_device(struct recording *r, int client, int slot, int gpu)
{
    struct gs_msg m = {.type = GS_MSG_DEVICE};
    m.u.device.slot = (uint32_t)slot;
    m.u.device.uuid[0] = (uint8_t)(gpu + 1);
    rec_msg(r, client, &m);
}

static void rec_acquire(struct recording *r, int client, int slot)
{
    struct gs_msg m = {.type = GS_MSG_ACQUIRE};
    m.u.acquire.slot = (uint32_t)slot;
    rec_msg(r, client, &m);
}

static void rec_release(struct recording *r, int client, int slot, uint64_t grant, uint64_t idle_ns, bool more)
{
    struct gs_msg m = {.type = GS_MSG_RELEASE};
    m.u.release.slot = (uint32_t)slot;
    m.u.release.grant = grant;
    m.u.release.idle_ns = idle_ns;
    m.u.release.flags = more ? GS_RELEASE_MORE : 0;
    rec_msg(r, client, &m);
}

static void rec_lease(struct recording *r, int client, int slot, uint64_t id, uint64_t need, uint64_t want)
{
    struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
    m.u.lease.slot = (uint32_t)slot;
    m.u.lease.id = id;
    m.u.lease.need = need;
    m.u.lease.want = want;
    rec_msg(r, client, &m);
}

static void rec_mem(struct recording *r, int client, int type, int slot, uint64_t bytes)
{
    struct gs_msg m = {.type = type};
    m.u.mem.slot = (uint32_t)slot;
    m.u.mem.bytes = bytes;
    rec_msg(r, client, &m);
}

static void rec_query(struct recording *r, int client, int slot, uint64_t id)
{
    struct gs_msg m = {.type = GS_MSG_MEM_QUERY};
    m.u.mem_query.slot = (uint32_t)slot;
    m.u.mem_query.id = id;
    rec_msg(r, client, &m);
}

static void rec_op(struct recording *r, enum op op, int arg)
{
    rec_byte(r, (uint8_t)(arg << 3 | (int)op));
}

static void rec_write(const char *dir, const char *name, const struct recording *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(r->bytes, 1, r->len, f) != r->len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* Mutations: flip bytes, repeat a run, splice another file's tail, set
 * a small number, or insert a well-formed record (a message with random
 * fields, or an event), which keeps the records' framing. */
static void random_record(struct recording *r)
{
    int client = (int)(rng_next() % CLIENTS), slot = (int)(rng_next() % 3);
    uint64_t small = rng_next() % 16, bytes = (rng_next() % 64) << 24;
    switch (rng_next() % 12) {
    case 0:
        rec_hello(r, client);
        break;
    case 1:
        rec_device(r, client, slot, (int)(rng_next() % (GPUS + 1)));
        break;
    case 2:
    case 3:
        rec_acquire(r, client, slot);
        break;
    case 4:
    case 5:
        rec_release(r, client, slot, small, rng_chance_idle(), rng_next() % 2);
        break;
    case 6:
        rec_lease(r, client, slot, small, bytes, bytes + ((rng_next() % 8) << 24));
        break;
    case 7:
        rec_mem(r, client, rng_next() % 2 ? GS_MSG_MEM_FREE : GS_MSG_MEM_DECLARE, slot, bytes);
        break;
    case 8:
        rec_query(r, client, slot, small);
        break;
    case 9:
        rec_op(r, OP_TIME, (int)(rng_next() % 32));
        break;
    case 10:
        rec_op(r, OP_CLOSE, (int)(rng_next() % 32));
        break;
    default:
        rec_op(r, (enum op)(OP_PROCESS_GONE + rng_next() % 4), (int)(rng_next() % 32));
        if (rng_next() % 2)
            rec_byte(r, (uint8_t)rng_next());
        break;
    }
}

static size_t mutate(uint8_t *buf, size_t len, const uint8_t *other, size_t other_len)
{
    static struct recording insert;
    int rounds = 1 + (int)(rng_next() % 8);
    for (int r = 0; r < rounds && len > 0; r++) {
        size_t i = rng_next() % len;
        switch (rng_next() % 7) {
        case 0:
            buf[i] ^= (uint8_t)(1u << (rng_next() % 8));
            break;
        case 1:
            buf[i] = (uint8_t)rng_next();
            break;
        case 2: { /* repeat a run */
            size_t n = 1 + rng_next() % 64;
            if (i + n > len)
                n = len - i;
            if (len + n <= INPUT_MAX) {
                memmove(buf + i + n, buf + i, len - i);
                len += n;
            }
            break;
        }
        case 3: { /* splice the other's tail */
            size_t from = other_len ? rng_next() % other_len : 0;
            size_t n = other_len - from;
            if (i + n > INPUT_MAX)
                n = INPUT_MAX - i;
            memcpy(buf + i, other + from, n);
            len = i + n;
            break;
        }
        case 4: /* a small number in a field */
            buf[i] = (uint8_t)(rng_next() % 4);
            break;
        default: { /* records at the end (where the framing is sure to hold) */
            insert.len = 0;
            int n = 1 + (int)(rng_next() % 12);
            for (int k = 0; k < n; k++)
                random_record(&insert);
            if (len + insert.len <= INPUT_MAX) {
                memcpy(buf + len, insert.bytes, insert.len);
                len += insert.len;
            }
            break;
        }
        }
    }
    return len;
}

/* Clients 0 and 3 are tenant alpha's, 1 and 4 beta's, 2 and 5 gamma's. */
static void write_corpus(const char *dir)
{
    static struct recording r;

    /* Two tenants take turns on one GPU, releasing with more to do. */
    memset(&r, 0, sizeof r);
    rec_byte(&r, 0);
    for (int k = 0; k < 2; k++) {
        rec_hello(&r, k);
        rec_device(&r, k, 0, 0);
        rec_acquire(&r, k, 0);
    }
    for (uint64_t g = 1; g <= 12; g++) {
        rec_op(&r, OP_TIME, 12);
        rec_release(&r, (int)(g + 1) % 2, 0, g, 0, true);
    }
    rec_write(dir, "turns", &r);

    /* A tenant of several processes on two GPUs: a gang. */
    memset(&r, 0, sizeof r);
    rec_byte(&r, 0);
    for (int k = 0; k < 6; k += 3) {
        rec_hello(&r, k);
        rec_device(&r, k, 0, 0);
        rec_device(&r, k, 1, 1);
        rec_acquire(&r, k, 0);
        rec_acquire(&r, k, 1);
    }
    rec_hello(&r, 1);
    rec_device(&r, 1, 0, 1);
    rec_acquire(&r, 1, 0);
    for (uint64_t g = 1; g <= 8; g++) {
        rec_op(&r, OP_TIME, 10);
        rec_release(&r, 0, 0, g, 0, true);
        rec_release(&r, 3, 1, g, 0, true);
        rec_release(&r, 1, 0, g, 0, true);
    }
    rec_op(&r, OP_CLOSE, 3); /* a rank exits */
    rec_op(&r, OP_TIME, 20);
    rec_write(dir, "gang", &r);

    /* Leases under a cap of 1 GiB: headroom, recalls, frees, a storm. */
    memset(&r, 0, sizeof r);
    rec_byte(&r, 0);
    for (int k = 2; k < 6; k += 3) {
        rec_hello(&r, k);
        rec_device(&r, k, 0, 0);
    }
    for (uint64_t id = 1; id <= 10; id++) {
        int k = id % 2 ? 2 : 5;
        rec_lease(&r, k, 0, id, (uint64_t)id << 26, 256ull << 20);
        if (id % 3 == 0)
            rec_mem(&r, k, GS_MSG_MEM_FREE, 0, 64ull << 20);
        rec_query(&r, k, 0, 100 + id);
    }
    rec_lease(&r, 2, 0, 50, 2ull << 30, 0); /* more than the cap */
    rec_op(&r, OP_CLOSE, 5 + 18);          /* client 5; 16 and above: lives on */
    rec_hello(&r, 5);
    rec_device(&r, 5, 0, 0);
    rec_mem(&r, 5, GS_MSG_MEM_DECLARE, 0, 128ull << 20);
    rec_op(&r, OP_CLOSE, 2);
    rec_op(&r, OP_PROCESS_GONE, 2);
    rec_write(dir, "leases", &r);

    /* A restarted server: processes declare what they hold; leases wait. */
    memset(&r, 0, sizeof r);
    rec_byte(&r, 1);
    rec_hello(&r, 2);
    rec_device(&r, 2, 0, 0);
    rec_lease(&r, 2, 0, 1, 64ull << 20, 0);
    rec_hello(&r, 5);
    rec_device(&r, 5, 0, 0);
    rec_mem(&r, 5, GS_MSG_MEM_DECLARE, 0, 900ull << 20);
    rec_op(&r, OP_TIME, 31);
    rec_op(&r, OP_TIME, 31);
    rec_write(dir, "recovery", &r);

    /* Abuse: a release of no grant, idle claimed for whole slices, stale
     * ids, a foreign GPU, re-declaring a slot in use, a second HELLO,
     * tenants changed and removed, an idle GPU forgotten. */
    memset(&r, 0, sizeof r);
    rec_byte(&r, 0);
    rec_hello(&r, 0);
    rec_device(&r, 0, 0, 0);
    rec_release(&r, 0, 0, 99, 0, false);
    rec_hello(&r, 1);
    rec_device(&r, 1, 0, 0);
    rec_acquire(&r, 1, 0);
    rec_acquire(&r, 0, 0);
    for (uint64_t g = 1; g <= 6; g++) {
        rec_release(&r, 1, 0, g, 1000000000000ull, true);
        rec_release(&r, 0, 0, g - 1, 20 * MS, true);
        rec_op(&r, OP_TIME, 4);
    }
    rec_device(&r, 1, 0, 1);
    rec_hello(&r, 4);
    rec_device(&r, 4, 3, 7);
    rec_hello(&r, 3);
    rec_hello(&r, 3);
    rec_op(&r, OP_TENANT, 1);
    rec_byte(&r, 8 | 64 | 3);
    rec_op(&r, OP_TIME, 30);
    rec_op(&r, OP_TENANT_GONE, 0);
    rec_op(&r, OP_SWEEP, 0);
    rec_op(&r, OP_TENANT, 0);
    rec_byte(&r, 1);
    rec_hello(&r, 0);
    rec_device(&r, 0, 0, 1);
    rec_acquire(&r, 0, 0);
    rec_write(dir, "abuse", &r);
}

static void print_counts(void)
{
    static const char *names[] = {"grant", "revoke", "timer", "leased", "mem-result", "recall",
                                  "drop", "late", "over-cap", "wake"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        printf(" %s %llu", names[i], (unsigned long long)action_counts[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    static uint8_t buf[INPUT_MAX], other[INPUT_MAX];
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) {
        write_corpus(argv[2]);
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "--random") == 0) {
        long runs = atol(argv[2]);
        rng_state = strtoull(argv[3], NULL, 10);
        int files = argc - 4;
        if (files <= 0 || runs <= 0) {
            fprintf(stderr, "usage: sched_fuzz --random RUNS SEED FILE...\n");
            return 2;
        }
        for (long r = 0; r < runs; r++) {
            size_t len = read_file(argv[4 + rng_next() % (uint64_t)files], buf, sizeof buf);
            size_t other_len = read_file(argv[4 + rng_next() % (uint64_t)files], other, sizeof other);
            len = mutate(buf, len, other, other_len);
            LLVMFuzzerTestOneInput(buf, len);
        }
        release_all();
        printf("%ld mutated inputs ran with every check holding; actions:", runs);
        print_counts();
        return 0;
    }
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--trace") == 0) {
        tracing = true;
        first = 2;
    }
    for (int i = first; i < argc; i++) {
        size_t n = read_file(argv[i], buf, sizeof buf);
        LLVMFuzzerTestOneInput(buf, n);
    }
    release_all();
    printf("%d inputs replayed with every check holding; actions:", argc - first);
    print_counts();
    return 0;
}
#endif
