/*
 * The lease ledger (shim/gs_lease.c, shim/gs_reserve.c) against a
 * reconnection at the worst moment, scripted: the shim's locks, its
 * connection and the server's count are stand-ins of this file's own. When
 * a thread of the ledger takes the gate lock, a WELCOME may be handled just
 * before it gets it (the gate thread's or a launcher's, gs_gate_thread.c):
 * the server starts afresh from the process's declaration, gs_lease_count.
 * Whatever the ledger sends after that must leave the server's count equal
 * to the process's own.
 */
#include "gs_dev.h"
#include "gs_conn.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_reserve.h"
#include "gs_rpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- stand-ins for the rest of the shim ----------------------------------------- */

static struct gs_dev devs[GS_MAX_DEVICES];
struct gs_dev *gs_devs = devs;
int gs_log_threshold = GS_LOG_ERROR;
pthread_cond_t gs_gate_cv = PTHREAD_COND_INITIALIZER;

static uint64_t server_count;  /* the server's count for this process on device 0 */
static int reconnect_on_gate;  /* the gate lock is taken this many times more before a WELCOME comes */
static bool reconnect_on_lock;  /* a WELCOME comes before the next lock is taken */
static bool server_up = true;   /* false: the server is unreachable (open policy) */
static bool welcomed = true;
static bool held[GS_LOCK_COUNT];

/* A reconnection, as gs_gate_thread.c handles its WELCOME (gate lock held):
 * the server's count is what the process declares. */
static void welcome_locked(void)
{
    server_up = welcomed = true;
    server_count = gs_lease_count(&gs_devs[0]);
}

void gs_lock(enum gs_lock lock)
{
    for (int i = lock; i < GS_LOCK_COUNT; i++)
        if (held[i]) {
            fprintf(stderr, "FAIL: lock %d taken while holding lock %d\n", lock, i);
            exit(1);
        }
    if ((lock == GS_LOCK_GATE && reconnect_on_gate && --reconnect_on_gate == 0) ||
        ((lock == GS_LOCK_GATE || lock == GS_LOCK_LEASE) && reconnect_on_lock)) {
        reconnect_on_lock = false;
        held[GS_LOCK_GATE] = true; /* the other thread's, for the WELCOME */
        welcome_locked();
        held[GS_LOCK_GATE] = false;
    }
    held[lock] = true;
}

void gs_unlock(enum gs_lock lock)
{
    held[lock] = false;
}

void gs_log(enum gs_log_level level, const char *fmt, ...)
{
    (void)level;
    (void)fmt;
}

void gs_conn_wake_gate_thread(void)
{
}

bool gs_conn_connected_locked(void)
{
    return welcomed;
}

/* The server: MEM_FREE lowers the count, MEM_LEASE raises it (no cap). */
int gs_conn_send_about_locked(struct gs_dev *d, const struct gs_msg *m)
{
    if (!held[GS_LOCK_GATE] || d != &gs_devs[0]) {
        fprintf(stderr, "FAIL: a message sent without the gate lock, or about another device\n");
        exit(1);
    }
    if (m->type == GS_MSG_MEM_FREE)
        server_count -= m->u.mem.bytes > server_count ? server_count : m->u.mem.bytes;
    else if (m->type == GS_MSG_MEM_LEASE)
        server_count += m->u.lease.need;
    return 0;
}

/* A MEM_LEASE and its answer, as gs_rpc.c and the gate thread handle them:
 * the answer arrives under the gate lock, where the gate thread counts the
 * grant (gs_lease_granted); the caller sees it after the lock is dropped,
 * and a WELCOME may come in between (reconnect_after_answer). */
static bool reconnect_after_answer;

int gs_rpc_lease(struct gs_dev *d, uint64_t need, uint64_t want, struct gs_msg_mem_leased *out)
{
    (void)need;
    gs_lock(GS_LOCK_GATE);
    if (!server_up) { /* the open policy: the caller goes on without it */
        welcomed = false;
        gs_unlock(GS_LOCK_GATE);
        reconnect_on_lock = reconnect_after_answer;
        reconnect_after_answer = false;
        return -1;
    }
    server_count += want;
    *out = (struct gs_msg_mem_leased){.id = 1, .status = GS_LEASE_GRANTED, .granted = want};
    gs_lease_granted(d, want); /* the gate thread's MEM_LEASED */
    gs_unlock(GS_LOCK_GATE);
    if (reconnect_after_answer) {
        reconnect_after_answer = false;
        gs_lock(GS_LOCK_GATE);
        welcome_locked();
        gs_unlock(GS_LOCK_GATE);
    }
    return 0;
}

