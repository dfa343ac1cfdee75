/*
 * The ledger of leases of device memory (gs_lease.c): per GPU, what the
 * process counts with the server (`granted`: what it holds plus its
 * headroom) and what it holds. Everything here takes the lease lock
 * (gs_locks.h) itself and sends what has no answer; asking the server for
 * more is gs_reserve.c's.
 */
#ifndef GPUSLICE_LEASE_H
#define GPUSLICE_LEASE_H

#include "gs_dev.h"

#include "gpuslice/protocol.h"

#include <stdatomic.h>

/* What the ledger keeps for a GPU (guarded by the lease lock). */
struct gs_lease {
    uint64_t granted;        /* the server's count for this process: held + headroom */
    uint64_t held;           /* what the process holds on the device */
    uint64_t chunk;          /* the headroom to ask for */
    uint64_t changes;        /* allocations and frees so far */
    uint64_t changes_seen;   /* ... at the last tick */
    uint64_t epoch;          /* declarations of the count so far (gs_lease_count) */
    uint64_t recalled_at;    /* when it last answered a MEM_RECALL (0: never) */
};

/* What the ledger keeps for a process. The shim has one, its process's.
 * The simulation (test/sim), which runs many simulated processes in one,
 * keeps one per simulated process and makes it the one in use
 * (gs_lease_use) before it steps that process. */
struct gs_lease_state {
    struct gs_lease leases[GS_MAX_DEVICES]; /* by slot (lease lock) */
    /* Whether the gate thread will tick again (cleared by the tick before
     * it looks, set by whoever leaves headroom, who wakes it if it was
     * clear). */
    _Atomic int tick_armed;
};
/* Makes s the state in use (never called in the shim). */
void gs_lease_use(struct gs_lease_state *s);

/* Counts bytes more as held on d if the headroom covers them: true. Else
 * false, with what to ask the server for: *need (what the headroom lacks)
 * and *want (that and a chunk of headroom sized to what the process
 * allocates). */
bool gs_lease_take_headroom(struct gs_dev *d, uint64_t bytes, uint64_t *need, uint64_t *want);
/* The server's answer to a MEM_LEASE: granted bytes more in the count.
 * Called by the thread that reads the answer, as it arrives (gate lock
 * held), so that no reconnection's declaration comes between the two. */
void gs_lease_granted(struct gs_dev *d, uint64_t granted);
/* Counted without the server (no server under the open policy): declared
 * when it is back. False, and not counted, if it is back already (welcomed
 * since the caller found it unreachable): ask it. */
bool gs_lease_granted_uncounted(struct gs_dev *d, uint64_t bytes);
/* Counts bytes as held although the cap may not allow them: memory the
 * driver already took (a context larger than its estimate, a pool's
 * growth). Never waits for the server: the gate thread calls it too. */
void gs_lease_take_anyway(struct gs_dev *d, uint64_t bytes);
/* No longer held: back to headroom; headroom far beyond what the process
 * uses goes back to the server at once, and all of it in the 200 ms after
 * a recall. */
void gs_lease_give(struct gs_dev *d, uint64_t bytes);
/* gs_lease_give with the clock read at `now` by the caller (the
 * simulation's virtual clock). */
void gs_lease_give_at(struct gs_dev *d, uint64_t bytes, uint64_t now);
/* The process's unused headroom on d. */
uint64_t gs_lease_headroom(const struct gs_dev *d);
/* The process's count on d (held plus headroom), for MEM_DECLARE on a new
 * connection (gate lock held): the messages about d's count built before
 * and not sent yet are in it, and are not sent. */
uint64_t gs_lease_count(const struct gs_dev *d);
/* MEM_RECALL, read at `now`: gives up all headroom of d, and keeps none of
 * what it frees for 200 ms; returns the bytes to free. */
uint64_t gs_lease_recall(const struct gs_dev *d, uint64_t now);

/* The gate thread's tick (gs_gate_thread.c): whether one is wanted (armed
 * by an allocation or free that leaves headroom, which wakes the gate
 * thread), disarming it before a tick and arming it after one that wants
 * another, and giving back the headroom of every GPU that saw no
 * allocation or free since the last tick: true if some did (tick again). */
bool gs_lease_tick_wanted(void);
void gs_lease_tick_disarm(void);
void gs_lease_tick_arm(void);
bool gs_lease_give_idle(void);

void gs_lease_after_fork_child(void);

/* What s's ledger holds on the GPU of `slot`, and what it counts there
 * with the server (held plus headroom); reading bumps no epoch. For the
 * simulation's checks. */
uint64_t gs_lease_held_in(const struct gs_lease_state *s, int slot);
uint64_t gs_lease_counted_in(const struct gs_lease_state *s, int slot);

#endif
