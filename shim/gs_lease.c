/*
 * The ledger of leases of device memory headroom (see gs_lease.h): what
 * lets an allocation within the tenant's cap cost no round trip to
 * gpuslice-server.
 *
 * Per device the process has a count with the server (`granted`: what it
 * holds plus its headroom) and what it holds (`held`). An allocation that
 * fits in the headroom is counted here alone; one that does not asks the
 * server for the missing bytes plus a chunk of headroom sized to what the
 * process allocates (gs_reserve.c). The server never lets the tenant's
 * counts sum past the cap, so what the processes hold cannot either.
 *
 * Headroom goes back to the server: beyond four chunks at once on a free,
 * all of it when the device has seen no allocation or free for one or two
 * ticks of the gate thread (20 ms), and all of it when the server recalls
 * it because a sibling process needs room (MEM_RECALL). For RECALLED_NS
 * after a recall, what the process frees goes back at once too: a
 * sibling's lease is refused once every recall is answered, and bytes
 * freed after the answer, kept as headroom, left it refused within the
 * tenant's cap (the simulation's named case sibling-frees-after-recall).
 *
 * A message about the count that has no answer (MEM_FREE, or MEM_LEASE for
 * memory the driver took) is built under the lease lock and sent under the
 * gate lock, taken after. A reconnection in between declares the count
 * with the change in it already; the message, sent on top, would count the
 * change twice. So each device keeps a declaration epoch, which the
 * declaration bumps (gs_lease_count, gate lock held), and a message built
 * under an older epoch is not sent.
 *
 * Owns the process's struct gs_lease_state (its leases guarded by the
 * lease lock, the innermost but one of gs_locks.h: the gate thread reads
 * them with the gate lock held; its tick_armed atomic), and `state`, the
 * one in use. It reads no clock but in gs_lease_give, and the simulation
 * (test/sim) compiles this file unchanged.
 */
#include "gs_lease.h"
#include "gs_conn.h"
#include "gs_locks.h"
#include "gs_log.h"

#define MIN_CHUNK (8ull << 20)
/* How long after a recall nothing freed is kept as headroom: as long as
 * the server's round of recalls for a lease may last (memory.c,
 * RECALL_TIMEOUT_NS), a new recall starting it again. */
#define RECALLED_NS 200000000ull
#define MAX_CHUNK (1ull << 30)

/* The process's state. `state` points at it from the start and stays
 * there in the shim, so that no lock guards the pointer itself: only the
 * simulation, one thread, moves it (gs_lease_use), to the simulated
 * process it steps. */
static struct gs_lease_state process;
static struct gs_lease_state *state = &process;

void gs_lease_use(struct gs_lease_state *s)
{
    state = s;
}

static void arm_tick(void)
{
    if (atomic_exchange(&state->tick_armed, 1) == 0)
        gs_conn_wake_gate_thread();
}

static uint64_t chunk_for(uint64_t bytes, uint64_t chunk)
{
    uint64_t want = bytes > MAX_CHUNK / 2 ? MAX_CHUNK : 2 * bytes;
    if (want < MIN_CHUNK)
        want = MIN_CHUNK;
    return want > chunk ? want : chunk;
}

/* Sends m, a message about d that has no answer, built under the lease
 * lock in epoch `epoch`, if connected and d's count was not declared since
 * (a message lost with a connection, or built before a declaration, is
 * covered by that declaration). */
static void send_unanswered(struct gs_dev *d, const struct gs_msg *m, uint64_t epoch)
{
    gs_lock(GS_LOCK_GATE); /* no declaration while it is held */
    gs_lock(GS_LOCK_LEASE);
    bool declared_since = state->leases[d->slot].epoch != epoch;
    gs_unlock(GS_LOCK_LEASE);
    if (!declared_since)
        gs_conn_send_about_locked(d, m);
    gs_unlock(GS_LOCK_GATE);
}

static void send_free(struct gs_dev *d, uint64_t bytes, uint64_t epoch)
{
    struct gs_msg m = {.type = GS_MSG_MEM_FREE};
    m.u.mem.slot = (uint32_t)d->slot;
    m.u.mem.bytes = bytes;
    send_unanswered(d, &m, epoch);
}

bool gs_lease_take_headroom(struct gs_dev *d, uint64_t bytes, uint64_t *need, uint64_t *want)
{
    struct gs_lease *l = &state->leases[d->slot];
    gs_lock(GS_LOCK_LEASE);
    uint64_t headroom = l->granted - l->held;
    bool fits = headroom >= bytes;
    if (fits) {
        l->held += bytes;
        l->changes++;
    } else {
        *need = bytes - headroom;
        l->chunk = chunk_for(bytes, l->chunk);
        *want = *need > UINT64_MAX - l->chunk ? *need : *need + l->chunk;
    }
    gs_unlock(GS_LOCK_LEASE);
    return fits;
}

void gs_lease_granted(struct gs_dev *d, uint64_t granted)
{
    struct gs_lease *l = &state->leases[d->slot];
    gs_lock(GS_LOCK_LEASE);
    l->granted = granted > UINT64_MAX - l->granted ? UINT64_MAX : l->granted + granted;
    gs_unlock(GS_LOCK_LEASE);
    arm_tick();
}

