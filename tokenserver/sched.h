/*
 * The scheduler of gpuslice-server, as a state machine: who holds each
 * GPU's time slice, who is next, and each tenant's device memory against
 * its cap.
 *
 *   sched_step(state, event, now) -> actions
 *
 * The server's loop turns what happens (a message, a timer, a client gone,
 * a tenant changed) into one event at a time, with the time it read once,
 * and then carries out the actions the step left in state->actions, in
 * order: send a GRANT, REVOKE, MEM_LEASED or MEM_RECALL, arm a GPU's timer,
 * drop a client, log a holder that was late. The scheduler (sched.c, and
 * memory.c for the caps) never sends, closes, reads a clock, allocates or
 * calls itself back: so the same code runs under the server's loop and
 * under the deterministic simulation in test/sim, which drives it with a
 * virtual clock.
 *
 * Memory the state needs is made ready outside a step, by the layer that
 * knows a new GPU, tenant entry or client slot is coming (devices.c):
 * sched_device_add, sched_entry_get, sched_slots_reserve,
 * sched_actions_reserve. A step only links, unlinks and updates (and
 * frees what a removed tenant's entries had: TENANT_GONE).
 *
 * Everything here belongs to the thread that runs the steps (the server's
 * loop thread); nothing is locked.
 */
#ifndef GPUSLICE_SCHED_H
#define GPUSLICE_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpuslice/protocol.h"
#include "histogram.h"

/* ---- tenants ------------------------------------------------------------------ */

#define SHARE_MIN 1e-3
#define SHARE_MAX 1e6
#define LIMIT_MIN 1e-3
#define QUANTUM_MS_MAX 1000

/* Whether a tenant's slices on several GPUs are granted together. */
enum gang_mode { GANG_AUTO, GANG_ON, GANG_OFF };

/* What a tenant's shims do while no server answers (the policy file in its
 * directory, which the server writes; not the scheduler's concern);
 * ON_DOWN_DEFAULT: the server's --on-server-down. */
enum on_server_down { ON_DOWN_DEFAULT, ON_DOWN_WAIT, ON_DOWN_OPEN };

/* Whether a tenant's requests must start within milliseconds (latency:
 * it preempts batch slices at launch boundaries, within its share) or
 * its work is judged over seconds (batch, the default). */
enum tenant_class { CLASS_BATCH, CLASS_LATENCY };
#define PREEMPT_MS_MAX 1000

struct tenant_config {
    double share;            /* SHARE_MIN .. SHARE_MAX */
    double limit;            /* LIMIT_MIN .. 1 */
    uint64_t quantum_ns;     /* 1 .. QUANTUM_MS_MAX ms */
    uint64_t memory;         /* bytes, 0 = no cap */
    enum gang_mode gang;     /* GANG_AUTO: a gang once it uses two GPUs or more */
    enum on_server_down on_server_down;
    enum tenant_class class;
    uint64_t preempt_ns;     /* latency: the most device time a batch holder of
                                its GPUs may have admitted ahead (what a
                                preemption waits for); 0 = the server's */
};

/* What the scheduler knows of a tenant (embedded in the server's tenant). */
struct sched_tenant {
    const char *name;        /* for the status and metrics */
    struct tenant_config config;
    unsigned index;          /* small, reused once it is gone: the key of
                                every GPU's table of tenant entries */
    unsigned devices;        /* GPUs its slots have declared */
    unsigned waiting;        /* its slots waiting for a grant, all GPUs */
    bool gang_insists;       /* a gang whose last gathering gave up: the
                                next one reserves its GPUs even while
                                another tenant's slice drains past its
                                deadline (gang_blocked) */
};

/* ---- GPUs ------------------------------------------------------------------ */

#define GS_OVERRUN_SAMPLES 1000
#define SHARE_WINDOW_NS 10000000000ull  /* the achieved share's window */
#define SHARE_BUCKETS 100               /* of SHARE_WINDOW_NS / SHARE_BUCKETS */

/* What a process still holds on a GPU after its connection closed while
 * it lives on (a drop, a reconnection): counted until it declares again
 * or exits (memory.c). */
#define MEM_GHOSTS 8
struct mem_ghost {
    uint32_t pid;            /* 0: a free entry */
    uint64_t bytes;
};

