/*
 * A drainer's round as the slice machine sees it (gs_drain_round.c):
 * whether one is due, what it reads before it lists the streams, and what
 * it tells once its events have completed. The drainer thread (gs_drain.c)
 * runs these around its real waits; the simulation runs them unchanged
 * around simulated ones.
 */
#ifndef GPUSLICE_DRAIN_ROUND_H
#define GPUSLICE_DRAIN_ROUND_H

#include "gs_dev.h"

/* What the drainer does next. */
struct gs_drain_ask {
    bool begins;          /* run a round now */
    bool draining;        /* ... for a drain: first wait until every launch
                             admitted has been handed to the driver */
    uint64_t wait_until;  /* otherwise sleep until then (0: until woken) */
};

/* Asks d's slice machine whether a round is due (gate lock held). */
struct gs_drain_ask gs_drain_round_ask_locked(struct gs_dev *d, uint64_t now);
/* Whether every launch admitted on d has been handed to the driver. */
bool gs_drain_round_handed(const struct gs_dev *d);
/* What a round will tell, read before it lists the streams (gate lock
 * held): each launch counted here was listed before it was made, so once
 * the round's events complete, all of them have finished. */
struct gs_slice_event gs_drain_round_reading(const struct gs_dev *d);
/* The round's events have completed at `end`, its stream's work tail_ns
 * before the drainer saw it (a drain's idle tail; 0 if not timed): tells
 * d's slice machine (gate lock held). */
void gs_drain_round_done_locked(struct gs_dev *d, struct gs_slice_event *reading, uint64_t tail_ns, uint64_t end);

#endif
