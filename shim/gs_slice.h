/*
 * A GPU's time slice, as one state machine per GPU:
 *
 *   gs_slice_step(slice, event, now, actions)
 *
 * The machine is the only writer of the slice's state (NONE, WANT, HOLD,
 * DRAIN), its grant and deadline, the launch budget and the admission
 * flag, the estimates of device time per launch, and the start and the
 * taking of idle spells. It takes no lock, sends nothing, reads no clock
 * and calls nothing outside this file: the thread that delivers an event
 * holds the shim's gate lock (gs_locks.h), reads the clock once, steps, and
 * then carries out the actions (gs_dispatch.c). The same file is compiled
 * into the simulation of a node (test/sim), which delivers the same events
 * with a virtual clock.
 *
 * Launching threads touch only the hot part, lock-free: the fast path
 * (gs_slice_admit_fast below) reads `open` and `budget` and counts
 * `admitted`; a launch handed to the driver counts `submitted` (and a
 * graph launch `graphs_submitted` and its estimate); the first launch
 * after an idle spell ends it (gs_slice_end_idle).
 *
 * States:
 *   NONE   no slice, none asked for
 *   WANT   ACQUIRE sent (or RELEASE with MORE): waiting for a GRANT
 *   HOLD   a slice is held: admission is open while the budget lasts (and,
 *          where the GRANT bounds it, while less than ahead_ns of
 *          estimated device time is admitted and not finished)
 *   DRAIN  admission closed: the drainer waits for the admitted work to
 *          finish, then RELEASE goes out and the state is WANT or NONE
 * A drain may also be under way in HOLD: a GRANT that extends a slice
 * being drained holds it again, and the drain ends as before.
 *
 * Events (enum gs_slice_event_type) and actions (enum
 * gs_slice_action_type) are listed below.
 */
#ifndef GPUSLICE_SLICE_H
#define GPUSLICE_SLICE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum gs_slice_state {
    GS_SLICE_NONE,
    GS_SLICE_WANT,
    GS_SLICE_HOLD,
    GS_SLICE_DRAIN,
};

struct gs_slice {
    /* Hot: launching threads read these without a lock. The machine
     * writes open and budget; launching threads count admitted and
     * submitted (and the graph counters); the machine counts admitted too,
     * for a launch it admits in a step. */
    _Atomic int open;             /* admission open */
    _Atomic uint64_t admitted;    /* launches let through */
    _Atomic uint64_t budget;      /* admitted may reach this */
    _Atomic uint64_t submitted;   /* launches back from the driver */
    /* Since when the process has had nothing on the device (set by the
     * machine after a synchronization found every admitted stream
     * finished, or at a grant; ended by the next launch); 0 = not idle. */
    _Atomic uint64_t idle_since;
    char pad[64];
    _Atomic uint64_t idle_ns;     /* idle spells that ended in this slice */
    /* Graph launches handed to the driver and their estimated device time. */
    _Atomic uint64_t graphs_submitted;
    _Atomic uint64_t graph_ns_submitted;

