/*
 * A drainer's round as the slice machine sees it: the questions and
 * answers of the drainer thread's loop (gs_drain.c), without the thread,
 * the events or the waits. Linked by the shim and by the simulation
 * (test/sim/sim_shim.c), which waits in simulated time instead.
 *
 * State: none of its own; d's slice machine, under the gate lock.
 */
#include "gs_drain_round.h"
#include "gs_dispatch.h"

struct gs_drain_ask gs_drain_round_ask_locked(struct gs_dev *d, uint64_t now)
{
    struct gs_slice_event ready = {.type = GS_SLICE_DRAINER_READY};
    struct gs_slice_actions out;
    gs_dispatch_locked(d, &ready, now, &out);
    return (struct gs_drain_ask){.begins = out.round_begins, .draining = out.round_draining,
                                 .wait_until = out.round_begins ? 0 : out.round_wait_until};
}

bool gs_drain_round_handed(const struct gs_dev *d)
{
    return atomic_load(&d->slice.submitted) >= atomic_load(&d->slice.admitted);
}

struct gs_slice_event gs_drain_round_reading(const struct gs_dev *d)
{
    struct gs_slice_event done = {.type = GS_SLICE_ROUND_DONE};
    done.target = atomic_load(&d->slice.submitted);
    done.graphs = atomic_load(&d->slice.graphs_submitted);
    done.graph_ns_done = atomic_load(&d->slice.graph_ns_submitted);
    return done;
}

void gs_drain_round_done_locked(struct gs_dev *d, struct gs_slice_event *reading, uint64_t tail_ns, uint64_t end)
{
    reading->tail_ns = tail_ns;
    struct gs_slice_actions out;
    gs_dispatch_locked(d, reading, end, &out);
}