/* Per GPU, per tenant: that tenant's place in the GPU's schedule. */
struct device_tenant {
    struct sched_tenant *tenant;
    unsigned refs;             /* slots of its clients that declared the GPU */
    double vtime;              /* virtual time: device time used / share */
    uint64_t eligible_at;      /* its limit: no grant before this */
    bool held_back;            /* its limit held it back after its last slice */
    uint64_t cap_from;         /* its limit: where its slice's window begins */
    uint64_t cap_until;        /* its limit: where its last slice's window
                                  ends (cap_from + held / limit) */
    uint64_t cap_debt_ns;      /* late drain to count toward its limit when
                                  the slice it holds now ends */
    double cap_limit;          /* the limit in force for its windows: what
                                  a change of the tenant's limit is told
                                  from (limit_changed) */
    /* A slice its holders kept past deadline + grace: taken back then and
     * charged up to then; their late releases say when the drain ended,
     * and the rest is charged (charge_late_drain). */
    uint64_t late_grant;       /* that slice's grant, 0 if none */
    uint64_t late_charged;     /* charged up to here */
    uint64_t late_stop;        /* charged up to here at most: one grace
                                  period on, or sooner where its next
                                  slice here began */
    uint64_t named_since;      /* refs last rose from 0 then */
    uint64_t preempt_debt_ns;  /* a latency tenant: PREEMPT_COST_NS per
                                  preemption it made here, less what it
                                  held here since (sched_may_preempt) */
    uint64_t preempt_paid_ns;  /* what its slice here paid of that, given
                                  back with what it claims it left idle */
    unsigned waiting;          /* its slots waiting for a grant here */
    bool tenant_waits;         /* its tenant waits on some GPU (tenant.waiting
                                  > 0), mirrored here */
    uint64_t waiting_since;
    bool active;               /* waiting or holding */
    /* statistics */
    uint64_t slices, used_ns, wait_ns;
    uint64_t share_start;      /* the bucket share_used[0] counts, by number */
    uint64_t share_used[SHARE_BUCKETS]; /* held ns per bucket, a ring */
    uint64_t mem_used, mem_peak, oom_refusals;  /* device memory, all its processes
                                                   (ghosts included) */
    struct mem_ghost ghosts[MEM_GHOSTS];        /* counts of processes that live on
                                                   without a connection (memory.c) */
    uint64_t *overruns;        /* release - deadline (0 if before) of the last
                                  GS_OVERRUN_SAMPLES slices (sched_entry_get
                                  allocates it) */
    size_t noverruns;
    struct histogram overrun_hist; /* every slice's overrun, for /metrics */
};

/* DEV_RESERVED: kept free for a gang whose other GPUs are not free yet;
 * holder is the gang's entry, and nothing runs. */
/* A preemption costs the batch tenant its handoffs with the GPU idle (two
 * where the latency tenant runs nothing), whatever the latency tenant does
 * with it; so a latency tenant pays for each by holding the GPU
 * PREEMPT_COST_NS, and one that owes PREEMPT_DEBT_MAX_NS waits its turn
 * as a batch tenant does until its use pays it down. One that asks and
 * gives back as fast as it can, running nothing, otherwise cost a batch
 * tenant beside 1 ms kernels a handoff per drain, 12 % of its device
 * time; an inference step of 1 ms of kernels pays for its own. */
#define PREEMPT_COST_NS 500000ull
/* At most one GRANT with a changed bound per GPU in this long (bound_changed). */
#define BOUND_NOTICE_GAP_NS 2000000ull
/* A latency tenant bounds a GPU's batch holders once its processes have
 * named the GPU this long (bound_changed). */
#define BOUND_SETTLE_NS 2000000ull
#define PREEMPT_DEBT_MAX_NS (4 * PREEMPT_COST_NS)

static inline bool sched_may_preempt(const struct device_tenant *dt)
{
    return dt->preempt_debt_ns < PREEMPT_DEBT_MAX_NS;
}

enum device_state { DEV_IDLE, DEV_RUNNING, DEV_REVOKING, DEV_RESERVED };

struct sched_slot;