    /* Cold: the machine's alone. */
    enum gs_slice_state state;
    bool connected;               /* the server welcomed this process */
    bool policy_open;             /* the server-down policy is open */
    uint64_t connecting_since;    /* a connection is being made (0: none, or welcomed) */
    bool drainer;                 /* a drainer thread runs for this GPU */
    uint64_t grant, deadline_ns, slice_start_ns, last_released;
    uint64_t window_start_ns;     /* when the slice or its last extension began */
    uint64_t admitted_at_grant;   /* launches admitted before this slice */
    uint64_t submitted_at_grant;  /* launches handed to the driver before this slice */
    int waiters;                  /* launches waiting for admission */
    uint64_t waiting_graph_ns;    /* the longest graph waiting for a slice */
    uint64_t seen_admitted, quiet_since_ns; /* idle detection */
    bool seen_empty;              /* a synchronization or a round found the queue empty since
                                   * the gate thread last looked */
    uint64_t poll_at;             /* the gate thread looks then, for a program that empties its
                                   * queue now and then (0: not) */
    uint64_t round_owed_at;       /* a launch was admitted onto a queue known empty: the gate
                                   * thread starts a round then if none has run (0: none owed) */
    bool drain_for_idle;          /* the drain began because the process went quiet */
    bool catch_up;                /* the slice admits one launch (GS_GRANT_CATCHUP) */
    bool yield_idle;              /* given back once a synchronization finds it idle (GS_GRANT_YIELD) */
    uint64_t ahead_ns;            /* the slice's GRANT: estimated device time admitted and
                                     not finished at most (a latency tenant shares the
                                     GPU); 0 = no bound */
    uint64_t flow_since_ns;       /* under a bound: since then the GPU works through ... */
    double flow_ns;               /* ... this much of the process's queue without a pause
                                     (what a round left queued, or a launch admitted onto
                                     an empty queue): that much counts down with time */
    bool draining;                /* a drain was asked for and has not ended */
    int captures;                 /* stream captures under way in the process */
    /* the drainer's rounds */
    bool round_running, round_draining;
    uint64_t round_since, round_rounds;
    uint64_t completed;           /* launches known finished */
    uint64_t graphs_completed, graph_ns_completed;
    uint64_t last_round_end_ns;   /* when the last round ended */
    uint64_t rounds;              /* rounds so far, the drainer's or a synchronization's */
    bool round_by_sync;           /* the last round was an application's synchronization */
    double kernel_ns;             /* estimated device time per kernel launch; 0 = unknown */
    double queued_at_round_ns;    /* device time queued when the last round ended */
    double measured_ns, measured_kernels; /* the sums behind kernel_ns */
    uint64_t timer_at;            /* when the gate thread looks again; 0 = no need */
    uint64_t gate_plan_ns;        /* when the gate thread is known to look at the latest: what it
                                   * planned at its last look (TIMER) or last wake-up; 0 = not
                                   * for this GPU */
    bool wake_gate;               /* (within a step) the gate thread must plan again */
};

enum gs_slice_event_type {
    /* The GPU is first used (connected, connecting and policy_open say how
     * things are). */
    GS_SLICE_ADDED,
    /* Its drainer thread started. */
    GS_SLICE_DRAINER_STARTED,
    /* A launch wants the GPU: admitted now (actions.admitted) or it waits
     * for WAKE_LAUNCHERS and asks again with retry set. A graph launch
     * gives its estimated device time (0: not measured yet). */
    GS_SLICE_LAUNCH,
    /* From the server: a slice (or an extension of the one held, same
     * grant id), a revocation, the connection's welcome. */
    GS_SLICE_GRANT,
    GS_SLICE_REVOKE,
    GS_SLICE_WELCOME,
    /* A connection to the server was made (HELLO sent): until its WELCOME,
     * launches wait, under the `open` policy too, for at most
     * GS_SLICE_WELCOME_WAIT_NS; then they go ahead ungated. */
    GS_SLICE_CONNECTING,
    /* The connection broke, or could not be made (policy_open: the
     * server-down policy). */
    GS_SLICE_DISCONNECTED,
    /* The gate thread's timer: time passed (the deadline, the last moment a
     * launch fits, the end of an idle spell, its backstop). */
    GS_SLICE_TIMER,
    /* The drainer may run a round: actions.round_begins, or it sleeps
     * until actions.round_wait_until (0: until START_ROUND). */
    GS_SLICE_DRAINER_READY,
    /* A drainer round ended: every launch up to `target` finished (and
     * the graph launches counted), tail_ns: how long before the drainer
     * saw it the last of them ended (a drain of one stream measures it). */
    GS_SLICE_ROUND_DONE,
    /* An application's synchronization found everything admitted up to
     * `finished` finished: the GPU idle since `idle_from` (0: not known to
     * be idle); as_round: it counts as a drainer round. */
    GS_SLICE_SYNCED,
    /* A stream capture began or ended in the process. */
    GS_SLICE_CAPTURE_BEGAN,
    GS_SLICE_CAPTURE_ENDED,
};

