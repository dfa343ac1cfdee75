/*
 * Fuzz target for the scheduler's lease and slice paths: the bytes become
 * a node's history (client messages, closes, reconnections, time passing,
 * tenants changed, removed and added again, processes exiting, idle GPUs
 * forgotten), run on the deterministic simulation's node (test/sim/sim.h):
 * the server's own glue (devices.c admits the GPUs, dispatch.c carries
 * out the actions and keeps the timers, sched_wire.c translates messages
 * and actions) and scheduler, unchanged, on a virtual clock, without
 * transport delays (world.exact), so that an input replays exactly.
 *
 * The node has two GPUs, three tenants and six clients: client k is a
 * process of tenant k % 3 that the input drives (APP_DRIVEN). Its
 * messages are decoded by the protocol's own decoder and sent to the
 * simulated server on its connection (for a datagram that does not
 * decode, the server drops the client, as clients.c does); once its
 * connection is gone it connects again at its next message. A close, a
 * process's exit, a tenant's change, removal or return, a sweep of unused
 * GPUs and the passing of time (the server's timers fire) are the
 * simulated server's (sim_server.c, sim_driver.c).
 *
 * After every event the simulation checks what must hold whatever clients
 * send (test/sim/sim_check_sched.c, on this node: world.check_sched; and
 * sim_check.c):
 *   - no action lost for want of room (dispatch.c logs it as an error);
 *   - a GRANT goes to an open client's declared slot that holds it;
 *   - only the holder's tenant holds a GPU's slice, and the GPU's count of
 *     holders is the slots that hold its grant;
 *   - each tenant's memory count on a GPU is exactly what its slots hold
 *     plus the counts kept for processes that lost their connection;
 *   - the counts of waiting slots agree, and virtual times are finite;
 *   - a lease granted bytes leaves the tenant within its cap;
 *   - no GPU is held for a tenant none of whose processes names it, and
 *     GRANTs for a new bound alone keep their distance;
 * and this file that a removed tenant keeps no entry on any GPU. The
 * simulation's checks that assume honest shims (memory counts equal to
 * what the processes count, launches inside slices) leave these tenants
 * out: they are hostile (tenant_plan.hostile).
 * At the end every client gives back what it holds and time runs on: each
 * slot still waiting must be granted (no one is starved); then every
 * process exits, every tenant is removed, and a sweep must forget every
 * GPU. A broken invariant aborts, with what broke.
 *
 * Input: a first byte (bit 0: the server has restarted, and leases wait
 * for the recovery), then records of one byte (what happens, in its low
 * three bits, and to which client or tenant, above) and, for a message,
 * one length byte and that many bytes of a datagram.
 *
 * Built as a libFuzzer target (scripts/fuzz, scripts/explore), and with a
 * main() that replays the files named (the corpus; --trace also prints
 * the simulation's trace: what each client does and receives, the
 * server's grants, revocations, drops and log, the GPUs after each record),
 * or with --random N SEED runs N inputs made by mutating the corpus files
 * with a seeded generator (the meson test does both); --write-corpus DIR
 * writes the seed corpus (test/sched/sched_corpus).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define CLIENTS 6
#define TENANTS 3
#define GPUS 2
#define START_NS (1000 * MS)  /* the history's first record */
#define DRAIN_TICKS 4000      /* of 5 ms: 20 s for every waiting slot to be granted */

enum op { OP_MESSAGE, OP_CLOSE, OP_TIME, OP_PROCESS_GONE, OP_TENANT, OP_TENANT_GONE, OP_SWEEP, OP_COUNT };

/* The node an input runs on: made by the first input, reset by each
 * (world_reuse); owned by the fuzzer's single thread. */
static struct world *node;
/* --trace: set once from the command line (replay only). */
static bool tracing;
/* What the clients received over all inputs, by message type, to show
 * what the inputs reach (client_received); the fuzzer's thread's. */
#define MSG_TYPES 32
static uint64_t received[MSG_TYPES];

static const char *tenant_names[TENANTS] = {"alpha", "beta", "gamma"};

/* A broken invariant (the simulation's, or one below): libFuzzer needs a
 * crash. */
static void stop_if_failed(void)
{
    if (!node->failed)
        return;
    fprintf(stderr, "sched_fuzz: %s\n", node->failure);
    abort();
}

/* Everything due by `until` happens, what it causes included (the
 * simulation checks the server after every event, and after a step that
 * came of none: a tenant changed or removed, a sweep). */
static void run_until(uint64_t until)
{
    world_advance(node, until);
    stop_if_failed();
}

/* ---- tracing ---------------------------------------------------------------------- */

