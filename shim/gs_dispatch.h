/*
 * Delivering events to a GPU's slice machine (gs_dispatch.c): the thread
 * that delivers holds the gate lock, reads the clock once, steps the
 * machine (gs_slice.c) and carries out its actions: sends on the
 * connection, wakes launchers, the drainer or the gate thread. The table
 * of GPUs, gs_devs (gs_dev.h), is defined here.
 */
#ifndef GPUSLICE_DISPATCH_H
#define GPUSLICE_DISPATCH_H

#include "gs_dev.h"

/* What the dispatch keeps for a process (guarded by the gate lock). The
 * shim has one, its process's. The simulation (test/sim), which runs many
 * simulated processes in one, keeps one per simulated process and makes
 * it the one in use (gs_dispatch_use) before it steps that process. */
struct gs_dispatch_state {
    struct gs_dev devs[GS_MAX_DEVICES]; /* every GPU the process uses, by slot (gs_devs) */
    unsigned owed;                      /* the wake-ups the gate thread owes (GS_OWED_*) */
    uint64_t gate_sleeps_until;         /* gs_dispatch_gate_sleeps_until_locked */
};
/* Makes s the state in use, gs_devs its table (never called in the shim). */
void gs_dispatch_use(struct gs_dispatch_state *s);

/* Delivers ev to d's slice machine at now and carries out its actions
 * (gate lock held). out receives what the step answered (a launch
 * admitted, a round to run). */
void gs_dispatch_locked(struct gs_dev *d, const struct gs_slice_event *ev, uint64_t now,
                        struct gs_slice_actions *out);
/* ev, of no arguments but policy_open, to every GPU in use. */
void gs_dispatch_all_locked(const struct gs_slice_event *ev, uint64_t now);

/* Wakes the launches waiting for admission (gs_gate_cv, and the launcher
 * reading the socket), or the drainers (gate lock held). On the gate
 * thread (gs_dispatch_defer_wakeups) the wake-ups are owed instead and
 * given by gs_dispatch_give_owed once it has let the lock go, so that a
 * woken thread finds the lock free instead of waking once for the
 * condition and again for the lock. */
void gs_wake_launchers_locked(void);
void gs_wake_drainers_locked(void);
/* Whether the calling thread's wake-ups are owed (the gate thread's). */
void gs_dispatch_defer_wakeups(bool defer);
/* The wake-ups owed (gate lock held), then given (lock not held). */
unsigned gs_dispatch_owed_locked(unsigned which);
void gs_dispatch_give_owed(unsigned owed);
#define GS_OWED_LAUNCHERS 1u
#define GS_OWED_DRAINERS 2u

/* Until when the gate thread sleeps: 0 while it runs (it reads every
 * machine's timer before it sleeps again). Set by the gate thread. */
void gs_dispatch_gate_sleeps_until_locked(uint64_t until);

void gs_dispatch_after_fork_child(void);

#endif