bool gs_lease_granted_uncounted(struct gs_dev *d, uint64_t bytes)
{
    /* Under the gate lock: counted before the next WELCOME's declaration,
     * or not at all once it came (the caller asks that server). */
    struct gs_lease *l = &state->leases[d->slot];
    gs_lock(GS_LOCK_GATE);
    bool welcomed = gs_conn_connected_locked();
    if (!welcomed) {
        gs_lock(GS_LOCK_LEASE);
        l->granted = bytes > UINT64_MAX - l->granted ? UINT64_MAX : l->granted + bytes;
        gs_unlock(GS_LOCK_LEASE);
    }
    gs_unlock(GS_LOCK_GATE);
    return !welcomed;
}

void gs_lease_take_anyway(struct gs_dev *d, uint64_t bytes)
{
    /* The driver has the memory already: there is nothing to ask, and no
     * answer to wait for. That matters: the gate thread comes here (a
     * pool's growth, found by its tick), and it is the thread that reads
     * the server's answers. What the headroom does not cover is counted
     * here and added to the server's count with a lease nobody waits for;
     * over the cap the server refuses it and the count errs low there
     * until the next declaration, as the driver's taking cannot be
     * undone. */
    struct gs_lease *l = &state->leases[d->slot];
    gs_lock(GS_LOCK_LEASE);
    uint64_t headroom = l->granted - l->held;
    uint64_t need = bytes > headroom ? bytes - headroom : 0;
    l->granted = need > UINT64_MAX - l->granted ? UINT64_MAX : l->granted + need;
    l->held = bytes > UINT64_MAX - l->held ? UINT64_MAX : l->held + bytes;
    l->changes++;
    uint64_t epoch = l->epoch;
    gs_unlock(GS_LOCK_LEASE);
    if (need) {
        GS_DEBUG("%llu bytes of device memory taken by the driver beyond the headroom; counted",
                 (unsigned long long)need);
        struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
        m.u.lease.slot = (uint32_t)d->slot;
        m.u.lease.id = 0; /* its MEM_LEASED matches no request */
        m.u.lease.need = m.u.lease.want = need;
        send_unanswered(d, &m, epoch);
    }
}

void gs_lease_give(struct gs_dev *d, uint64_t bytes)
{
    gs_lease_give_at(d, bytes, gs_now_ns());
}

void gs_lease_give_at(struct gs_dev *d, uint64_t bytes, uint64_t now)
{
    struct gs_lease *l = &state->leases[d->slot];
    uint64_t back = 0;
    gs_lock(GS_LOCK_LEASE);
    l->held -= bytes > l->held ? l->held : bytes;
    l->changes++;
    uint64_t headroom = l->granted - l->held;
    if (l->recalled_at && now - l->recalled_at < RECALLED_NS) {
        back = headroom;
        l->granted -= back;
    } else if (headroom > 4 * l->chunk) {
        back = headroom - l->chunk;
        l->granted -= back;
    }
    uint64_t epoch = l->epoch;
    gs_unlock(GS_LOCK_LEASE);
    if (back)
        send_free(d, back, epoch);
    arm_tick();
}

uint64_t gs_lease_headroom(const struct gs_dev *d)
{
    gs_lock(GS_LOCK_LEASE);
    uint64_t headroom = state->leases[d->slot].granted - state->leases[d->slot].held;
    gs_unlock(GS_LOCK_LEASE);
    return headroom;
}

uint64_t gs_lease_count(const struct gs_dev *d)
{
    gs_lock(GS_LOCK_LEASE);
    uint64_t count = state->leases[d->slot].granted;
    state->leases[d->slot].epoch++; /* what was built before is in this count */
    gs_unlock(GS_LOCK_LEASE);
    return count;
}

uint64_t gs_lease_recall(const struct gs_dev *d, uint64_t now)
{
    gs_lock(GS_LOCK_LEASE);
    struct gs_lease *l = &state->leases[d->slot];
    uint64_t back = l->granted - l->held;
    l->granted = l->held;
    l->recalled_at = now ? now : 1;
    gs_unlock(GS_LOCK_LEASE);
    return back;
}

/* ---- the gate thread's tick ---------------------------------------------------- */

bool gs_lease_tick_wanted(void)
{
    return atomic_load(&state->tick_armed) != 0;
}

void gs_lease_tick_disarm(void)
{
    atomic_store(&state->tick_armed, 0);
}

void gs_lease_tick_arm(void)
{
    atomic_store(&state->tick_armed, 1);
}

bool gs_lease_give_idle(void)
{
    bool again = false;
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        gs_lock(GS_LOCK_LEASE);
        struct gs_lease *l = &state->leases[i];
        uint64_t back = 0;
        if (l->granted > l->held) {
            if (l->changes == l->changes_seen) {
                back = l->granted - l->held;
                l->granted = l->held;
            } else {
                again = true;
            }
        }
        l->changes_seen = l->changes;
        uint64_t epoch = l->epoch;
        gs_unlock(GS_LOCK_LEASE);
        if (back)
            send_free(&gs_devs[i], back, epoch);
    }
    return again;
}

void gs_lease_after_fork_child(void)
{
    /* The child holds none of the parent's device memory. */
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        state->leases[i] = (struct gs_lease){0};
    atomic_store(&state->tick_armed, 0);
}

uint64_t gs_lease_held_in(const struct gs_lease_state *s, int slot)
{
    gs_lock(GS_LOCK_LEASE);
    uint64_t held = s->leases[slot].held;
    gs_unlock(GS_LOCK_LEASE);
    return held;
}

uint64_t gs_lease_counted_in(const struct gs_lease_state *s, int slot)
{
    gs_lock(GS_LOCK_LEASE);
    uint64_t counted = s->leases[slot].granted;
    gs_unlock(GS_LOCK_LEASE);
    return counted;
}