static void trace_message(int k, const char *what, const struct gs_msg *m)
{
    const char *type = gs_msg_type_str(m->type);
    switch (m->type) {
    case GS_MSG_DEVICE:
        trace(node, "client %d %s %s slot %u GPU %d", k, what, type, m->u.device.slot, m->u.device.uuid[0] - 1);
        break;
    case GS_MSG_ACQUIRE:
        trace(node, "client %d %s %s slot %u", k, what, type, m->u.acquire.slot);
        break;
    case GS_MSG_RELEASE:
        trace(node, "client %d %s %s slot %u grant %llu idle %llu%s", k, what, type, m->u.release.slot,
              (unsigned long long)m->u.release.grant, (unsigned long long)m->u.release.idle_ns,
              (m->u.release.flags & GS_RELEASE_MORE) ? " more" : "");
        break;
    case GS_MSG_MEM_LEASE:
        trace(node, "client %d %s %s slot %u id %llu need %llu want %llu", k, what, type, m->u.lease.slot,
              (unsigned long long)m->u.lease.id, (unsigned long long)m->u.lease.need,
              (unsigned long long)m->u.lease.want);
        break;
    case GS_MSG_MEM_FREE:
    case GS_MSG_MEM_DECLARE:
        trace(node, "client %d %s %s slot %u bytes %llu", k, what, type, m->u.mem.slot,
              (unsigned long long)m->u.mem.bytes);
        break;
    case GS_MSG_MEM_LEASED:
        trace(node, "client %d %s %s id %llu status %u granted %llu cap %llu used %llu", k, what, type,
              (unsigned long long)m->u.leased.id, m->u.leased.status, (unsigned long long)m->u.leased.granted,
              (unsigned long long)m->u.leased.cap, (unsigned long long)m->u.leased.used);
        break;
    case GS_MSG_MEM_RECALL:
        trace(node, "client %d %s %s slot %u", k, what, type, m->u.recall.slot);
        break;
    case GS_MSG_ERROR:
        trace(node, "client %d %s %s: %s", k, what, type, m->u.error.reason);
        break;
    default:
        trace(node, "client %d %s %s", k, what, type);
        break;
    }
}

/* After each record: the server's GPUs. */
static void trace_gpus(void)
{
    for (const struct device *d = server_sched.devices; d; d = d->next) {
        char line[1024];
        int n = snprintf(line, sizeof line, "GPU %d state %d grant %llu holder %s holders %u timer %.3f:",
                         gpu_of_device(node, d), (int)d->state, (unsigned long long)d->grant,
                         d->holder ? d->holder->tenant->name : "-", d->holders, (double)d->timer_at / 1e6);
        for (size_t k = 0; k < d->ntenants && n > 0 && (size_t)n < sizeof line; k++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s(w%u%s elig %.3f vt %.3f mem %llu)",
                          d->tenants[k].tenant->name, d->tenants[k].waiting, d->tenants[k].active ? " active" : "",
                          (double)d->tenants[k].eligible_at / 1e6, d->tenants[k].vtime / 1e6,
                          (unsigned long long)d->tenants[k].mem_used);
        trace(node, "  %s", line);
    }
}

/* ---- the clients -------------------------------------------------------------------- */

/* What a client receives: counted, and traced; it answers nothing. */
static void client_received(struct world *w, struct sim_proc *p, const struct gs_msg *m)
{
    (void)w;
    if ((unsigned)m->type < MSG_TYPES)
        received[m->type]++;
    if (tracing)
        trace_message(p->id, "receives", m);
}

/* Client k's connection, open at the server; -1 if it has none. */
static int conn_of(int k)
{
    const struct sim_proc *p = &node->proc[k];
    return p->conn >= 0 && node->conn[p->conn].open && !node->conn[p->conn].closing ? p->conn : -1;
}

