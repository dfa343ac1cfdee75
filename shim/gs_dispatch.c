/*
 * Delivering events to the slice machines and carrying out their actions
 * (see gs_dispatch.h).
 *
 * Owns (guarded by the gate lock): the table of GPUs gs_devs, the
 * wake-ups the gate thread owes, and until when it sleeps; the drainers'
 * condition variable; and, per thread, whether its wake-ups are deferred
 * (the gate thread's own).
 */
#include "gs_dispatch.h"
#include "gs_glibc_compat.h"
#include "gs_conn.h"
#include "gs_locks.h"
#include "gs_slice_wire.h"

#include <string.h>

struct gs_dev gs_devs[GS_MAX_DEVICES];

static __thread bool defer_wakeups;
static unsigned owed;
static uint64_t gate_sleeps_until;
/* Wakes drainers; used with the gate lock; waits time out on
 * CLOCK_MONOTONIC (set up by init_drainer_cv). */
static pthread_cond_t drainer_cv;
static pthread_once_t drainer_cv_once = PTHREAD_ONCE_INIT;

static void init_drainer_cv(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&drainer_cv, &attr);
    pthread_condattr_destroy(&attr);
}

pthread_cond_t *gs_drainer_cv(void)
{
    pthread_once(&drainer_cv_once, init_drainer_cv);
    return &drainer_cv;
}

/* ---- wake-ups ------------------------------------------------------------------ */

void gs_dispatch_defer_wakeups(void)
{
    defer_wakeups = true;
}

void gs_wake_launchers_locked(void)
{
    if (defer_wakeups) {
        owed |= GS_OWED_LAUNCHERS;
        return;
    }
    pthread_cond_broadcast(&gs_gate_cv);
    if (gs_conn_launcher_reads_locked())
        gs_conn_wake_reader();
}

void gs_wake_drainers_locked(void)
{
    if (defer_wakeups)
        owed |= GS_OWED_DRAINERS;
    else
        pthread_cond_broadcast(gs_drainer_cv());
}

unsigned gs_dispatch_owed_locked(unsigned which)
{
    unsigned o = owed & which;
    owed &= ~which;
    return o;
}

void gs_dispatch_give_owed(unsigned o)
{
    /* Broadcasting without the lock loses nothing: a woken thread tests its
     * condition under the lock, and the change it waits for was made under
     * it before this call. Whether a launcher reads the socket cannot be
     * read without the lock: it is poked either way. */
    if (o & GS_OWED_LAUNCHERS) {
        pthread_cond_broadcast(&gs_gate_cv);
        gs_conn_wake_reader();
    }
    if (o & GS_OWED_DRAINERS)
        pthread_cond_broadcast(gs_drainer_cv());
}

void gs_dispatch_gate_sleeps_until_locked(uint64_t until)
{
    gate_sleeps_until = until;
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
        case GS_SLICE_ARM_TIMER:
            /* The gate thread reads every timer before it sleeps; one that
             * may sleep past this one is woken to plan again. */
            if (a->wake && a->at && gate_sleeps_until && a->at < gate_sleeps_until)
                gs_conn_wake_gate_thread();
            break;
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
     * it uses one. */
    memset(gs_devs, 0, sizeof gs_devs);
    owed = 0;
    gate_sleeps_until = 0;
    init_drainer_cv();
}
