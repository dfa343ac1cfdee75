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
void gs_dispatch_defer_wakeups(void);
/* The wake-ups owed (gate lock held), then given (lock not held). */
unsigned gs_dispatch_owed_locked(unsigned which);
void gs_dispatch_give_owed(unsigned owed);
#define GS_OWED_LAUNCHERS 1u
#define GS_OWED_DRAINERS 2u

/* The drainers' condition variable (used with the gate lock; its waits
 * time out on CLOCK_MONOTONIC). */
pthread_cond_t *gs_drainer_cv(void);

/* Until when the gate thread sleeps: 0 while it runs (it reads every
 * machine's timer before it sleeps again). Set by the gate thread. */
void gs_dispatch_gate_sleeps_until_locked(uint64_t until);

void gs_dispatch_after_fork_child(void);

#endif