static void op_message(int k, const uint8_t *bytes, size_t len)
{
    struct sim_proc *p = &node->proc[k];
    if (conn_of(k) < 0) { /* a connection again: the process's next one */
        if (node->server.tenant_gone[p->tenant])
            return; /* (its tenant's socket is gone) */
        p->alive = true; /* (maybe a new process of the same pid) */
        p->conn = -1;    /* (its last connection is no one's: its place may take the next) */
        p->conn = server_connect(node, k);
        if (p->conn < 0) {
            fail(node, "client %d cannot connect", k);
            stop_if_failed();
        }
        trace(node, "client %d connects: conn %d", k, p->conn);
    }
    struct gs_msg m;
    enum gs_decode_result r = gs_msg_decode(bytes, len, &m);
    if (r != GS_DECODE_OK) { /* clients.c drops a client whose datagram does not decode */
        trace(node, "client %d sends %zu bytes that do not decode", k, len);
        drop_conn(node, p->conn, gs_decode_result_str(r));
        run_until(node->now);
        return;
    }
    /* GPU g of the node is the UUID whose first byte is g + 1: the rest is
     * the simulated GPU's (the only UUIDs the node's access check lets in) */
    if (m.type == GS_MSG_DEVICE && m.u.device.uuid[0] >= 1 && m.u.device.uuid[0] <= GPUS) {
        memset(m.u.device.uuid + 1, 0, sizeof m.u.device.uuid - 1);
        memcpy(m.u.device.uuid + 1, "simulated-gpu", 13);
    }
    if (tracing)
        trace_message(k, "sends", &m);
    send_to_server(node, p->conn, &m);
    run_until(node->now);
}

/* Its process closes the connection and lives on (the server keeps what
 * it counted), or exits (the server's kill(pid, 0) finds it gone). */
static void op_close(int k, bool lives_on)
{
    int conn = conn_of(k);
    if (conn < 0)
        return;
    struct sim_proc *p = &node->proc[k];
    trace(node, "client %d %s", k, lives_on ? "closes its connection and lives on" : "exits");
    if (!lives_on) {
        p->alive = false;
        p->died_at = node->now;
    }
    close_from_proc(node, conn);
    p->conn = -1;
    run_until(node->now);
}

/* A client without a connection: its process is gone, and the server's
 * check of the counts it keeps for processes without one finds it so. */
static void op_process_gone(int k)
{
    if (conn_of(k) >= 0)
        return;
    struct sim_proc *p = &node->proc[k];
    trace(node, "client %d's process is gone", k);
    p->alive = false;
    post(node, node->now, EV_PROCESS_GONE, k, 0);
    run_until(node->now);
}

/* ---- the tenants -------------------------------------------------------------------- */

/* A tenant's configuration from one byte: its share, a limit, a short
 * quantum, a cap. */
static struct tenant_config config_of(uint8_t bits)
{
    return (struct tenant_config){
        .share = (double)(1 + (bits & 7)),
        .limit = (bits & 8) ? 0.25 + 0.25 * (double)((bits >> 6) & 3) : 1.0,
        .quantum_ns = (bits & 16) ? 2 * MS : 20 * MS,
        .memory = (bits & 32) ? (uint64_t)(1 + ((bits >> 6) & 3)) << 30 : 0,
        .gang = GANG_AUTO,
    };
}

/* Tenant t's file says `bits` now: changed, or made again if removed. */
static void op_tenant(int t, uint8_t bits)
{
    node->tenant[t].config = config_of(bits);
    trace(node, "tenant %s: share %g limit %g quantum %.0f ms cap %llu", tenant_names[t], node->tenant[t].config.share,
          node->tenant[t].config.limit, (double)node->tenant[t].config.quantum_ns / 1e6,
          (unsigned long long)node->tenant[t].config.memory);
    if (node->server.tenant_gone[t])
        server_tenant_added(node, t);
    else
        server_tenant_changed(node, t);
    run_until(node->now);
}

static void op_tenant_gone(int t)
{
    if (node->server.tenant_gone[t])
        return;
    server_tenant_removed(node, t);
    for (const struct device *d = server_sched.devices; d; d = d->next)
        if (sched_entry_find(d, &node->server.tenants[t].sched))
            fail(node, "removed tenant %s keeps an entry on GPU %d", tenant_names[t], gpu_of_device(node, d));
    run_until(node->now);
}

/* ---- an input ------------------------------------------------------------------------ */

static void node_start(bool restarted)
{
    unsigned flags = tracing ? SIM_TRACE : 0;
    if (!node) {
        node = malloc(sizeof *node);
        if (!node) {
            perror("sched_fuzz: the node");
            abort();
        }
        world_reset(node, 1, flags, UINT64_MAX);
    } else {
        world_reuse(node, 1, flags, UINT64_MAX);
    }
    /* a sweep forgets a GPU as soon as nobody uses it (--device-linger-ms 0) */
    options.device_linger_ns = 0;
    node->exact = true;
    node->check_sched = true;
    node->driven_receive = client_received;
    node->ngpus = GPUS;
    for (int t = 0; t < TENANTS; t++) { /* a share of 1, of 3 (3:1 beside alpha), a cap of 1 GiB */
        struct tenant_plan *tp = scenario_tenant(node, 1);
        snprintf(tp->name, sizeof tp->name, "%s", tenant_names[t]);
        tp->config = config_of((uint8_t)(t == 1 ? 2 : t == 2 ? 32 : 0));
        tp->hostile = true;
    }
    for (int k = 0; k < CLIENTS; k++)
        scenario_proc(node, k % TENANTS, APP_DRIVEN)->ngpus = 0; /* (its messages name its GPUs) */
    world_start(node);
    run_until(START_NS);
    if (restarted) { /* leases wait for the recovery (the processes of the last server declare first) */
        server_stop(node);
        server_start(node);
        run_until(node->now);
    }
}