struct device {
    uint8_t uuid[16];
    uint64_t id;               /* increasing: the order of the status */
    struct sched_slot **slots; /* the client slots that declared it: the
                                  scheduler walks these, never all clients */
    size_t nslots, slots_cap;
    uint64_t unused_since;     /* nslots fell to 0, or its last ghost count
                                  went with no slot left, then */
    enum device_state state;
    struct device_tenant *holder;
    uint64_t grant;            /* current grant id */
    uint64_t slice_start, deadline;
    uint64_t slice_deadline;   /* the slice's own deadline: a gang rank's
                                  catch-up grant moves `deadline`, never
                                  this, which grace and overrun count from */
    uint64_t charged_until;    /* the holder is charged up to here */
    unsigned holders;          /* slots holding the current grant */
    uint64_t gang_start;       /* which gang start began the slice */
    uint64_t slice_idle;       /* the least idle time a holder of the slice
                                  reported; UINT64_MAX: none yet */
    double vtime_floor;        /* the largest smallest virtual time among
                                  its active tenants so far */
    struct device_tenant *tenants;
    size_t ntenants, tenants_cap;
    uint32_t *entry_of;        /* by tenant index: 1 + its entry's position
                                  in tenants, 0 if none */
    size_t nentry_of;
    uint64_t timer_at;         /* when the scheduler wants a TIMER event; 0 none */
    uint64_t timer_sent;       /* what the last TIMER action asked for */
    uint64_t last_due;         /* when the last slice's successor could have
                                  been granted, for the handoff histogram */
    const struct device_tenant *last_holder;
    bool dirty, timer_changed; /* on the step's worklists */
    bool backfilled;           /* ran a backfill for the gathering gang */
    bool preempting;           /* the slice's deadline was brought forward
                                  for a latency tenant: not extended */
    uint64_t ahead_granted;    /* the bound on admitted work (ahead_ns) the
                                  slice's holders were last granted */
    uint64_t bound_sent_at;    /* when bound_changed last sent holders a
                                  new bound */
    uint64_t bound_due;        /* a changed bound held back until then; 0 none */
    struct device *dirty_next, *timer_next;
    struct device *next;
    uint64_t slices, handoffs;
    uint64_t preemptions;      /* batch slices cut short for a latency tenant */
    uint64_t created_ns;
    uint64_t held_ns;          /* slices held, charged so far (counter) */
    struct histogram handoff_hist; /* deadline or early release -> the next
                                      tenant's grant, per handoff */
};

/* ---- client slots ---------------------------------------------------------------- */

/* One client's slot: its name for one GPU (a process's view of a GPU). The
 * client layer embeds GS_MAX_DEVICES of them in each client. */
struct sched_slot {
    void *owner;             /* the client: opaque to the scheduler */
    uint32_t number;         /* its number in the protocol, 0..GS_MAX_DEVICES-1 */
    uint32_t pid;            /* its process (the kernel's word), 0 if unknown */
    struct sched_tenant *tenant;
    struct device *device;   /* NULL while it names no GPU */
    size_t index;            /* its place in device->slots */
    bool wants;              /* an ACQUIRE outstanding */
    uint64_t holds;          /* the grant it holds, 0 = none */
    uint64_t mem_held;       /* device memory counted for it: what it holds
                                plus its headroom */
    uint64_t recall_sent_ns; /* MEM_RECALL unanswered since; 0 = none */
    uint64_t recalled_ns;    /* when a MEM_RECALL last went to it (0: never) */
    uint64_t leased_ns;      /* when a lease was last granted it (0: never) */
    bool recalling;          /* its lease that did not fit made siblings recall */
    uint64_t round_ns;       /* ... the round of recalls it began, since */
    bool deferred;           /* a lease waits for the recovery's end: */
    uint64_t deferred_id, deferred_need, deferred_want;
};

/* ---- events and actions -------------------------------------------------------- */

enum sched_event_type {
    SCHED_TENANT_CHANGED,    /* tenant: its configuration changed */
    SCHED_TENANT_GONE,       /* tenant: removed; its entries go from every GPU */
    SCHED_DECLARE,           /* slot: now names `device` (it named none) */
    SCHED_UNDECLARE,         /* slot: names its GPU no more (re-declared);
                                lives_on: its process is alive and keeps
                                its memory */
    SCHED_CLIENT_GONE,       /* slot: the first of a client's nslots slots,
                                all gone at once (lives_on as UNDECLARE):
                                nothing is granted to any of them while
                                they go */
    SCHED_ACQUIRE,           /* slot: wants the slice */
    SCHED_RELEASE,           /* slot: grant, more, idle_ns, sent_ns */
    SCHED_TIMER,             /* device: its timer fired */
    SCHED_MEM_LEASE,         /* slot: id, need, want */
    SCHED_MEM_FREE,          /* slot: bytes (also the answer to a recall) */
    SCHED_MEM_DECLARE,       /* slot: bytes it holds, after (re)connecting */
    SCHED_MEM_QUERY,         /* slot: id */
    SCHED_WAKE,              /* the wake-up a SET_WAKE asked for */
    SCHED_PROCESS_GONE,      /* pid: a process with a ghost count exited */
};

