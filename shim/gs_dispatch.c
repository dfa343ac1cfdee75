/*
 * Delivering events to the slice machines and carrying out their actions
 * (see gs_dispatch.h).
 *
 * Owns (guarded by the gate lock): the process's table of GPUs, the
 * wake-ups the gate thread owes and until when it sleeps (struct
 * gs_dispatch_state, and gs_devs, which points into it); and, per thread,
 * whether its wake-ups are deferred (the gate thread's own). It calls no
 * clock and no system call itself: the wake-ups go through gs_locks.c's
 * condition variables and gs_conn.c's eventfds, and the simulation
 * (test/sim) compiles this file unchanged with stand-ins for those.
 */
#include "gs_dispatch.h"
#include "gs_conn.h"
#include "gs_locks.h"
#include "gs_slice_wire.h"

#include <string.h>

/* The process's state (its contents guarded by the gate lock). `state`
 * and `gs_devs` point at it from the start and stay there in the shim:
 * only the simulation, one thread, moves them (gs_dispatch_use), to the
 * simulated process it steps. */
static struct gs_dispatch_state process;
static struct gs_dispatch_state *state = &process;
struct gs_dev *gs_devs = process.devs;

static __thread bool defer_wakeups;

void gs_dispatch_use(struct gs_dispatch_state *s)
{
    state = s;
    gs_devs = s->devs;
}

/* ---- wake-ups ------------------------------------------------------------------ */

void gs_dispatch_defer_wakeups(bool defer)
{
    defer_wakeups = defer;
}

void gs_wake_launchers_locked(void)
{
    if (defer_wakeups) {
        state->owed |= GS_OWED_LAUNCHERS;
        return;
    }
    gs_gate_cv_broadcast();
    if (gs_conn_launcher_reads_locked())
        gs_conn_wake_reader();
}

void gs_wake_drainers_locked(void)
{
    if (defer_wakeups)
        state->owed |= GS_OWED_DRAINERS;
    else
        gs_drainer_cv_broadcast();
}

unsigned gs_dispatch_owed_locked(unsigned which)
{
    unsigned o = state->owed & which;
    state->owed &= ~which;
    return o;
}

void gs_dispatch_give_owed(unsigned o)
{
    /* Broadcasting without the lock loses nothing: a woken thread tests its
     * condition under the lock, and the change it waits for was made under
     * it before this call. Whether a launcher reads the socket cannot be
     * read without the lock: it is poked either way. */
    if (o & GS_OWED_LAUNCHERS) {
        gs_gate_cv_broadcast();
        gs_conn_wake_reader();
    }
    if (o & GS_OWED_DRAINERS)
        gs_drainer_cv_broadcast();
}

void gs_dispatch_gate_sleeps_until_locked(uint64_t until)
{
    state->gate_sleeps_until = until;
}

/* ---- delivering ------------------------------------------------------------------- */

void gs_dispatch_locked(struct gs_dev *d, const struct gs_slice_event *ev, uint64_t now,
                        struct gs_slice_actions *out)
{
    gs_slice_step(&d->slice, ev, now, out);
    for (int i = 0; i < out->n; i++) {
        const struct gs_slice_action *a = &out->a[i];
        struct gs_msg m;
        if (gs_slice_wire_message(a, (uint32_t)d->slot, &m)) {
            gs_conn_send_about_locked(d, &m);
            continue;
        }
        switch (a->type) {
        case GS_SLICE_START_ROUND:
            gs_wake_drainers_locked();
            break;
        case GS_SLICE_WAKE_LAUNCHERS:
            gs_wake_launchers_locked();
            break;
        case GS_SLICE_ARM_TIMER: {
            /* The gate thread reads every timer before it sleeps; one that
             * may sleep past this one is woken to plan again. */
            uint64_t sleeps_until = state->gate_sleeps_until;
            if (a->wake && a->at && sleeps_until && a->at < sleeps_until)
                gs_conn_wake_gate_thread();
            break;
        }
        case GS_SLICE_FORGET_STREAMS:
            d->nstreams = 0;
            atomic_fetch_add(&d->stream_set_gen, 1);
            break;
        default: /* the messages (gs_slice_wire_message, above) */
            break;
        }
    }
}

void gs_dispatch_all_locked(const struct gs_slice_event *ev, uint64_t now)
{
    struct gs_slice_actions out;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        if (gs_devs[i].used)
            gs_dispatch_locked(&gs_devs[i], ev, now, &out);
}

void gs_dispatch_after_fork_child(void)
{
    /* No gate or drainer thread exists in the child: no GPU either, until
     * it uses one. (The drainers' condition variable is made anew by
     * gs_locks.c.) */
    memset(state, 0, sizeof *state);
}