/* The end: every client gives back what it holds and answers recalls with
 * nothing; every slot that still asks must be granted. */
static void drain(void)
{
    for (int tick = 0; tick < DRAIN_TICKS; tick++) {
        bool asking = false;
        for (int k = 0; k < CLIENTS; k++)
            for (uint32_t i = 0; i < GS_MAX_DEVICES && conn_of(k) >= 0; i++) {
                const struct sched_slot *slot = &node->conn[conn_of(k)].client.slots[i];
                if (slot->holds) {
                    struct gs_msg m = {.type = GS_MSG_RELEASE};
                    m.u.release.slot = i;
                    m.u.release.grant = slot->holds;
                    if (tracing)
                        trace_message(k, "gives back", &m);
                    send_to_server(node, conn_of(k), &m);
                    run_until(node->now);
                }
                asking |= conn_of(k) >= 0 && slot->wants;
            }
        if (!asking)
            return;
        run_until(node->now + 5 * MS);
    }
    fail(node, "a slot still waits for its grant after 20 s of nobody holding");
    stop_if_failed();
}

/* Every process exits, every tenant goes: nothing names a GPU, and the
 * sweep forgets them all. */
static void node_finish(void)
{
    for (int k = 0; k < CLIENTS; k++)
        op_close(k, false);
    for (int t = 0; t < TENANTS; t++)
        op_tenant_gone(t);
    server_sweep(node);
    if (server_sched.devices)
        fail(node, "GPU %d, which nobody names, is still in use", gpu_of_device(node, server_sched.devices));
    stop_if_failed();
    node->end = node->now;
    world_finish(node);
    stop_if_failed();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t at = 0;
    node_start(size > 0 && (data[at++] & 1));
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
            op_message(index, data + at, len);
            at += len;
            run_until(node->now + 10 * US); /* 10 µs a message */
            break;
        }
        case OP_CLOSE:
            op_close(index, (what >> 7) & 1);
            break;
        case OP_TIME: /* 0.1 to 102 ms */
            run_until(node->now + (uint64_t)((what >> 3) + 1) * ((what >> 3) + 1) * 100 * US);
            break;
        case OP_PROCESS_GONE:
            op_process_gone(index);
            break;
        case OP_TENANT:
            op_tenant((what >> 3) % TENANTS, at < size ? data[at++] : 0);
            break;
        case OP_TENANT_GONE:
            op_tenant_gone((what >> 3) % TENANTS);
            break;
        case OP_SWEEP:
            trace(node, "the server sweeps the GPUs nobody uses");
            server_sweep(node);
            run_until(node->now);
            break;
        case OP_COUNT:
            break;
        }
        if (tracing)
            trace_gpus();
    }
    drain();
    node_finish();
    return 0;
}

#ifndef GS_LIBFUZZER
/* ---- replay and seeded mutation, without libFuzzer --------------------------------- */

#include "fuzz_replay.h"

/* The mutations' generator, seeded once from the command line. */
static uint64_t seeded_state;