struct sched_event {
    enum sched_event_type type;
    struct sched_slot *slot;
    struct device *device;   /* DECLARE, TIMER */
    struct sched_tenant *tenant; /* TENANT_* */
    uint64_t grant;          /* RELEASE */
    bool more;               /* RELEASE: GS_RELEASE_MORE */
    uint64_t idle_ns;        /* RELEASE: what the client claims it left idle */
    uint64_t sent_ns;        /* RELEASE: when the client sent it (or now) */
    uint64_t id;             /* MEM_LEASE, MEM_QUERY */
    uint64_t bytes;          /* MEM_FREE, MEM_DECLARE; MEM_LEASE: need */
    uint64_t want;           /* MEM_LEASE */
    bool lives_on;           /* UNDECLARE, CLIENT_GONE */
    size_t nslots;           /* CLIENT_GONE */
    uint32_t pid;            /* PROCESS_GONE */
};

enum sched_action_type {
    SCHED_GRANT,             /* slot: grant, deadline, flags (an extension
                                has the same grant id) */
    SCHED_REVOKE,            /* slot: grant */
    SCHED_SET_TIMER,         /* device: at (0 = none) */
    SCHED_LEASED,            /* slot: id, status, granted, cap, used */
    SCHED_MEM_RESULT,        /* slot: id, cap, used */
    SCHED_RECALL,            /* slot */
    SCHED_DROP,              /* slot's client: reason */
    SCHED_LATE,              /* slot's client held past deadline + grace */
    SCHED_OVER_CAP,          /* slot's tenant counts `used`, over its cap
                                `cap`, after the slot declared (log it) */
    SCHED_SET_WAKE,          /* a SCHED_WAKE event is wanted at `at` */
};

struct sched_action {
    enum sched_action_type type;
    struct sched_slot *slot;
    struct device *device;
    uint64_t grant, at;      /* GRANT: at is the deadline; SET_TIMER */
    uint32_t flags;          /* GRANT: GS_GRANT_* */
    uint64_t ahead_ns;       /* GRANT: admitted ahead at most (0: no bound) */
    bool notice;             /* GRANT: of the slice the slot holds, for its
                                new bound alone, sent unasked (a client
                                that is slow to read it is not dropped) */
    uint64_t id, granted, cap, used; /* LEASED, MEM_RESULT, OVER_CAP */
    uint64_t need;           /* LEASED: the bytes the request needed */
    uint32_t status;         /* LEASED: enum gs_lease_status */
    const char *reason;      /* DROP: a static string */
};

/* ---- the state ------------------------------------------------------------------- */

struct sched {
    struct device *devices;  /* every GPU known, oldest first */
    unsigned ndevices;
    uint64_t grace_ns;       /* a holder's drain past its deadline before
                                its slice is taken back */
    uint64_t preempt_ns;     /* a latency tenant's preempt_ms where its file
                                says none (--preempt-ms; sched_init: 2 ms) */
    uint64_t step_now;       /* the clock of the step under way */
    struct sched_tenant *forming_gang; /* the gang gathering its GPUs */
    uint64_t forming_until;  /* when its gathering gives up */
    uint64_t gang_starts;    /* gang slices started; device.gang_start */
    uint64_t recovering_until; /* after a restart, leases wait until then
                                (memory.c); set by the driver before the
                                first step */
    bool wake_asked;         /* a SET_WAKE is out */
    struct device *dirty;    /* GPUs to schedule before the step ends */
    struct device *timers;   /* GPUs whose timer changed in this step */
    struct sched_action *actions; /* what the last step asks for */
    size_t nactions, actions_cap;
    uint64_t actions_lost;   /* actions that found no room (a sizing bug) */
};