/* ---- the checks ------------------------------------------------------------------- */

static int failures;

static void expect_counts_agree(const char *what)
{
    uint64_t mine = gs_lease_count(&gs_devs[0]);
    if (mine != server_count) {
        fprintf(stderr, "FAIL: %s: the process counts %llu bytes, the server %llu\n", what,
                (unsigned long long)mine, (unsigned long long)server_count);
        failures++;
    } else {
        printf("ok: %s (%llu bytes)\n", what, (unsigned long long)mine);
    }
}

static void start(void)
{
    gs_lease_after_fork_child(); /* an empty ledger */
    server_count = 0;
    reconnect_on_gate = 0;
    reconnect_after_answer = false;
    reconnect_on_lock = false;
    server_up = welcomed = true;
}

#define MB (1ull << 20)

int main(void)
{
    gs_devs[0].used = true;
    gs_devs[0].slot = 0;

    /* A free that leaves headroom beyond four chunks gives it back: a
     * WELCOME between the ledger's change and its MEM_FREE. */
    start();
    if (gs_reserve(&gs_devs[0], 4 * MB, "cuMemAlloc", 4 * MB) != CUDA_SUCCESS) /* a chunk of 8 MB */
        return 1;
    gs_lease_take_anyway(&gs_devs[0], 100 * MB);
    expect_counts_agree("after a lease and memory the driver took");
    reconnect_on_gate = 1;
    gs_lease_give(&gs_devs[0], 100 * MB);
    if (gs_lease_headroom(&gs_devs[0]) != 8 * MB) {
        fprintf(stderr, "FAIL: a free kept %llu bytes of headroom, not a chunk\n",
                (unsigned long long)gs_lease_headroom(&gs_devs[0]));
        failures++;
    }
    expect_counts_agree("a free's MEM_FREE after a reconnection");

    /* The idle tick gives all headroom back, the same way. */
    start();
    if (gs_reserve(&gs_devs[0], 4 * MB, "cuMemAlloc", 4 * MB) != CUDA_SUCCESS)
        return 1;
    gs_lease_give_idle(); /* sees the allocation: keeps the headroom */
    reconnect_on_gate = 1;
    gs_lease_give_idle();
    expect_counts_agree("the idle tick's MEM_FREE after a reconnection");

    /* Memory the driver took beyond the headroom: a MEM_LEASE nobody waits
     * for, after a WELCOME that declared it already. */
    start();
    reconnect_on_gate = 1;
    gs_lease_take_anyway(&gs_devs[0], 64 * MB);
    expect_counts_agree("an unanswered MEM_LEASE after a reconnection");

    /* A granted lease, and a WELCOME before its requester wakes. */
    start();
    reconnect_after_answer = true;
    if (gs_reserve(&gs_devs[0], 32 * MB, "cuMemAlloc", 32 * MB) != CUDA_SUCCESS)
        return 1;
    expect_counts_agree("a granted lease with a reconnection before its requester wakes");

    /* No server (open policy): counted without it, and the server is back
     * before the count is. */
    start();
    server_up = false;
    reconnect_after_answer = true;
    if (gs_reserve(&gs_devs[0], 16 * MB, "cuMemAlloc", 16 * MB) != CUDA_SUCCESS)
        return 1;
    expect_counts_agree("memory counted without the server, with a reconnection before it is counted");

    /* Without reconnections, every path agrees too. */
    start();
    gs_reserve(&gs_devs[0], 700 * MB, "cuMemAlloc", 700 * MB);
    gs_lease_take_anyway(&gs_devs[0], 64 * MB);
    gs_lease_give(&gs_devs[0], 700 * MB);
    gs_lease_give_idle();
    gs_lease_give_idle();
    expect_counts_agree("no reconnection");

    return failures ? 1 : 0;
}