static uint64_t seeded_next(void)
{
    seeded_state += 0x9e3779b97f4a7c15ull; /* splitmix64 */
    uint64_t z = seeded_state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define INPUT_MAX 8192

static uint64_t seeded_idle(void)
{
    /* idle claims: none, some, or a whole slice and more */
    switch (seeded_next() % 4) {
    case 0:
        return seeded_next() % (30 * MS);
    case 1:
        return UINT64_MAX - seeded_next() % 4;
    default:
        return 0;
    }
}

static size_t read_file(const char *path, uint8_t *buf, size_t cap)
{
    long n = fuzz_replay_read(path, buf, cap);
    if (n < 0)
        exit(1);
    return (size_t)n;
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

/* (want at least need: the decoder drops a lease that wants less) */
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
    int client = (int)(seeded_next() % CLIENTS), slot = (int)(seeded_next() % 3);
    uint64_t small = seeded_next() % 16, bytes = (seeded_next() % 64) << 24;
    switch (seeded_next() % 12) {
    case 0:
        rec_hello(r, client);
        break;
    case 1:
        rec_device(r, client, slot, (int)(seeded_next() % (GPUS + 1)));
        break;
    case 2:
    case 3:
        rec_acquire(r, client, slot);
        break;
    case 4:
    case 5:
        rec_release(r, client, slot, small, seeded_idle(), seeded_next() % 2);
        break;
    case 6:
        rec_lease(r, client, slot, small, bytes, bytes + ((seeded_next() % 8) << 24));
        break;
    case 7:
        rec_mem(r, client, seeded_next() % 2 ? GS_MSG_MEM_FREE : GS_MSG_MEM_DECLARE, slot, bytes);
        break;
    case 8:
        rec_query(r, client, slot, small);
        break;
    case 9:
        rec_op(r, OP_TIME, (int)(seeded_next() % 32));
        break;
    case 10:
        rec_op(r, OP_CLOSE, (int)(seeded_next() % 32));
        break;
    default:
        rec_op(r, (enum op)(OP_PROCESS_GONE + seeded_next() % 4), (int)(seeded_next() % 32));
        if (seeded_next() % 2)
            rec_byte(r, (uint8_t)seeded_next());
        break;
    }
}

static size_t mutate(uint8_t *buf, size_t len, const uint8_t *other, size_t other_len)
{
    static struct recording insert;
    int rounds = 1 + (int)(seeded_next() % 8);
    for (int r = 0; r < rounds && len > 0; r++) {
        size_t i = seeded_next() % len;
        switch (seeded_next() % 7) {
        case 0:
            buf[i] ^= (uint8_t)(1u << (seeded_next() % 8));
            break;
        case 1:
            buf[i] = (uint8_t)seeded_next();
            break;
        case 2: { /* repeat a run */
            size_t n = 1 + seeded_next() % 64;
            if (i + n > len)
                n = len - i;
            if (len + n <= INPUT_MAX) {
                memmove(buf + i + n, buf + i, len - i);
                len += n;
            }
            break;
        }
        case 3: { /* splice the other's tail */
            size_t from = other_len ? seeded_next() % other_len : 0;
            size_t n = other_len - from;
            if (i + n > INPUT_MAX)
                n = INPUT_MAX - i;
            memcpy(buf + i, other + from, n);
            len = i + n;
            break;
        }
        case 4: /* a small number in a field */
            buf[i] = (uint8_t)(seeded_next() % 4);
            break;
        default: { /* records at the end (where the framing is sure to hold) */
            insert.len = 0;
            int n = 1 + (int)(seeded_next() % 12);
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
        rec_lease(&r, k, 0, id, (uint64_t)id << 26, ((uint64_t)id << 26) + (256ull << 20));
        if (id % 3 == 0)
            rec_mem(&r, k, GS_MSG_MEM_FREE, 0, 64ull << 20);
        rec_query(&r, k, 0, 100 + id);
    }
    rec_lease(&r, 2, 0, 50, 2ull << 30, 2ull << 30); /* more than the cap */
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
    rec_lease(&r, 2, 0, 1, 64ull << 20, 64ull << 20);
    rec_hello(&r, 5);
    rec_device(&r, 5, 0, 0);
    rec_mem(&r, 5, GS_MSG_MEM_DECLARE, 0, 900ull << 20);
    for (int i = 0; i < 16; i++) /* past the recovery's 1.5 s: the lease is answered */
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
    static const int types[] = {GS_MSG_GRANT, GS_MSG_REVOKE, GS_MSG_MEM_LEASED, GS_MSG_MEM_RESULT, GS_MSG_MEM_RECALL,
                                GS_MSG_ERROR};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        printf(" %s %llu", gs_msg_type_str(types[i]), (unsigned long long)received[types[i]]);
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
        seeded_state = strtoull(argv[3], NULL, 10);
        int files = argc - 4;
        if (files <= 0 || runs <= 0) {
            fprintf(stderr, "usage: sched_fuzz --random RUNS SEED FILE...\n");
            return 2;
        }
        for (long r = 0; r < runs; r++) {
            size_t len = read_file(argv[4 + seeded_next() % (uint64_t)files], buf, sizeof buf);
            size_t other_len = read_file(argv[4 + seeded_next() % (uint64_t)files], other, sizeof other);
            len = mutate(buf, len, other, other_len);
            LLVMFuzzerTestOneInput(buf, len);
        }
        free(node);
        printf("%ld mutated inputs ran with every check holding; the clients received:", runs);
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
    free(node);
    printf("%d inputs replayed with every check holding; the clients received:", argc - first);
    print_counts();
    return 0;
}
#endif