struct gs_slice_event {
    enum gs_slice_event_type type;
    bool connected, connecting, policy_open; /* ADDED; DISCONNECTED: policy_open */
    bool retry;                   /* LAUNCH: it waited before */
    bool graph;                   /* LAUNCH: a graph launch, of graph_ns */
    uint64_t graph_ns;
    uint64_t grant;               /* GRANT, REVOKE */
    uint64_t deadline_ns;         /* GRANT, on this process's clock */
    uint32_t flags;               /* GRANT: GS_GRANT_JOIN, GS_GRANT_CATCHUP, GS_GRANT_YIELD */
    uint64_t ahead_ns;            /* GRANT: admitted ahead at most (0: no bound) */
    uint64_t sent_ns;             /* GRANT: when the server sent it (<= now) */
    uint64_t target;              /* ROUND_DONE */
    uint64_t graphs, graph_ns_done; /* ROUND_DONE: graph launches finished, their estimate */
    uint64_t tail_ns;             /* ROUND_DONE */
    uint64_t finished;            /* SYNCED */
    uint64_t idle_from;           /* SYNCED */
    bool as_round;                /* SYNCED */
};

enum gs_slice_action_type {
    GS_SLICE_SEND_ACQUIRE,        /* ACQUIRE for this GPU */
    GS_SLICE_SEND_RELEASE,        /* RELEASE of grant, with idle_ns and more */
    GS_SLICE_START_ROUND,         /* wake the drainer: a round is due */
    GS_SLICE_WAKE_LAUNCHERS,      /* launches waiting for admission ask again */
    /* The gate thread looks again at `at` (0: no need): it reads the
     * timers of every GPU before it sleeps. With `wake`, it may be asleep
     * past a moment it must now look at: wake it to plan again. */
    GS_SLICE_ARM_TIMER,
    GS_SLICE_FORGET_STREAMS,      /* the drain ended: the next slice lists its streams afresh */
};

struct gs_slice_action {
    enum gs_slice_action_type type;
    uint64_t grant, idle_ns, at;
    bool more;                    /* SEND_RELEASE: GS_RELEASE_MORE */
    bool wake;                    /* ARM_TIMER */
};

#define GS_SLICE_MAX_ACTIONS 8
#define GS_SLICE_WELCOME_WAIT_NS 2000000000ull

struct gs_slice_actions {
    int n;
    struct gs_slice_action a[GS_SLICE_MAX_ACTIONS];
    bool admitted;                /* LAUNCH: admitted */
    bool round_begins;            /* DRAINER_READY: run a round now */
    bool round_draining;          /* ... for a drain */
    uint64_t round_wait_until;    /* DRAINER_READY: otherwise sleep until then (0: until woken) */
};

/* Runs one event through the machine at `now` (the caller's one reading of
 * CLOCK_MONOTONIC, or the simulation's clock); out receives the actions,
 * in the order they are to be carried out. */
void gs_slice_step(struct gs_slice *s, const struct gs_slice_event *ev, uint64_t now,
                   struct gs_slice_actions *out);

/* The fast path's admission, lock-free and syscall-free: true if the
 * launch is admitted within the budget of an open slice. Sequentially
 * consistent with the loads after it: a drain that closed admission after
 * the check (open = 0, then the drainer reads admitted) either counts this
 * launch and waits for it, or is seen here, and the launch takes its count
 * back and goes to the slow path (a step). The caller then ends an idle
 * spell if idle_since is set (gs_slice_end_idle). */
static inline bool gs_slice_admit_fast(struct gs_slice *s)
{
    if (!atomic_load_explicit(&s->open, memory_order_relaxed) ||
        atomic_load_explicit(&s->admitted, memory_order_relaxed) >=
            atomic_load_explicit(&s->budget, memory_order_relaxed))
        return false;
    atomic_fetch_add(&s->admitted, 1);
    if (__builtin_expect(!atomic_load(&s->open), 0)) {
        atomic_fetch_sub(&s->admitted, 1);
        return false;
    }
    return true;
}

/* A launch was admitted while idle_since was set: ends the spell at now. */
void gs_slice_end_idle(struct gs_slice *s, uint64_t now);

/* What the state is called, for logs and traces. */
const char *gs_slice_state_name(enum gs_slice_state state);

#endif