/* Runs one event at `now` (CLOCK_MONOTONIC, ns). Empties state->actions
 * first, then leaves the step's actions there, to be carried out in order. */
void sched_step(struct sched *s, const struct sched_event *ev, uint64_t now);

/* ---- preparation, outside steps --------------------------------------------------- */

void sched_init(struct sched *s, uint64_t grace_ns);
/* Makes d (zeroed by the caller, uuid set) known; it is appended to the
 * list. */
void sched_device_add(struct sched *s, struct device *d, uint64_t now);
/* Unlinks d, which must be idle with no slots (sched_device_unused), and
 * frees what sched allocated for it; the caller frees d. */
void sched_device_remove(struct sched *s, struct device *d);
/* Whether d can be freed: idle, no slot declares it, and no entry on it
 * counts memory (a ghost of a process that lives on included). */
bool sched_device_unused(const struct device *d);
/* The tenant's entry on d, created if missing; NULL if out of memory. */
struct device_tenant *sched_entry_get(struct device *d, struct sched_tenant *t);
/* The tenant's entry on d (O(1)); NULL if none. */
static inline struct device_tenant *sched_entry_find(const struct device *d, const struct sched_tenant *t)
{
    if (t->index >= d->nentry_of || !d->entry_of[t->index])
        return NULL;
    return &d->tenants[d->entry_of[t->index] - 1];
}
/* Appends an action to the step's (counted in actions_lost if full). */
void sched_emit(struct sched *s, const struct sched_action *a);
/* Room for one more slot on d; false if out of memory. */
bool sched_slots_reserve(struct device *d);
/* Room for the actions of any step with `slots` client slots declared in
 * all; false if out of memory. */
bool sched_actions_reserve(struct sched *s, size_t slots);

/* ---- the step's parts in memory.c ------------------------------------------------------ */

/* MEM_LEASE, MEM_FREE, MEM_DECLARE, MEM_QUERY, WAKE, PROCESS_GONE. */
void mem_event(struct sched *s, const struct sched_event *ev, uint64_t now);
/* The slot names its GPU no more: what it held is the tenant's no longer,
 * or, if its process lives on, a ghost until that process declares again
 * or exits. */
void mem_slot_gone(struct sched *s, struct sched_slot *slot, bool lives_on);

/* ---- reading the state (status, metrics) --------------------------------------------- */

/* Whether the tenant of entry dt is in line for its GPU: a slot of it
 * waits for that GPU, or it is a gang waiting for any of its GPUs. */
bool sched_in_line(const struct device_tenant *dt);
/* The share of d the entry held over the last SHARE_WINDOW_NS (or since d
 * was first used, if less), a sliding window, the running slice counted
 * up to now. */
double device_tenant_recent_share(const struct device *d, const struct device_tenant *dt, uint64_t now);
/* The same over the last `window` ns (at most SHARE_WINDOW_NS). */
double device_tenant_share_over(const struct device *d, const struct device_tenant *dt, uint64_t now, uint64_t window);
/* The time the entry held d over the last `window` ns (at most
 * SHARE_WINDOW_NS), whenever d was first used: at most `window`. */
uint64_t device_tenant_held_over(const struct device *d, const struct device_tenant *dt, uint64_t now,
                                 uint64_t window);
/* The 99th percentile of (release - deadline) over the last slices, in ns;
 * a slice released before its deadline counts as 0. */
uint64_t device_tenant_overrun_p99(const struct device_tenant *dt);

/* ---- the wire (sched_wire.c) -------------------------------------------------------- */

/* The event a client's message makes for one of its slots (slots: its
 * GS_MAX_DEVICES, by number; sent_ns: when it sent it): false for a
 * message that is not one (HELLO, DEVICE, USAGE_QUERY, or one a client
 * never sends), the caller's to handle. */
bool sched_wire_event(const struct gs_msg *m, struct sched_slot *slots, uint64_t sent_ns, struct sched_event *ev);
/* The message an action sends its slot's client (times on the wire less
 * clock_offset_ns: gpuslice/transport.h): false for an action that sends
 * none (a timer, a drop, a log line, a wake-up), the caller's to carry
 * out. */
bool sched_wire_message(const struct sched_action *a, int64_t clock_offset_ns, struct gs_msg *m);

#endif
