/*
 * The deterministic simulation of a node (test/sim): the server's real
 * scheduler (tokenserver/sched.c, memory.c, sched_prepare.c, unchanged)
 * and its driver (dispatch.c: the steps and their actions) and GPUs
 * (devices.c), unchanged, driven by simulated processes, a simulated GPU
 * per device, a virtual clock and one seeded random source. Every run is a pure function of its
 * seed: `sim --seed N --trace` replays it bit for bit.
 *
 *   sim_world.c    the clock, the event queue, the random source, a run
 *   sim_scenario.c what a seed makes: GPUs, tenants, processes, faults
 *   sim_cases.c    the named cases: nodes written by hand (sim --case)
 *   sim_script.c   the scripted cases' harness (sim_script.h): processes
 *                  that send what a case says when it says, on a node
 *                  without transport delays, and what a case measures
 *   sim_scripted_gangs.c, sim_scripted_latency.c, sim_scripted_charges.c
 *                  the scripted cases (sim --case): histories written by
 *                  hand, regression cases for the scheduler (sim_scripted.h)
 *   sim_server.c   the server's side: what clients.c does in the real
 *                  server (a message in, a close), onto devices.c and
 *                  dispatch.c
 *   sim_driver.c   what the server's glue calls below it, on the
 *                  simulated world: the clock, timers, a client's sends,
 *                  the log, a GPU's access check, whether a process lives
 *   sim_shim.c     a process's side of the protocol: the shim's real slice
 *                  machine (shim/gs_slice.c), its dispatch
 *                  (shim/gs_dispatch.c: the actions carried out) and its
 *                  gate thread's handling of what it reads
 *                  (shim/gs_gate_messages.c) and its ledger of leases of
 *                  device memory (shim/gs_lease.c), unchanged, driven as
 *                  its threads drive them
 *   sim_shim_conn.c the stand-ins for what those call in the rest of the
 *                  shim: the connection, the locks and the gate lock's
 *                  condition variables, the log
 *   sim_app.c      what processes run (patterns of kernels and host work)
 *                  and the simulated GPUs
 *   sim_hostile.c  tenants that speak the protocol to abuse it
 *   sim_check.c    the invariants after every event, the figures at the end
 *   sim_check_sched.c the scheduler's state whole after every event, on a
 *                  node that asks for it (world.check_sched)
 *   sim_main.c     the command line, and many seeds at once
 * All but sim_main.c is a library (test/sim/meson.build) that the
 * scheduler's fuzz target (test/sched/sched_fuzz.c) runs its inputs on
 * too: its clients are processes it drives (APP_DRIVEN).
 */
#ifndef GPUSLICE_SIM_H
#define GPUSLICE_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/protocol.h"
#include "gs_conn.h"
#include "gs_dispatch.h"
#include "gs_lease.h"
#include "gs_slice.h"
#include "gs_slice_wire.h"
#include "sched.h"
#include "server.h"

#define SIM_MAX_GPUS 4
#define SIM_MAX_TENANTS 8
#define SIM_MAX_PROCS 48
#define SIM_MAX_CONNS 128      /* connections ever made in a run */
#define SIM_RANKS 4            /* GPUs one process may use */
#define SIM_MOST_IN_FLIGHT 32  /* items one process has in flight at most (its
                                  depth, 2..16, or its batch, 1..32) */
/* Work items a GPU holds queued: room for every process's items at once.
 * Under policy `open`, while the server is down, every process launches
 * ungated, and a GPU's queue holds all they have in flight (512 was too
 * few: 40 processes of one GPU filled it 326 ms into a server restart). */
#define SIM_QUEUE 2048
_Static_assert(SIM_QUEUE >= SIM_MAX_PROCS * SIM_MOST_IN_FLIGHT, "a GPU's queue holds every process's items");
#define SIM_EVENTS 4096        /* events pending at once */
/* The longest a MEM_LEASE waits for its answer while its process runs and
 * its connection lasts: the recovery after a server's restart, when leases
 * wait for the processes of the last server to declare what they hold
 * (1.5 s, sim_server.c), and the messages and timers around it. */
#define LEASE_ANSWER_NS (1600 * MS)
#define SIM_PID_BASE 1000      /* process i is pid SIM_PID_BASE + i */
#define MS 1000000ull
#define MIB (1ull << 20)
#define US 1000ull

/* ---- the random source: xoshiro256**, seeded by splitmix64 ------------------------ */

struct rng {
    uint64_t s[4];
};
void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
/* lo .. hi inclusive */
uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi);
double rng_unit(struct rng *r);
bool rng_chance(struct rng *r, double p);

/* ---- events ------------------------------------------------------------------ */

enum ev_kind {
    EV_TO_SERVER,            /* conn: msg arrives at the server */
    EV_TO_PROC,              /* proc (conn): msg arrives at the process */
    EV_CLOSED,               /* conn: the server sees the connection close */
    EV_SERVER_TIMER,         /* one of the server's timers (sim_driver.c; gen) */
    EV_GPU,                  /* gpu (gen): the item at the head finishes */
    EV_APP,                  /* proc (gen): the application's next step */
    EV_SHIM,                 /* proc (gen): the shim's timer */
    EV_FAULT,                /* fault index */
    EV_SERVER_START,         /* the server (re)starts */
    EV_PROCESS_GONE,         /* proc: the server notices it exited (its ghosts) */
};

struct event {
    uint64_t at, seq;
    enum ev_kind kind;
    int a;                   /* conn, proc, gpu or fault */
    uint64_t gen;
    uint64_t sent;           /* EV_TO_SERVER, EV_TO_PROC: when it was sent */
    bool mem;                /* it changes what the server or a process counts
                                of device memory (world.mem_in_flight) */
    int8_t mem_tenant;       /* a message of mem: its connection's tenant
                                (world.mem_in_flight_of); -1 none */
    struct gs_msg msg;
};

/* ---- the simulated GPU -------------------------------------------------------- */

struct item {
    int proc;
    int tenant;
    uint64_t len;            /* ns of device time */
    int64_t collective;      /* its index among a gang rank's collectives; -1 */
    bool excused;            /* queued outside any slice the server knows of
                                (server down under `open`, in flight when a
                                connection or a slice was lost) */
    bool ungated;            /* queued ungated: no server answered under `open` */
    uint64_t started;        /* 0 until it reaches the engine */
    uint64_t submitted;
};

struct sim_gpu {
    struct item q[SIM_QUEUE];
    int head, n;
    uint64_t gen;            /* of the pending EV_GPU */
    uint64_t busy_ns[SIM_MAX_PROCS];
    uint64_t busy_tenant[SIM_MAX_TENANTS];
    uint64_t last_tenant_end[SIM_MAX_TENANTS];
    uint64_t ungated_busy_ns; /* device time of ungated items, ended ones */
};

/* ---- tenants and processes ----------------------------------------------------- */

enum app_kind {
    APP_DEEP,                /* keeps `depth` items queued */
    APP_SYNC,                /* `batch` items, a synchronize, host work */
    APP_BURSTS,              /* deep queue for a while, then idle */
    APP_RANK,                /* a gang rank: collectives, `depth` queued */
    APP_HOSTILE,             /* no application: sim_hostile.c speaks */
    APP_SCRIPT,              /* no application: a scripted case speaks
                                (sim_script.c) */
    APP_DRIVEN,              /* no application: a driver outside the
                                simulation speaks for it (the scheduler's
                                fuzz target, test/sched/sched_fuzz.c), and
                                is handed what it receives
                                (world.driven_receive) */
};

enum hostile_kind {
    H_NONE,
    H_LIAR,                  /* holds every slice to its deadline, claims it idle */
    H_STALE,                 /* stale and made-up grant ids, RELEASE without a grant */
    H_LEASE_STORM,           /* leases past the cap, huge declarations, no recall answers */
    H_DEVICE_FLOOD,          /* declares its slots again and again */
    H_FLOOD,                 /* ACQUIRE and RELEASE as fast as it can */
    H_HOLDER,                /* holds and never releases (a hung process) */
    H_KINDS,
};

struct tenant_plan {
    char name[16];
    struct tenant_config config;
    bool gang;               /* its processes are ranks across GPUs */
    bool hostile;
    bool cap_lowered;        /* a config change put the cap below its count */
    double share_most, share_least; /* over the run (config changes) */
    uint64_t quantum_most;
    uint64_t cap_lowered_at;
};

/* A process's side of one GPU: what its threads do around the shim's own
 * record of it (gs_dev.h: the slice machine), and what the checks know. */
struct shim_dev {
    int gpu, slot;
    struct gs_dev *gs;       /* the shim's record of the GPU, in its process's table
                                (sim_proc.shim.devs[slot]): the real slice machine
                                (shim/gs_slice.c) is its `slice` */
    bool waiting;            /* the application's launch waits for admission */
    bool drainer_poked;      /* woken (START_ROUND): the drainer asks once the waking thread lets go */
    enum gs_slice_state step_before; /* (within a step of the shim's) the machine's state before */
    bool round;              /* a drainer round runs */
    uint64_t round_began;
    struct gs_slice_event round_reading; /* what the round tells at its end (gs_drain_round.c) */
    uint64_t drainer_at;     /* when the drainer asks again (0: when woken) */
    uint64_t done;           /* its launches on the GPU that finished */
    uint64_t last_done;      /* when the last one finished */
    uint64_t seen_done;      /* when the drainer could see it (later if the process was stopped) */
    /* what the checks know of the slice, from the server's messages */
    uint64_t held_grant;     /* the grant the process holds; 0: none */
    uint64_t held_deadline;
    bool revoked;            /* a REVOKE of held_grant arrived ... */
    uint64_t revoked_at;     /* ... then */
    uint64_t drain_began;    /* the machine entered DRAIN then */
    uint64_t hold_began;     /* it entered HOLD or DRAIN from neither then */
    uint64_t slice_ahead;    /* every GRANT of the slice held bounded what is ahead of the
                                GPU, to this at most; 0: one did not */
    uint64_t submitted_at_grant; /* launches handed to the driver before the slice */
    bool busy;               /* something of it is on the GPU ... */
    uint64_t empty_since;    /* ... or nothing has been since then */
    uint64_t slice_sent;     /* the grant of the slice held was sent then */
    uint64_t true_idle;      /* time in the slice with nothing of it on the GPU */
    uint64_t known_idle;     /* spells the shim was shown and that ended */
    uint64_t known_since;    /* a spell the shim was shown, still open (0: none) */
    /* the hostile tenants' own bookkeeping (sim_hostile.c) */
    uint64_t grant, last_released, deadline;
    /* device memory: what the process holds and counts is its ledger's
     * (sim_proc.lease, shim/gs_lease.c); here, the allocation that waits
     * for the server, as gs_reserve.c's thread waits */
    bool lease_wait;         /* an allocation waits for a lease */
    uint64_t lease_need;     /* ... of this many bytes */
    unsigned lease_tries;    /* the leases it asked for so far (gs_reserve.c gives up after RETRY_LIMIT) */
    bool lease_out;          /* its MEM_LEASE is unanswered */
    uint64_t lease_id;
    uint64_t lease_asked;    /* what that MEM_LEASE needs */
    uint64_t lease_sent;     /* when it went out */
    uint64_t lease_retry_at; /* after a RETRY */
    struct gs_answer lease_answer; /* its answer, done once it arrived (gs_conn_answer_arrived_locked) */
    uint64_t script_counted; /* what a scripted process counts (sim_script.c: its grants; no ledger) */
    uint64_t counted_at_close; /* what it counted as its last connection closed: the server's count
                                  of it as a ghost (shim_connection_ends) */
};

struct sim_proc {
    int id, tenant;
    bool alive, stopped;
    uint64_t continued_at;   /* its last SIGCONT */
    enum app_kind app;
    enum hostile_kind hostile;
    /* connection */
    int conn;                /* -1: none */
    bool welcomed;
    unsigned declared;       /* the slots whose DEVICE went out on this connection */
    uint64_t conn_gen;       /* drops messages of an old connection */
    bool end_noted;          /* its connection's end is in counted_at_close (cleared by the next) */
    uint64_t next_try, backoff;
    /* GPUs */
    int ngpus;
    struct shim_dev dev[SIM_RANKS];
    /* what shim/gs_dispatch.c keeps for the process: its table of GPUs
     * (shim_dev.gs), the wake-ups its gate thread owes, until when that
     * sleeps; in use (gs_dispatch_use) while the process's shim runs */
    struct gs_dispatch_state shim;
    /* what shim/gs_lease.c keeps for the process: the ledger of its leases
     * of device memory; in use (gs_lease_use) while its shim runs */
    struct gs_lease_state lease;
    uint64_t mem_tick_at;    /* the gate thread's next memory tick (0: none planned) */
    uint64_t mem_tick_after; /* ... which comes no sooner than this (gs_gate_thread.c, IDLE_TICK_NS) */
    uint64_t shim_gen, shim_at;
    uint64_t gate_due, gate_at; /* the gate thread's next look: planned, and with its lateness */
    bool gate_running;       /* the gate thread runs (its wake-ups owed, given as it sleeps) */
    /* the application */
    uint64_t app_gen;
    uint64_t item_len;       /* its items' device time */
    int depth, batch;
    int in_flight[SIM_RANKS];  /* its items on each GPU, not finished */
    int alloc_pending;         /* the allocation waiting for a lease; -1 none */
    bool started;
    uint64_t host_ns;        /* host work between batches */
    bool syncing, in_host;   /* waiting for its batch; doing host work */
    uint64_t host_until;
    int issued;              /* of the batch */
    uint64_t burst_until, idle_until;
    int64_t next_collective; /* gang ranks */
    int group;               /* gang: ranks of one job share it */
    uint64_t start_at, stop_at;
    uint64_t died_at;        /* killed then; 0 while alive */
    /* memory behaviour */
    bool uses_memory;
    uint64_t alloc_size;
    uint64_t allocs[8];      /* held allocations, 0 = none */
    /* hostile */
    uint64_t hostile_gen;
    uint64_t held_ns, hold_since; /* its own clock of held time */
    /* figures */
    uint64_t first_wait_start, first_wait_ns; /* its first slice's wait after a pause */
    bool first_wait_limited; /* its tenant had a limit when that wait began */
    bool first_wait_excused; /* work no slice admitted was on its GPU during it */
    bool first_wait_behind;  /* it had work of its own in flight when it began */
    bool longest_wait_behind; /* first_wait_behind of the wait in first_wait_ns */
    bool ghosted;            /* the server keeps its count without a connection */
    bool lease_lost;         /* a lease's answer was lost with its connection: the server may
                              * count the lease until the process declares again */
    bool returning;          /* went quiet, then wanted the GPU again */
};

/* ---- faults ---------------------------------------------------------------------- */

enum fault_kind {
    F_KILL,                  /* SIGKILL a process (a holder, if one holds) */
    F_STOP,                  /* SIGSTOP for `len`, then SIGCONT */
    F_RECONNECT,             /* a process closes its connection and reconnects */
    F_SERVER_RESTART,        /* the server dies and starts again after `len` */
    F_CONFIG,                /* a tenant's share, limit, quantum or cap changes */
    F_FORK,                  /* a process forks: a child of the same tenant and GPUs */
    F_CONT,                  /* SIGCONT after F_STOP */
};

struct fault {
    enum fault_kind kind;
    uint64_t at, len;
    int target;
    bool scripted;           /* F_CONFIG: `config` is the tenant's new one
                                (a named case's); else a random change */
    struct tenant_config config;
};

/* ---- the server ------------------------------------------------------------------ */

struct sim_conn {
    bool open;               /* at the server */
    bool closing;            /* dropped by the server: closed at its next event */
    int proc;
    struct client client;    /* the server's (server.h): its tenant, pid, slots */
    unsigned queued_to;      /* messages sent to it and not delivered */
    uint64_t last_to_proc, last_to_server; /* keep each direction in order */
    int tenant;
};

#define SIM_TIMERS (SIM_MAX_GPUS + 4) /* the server's timers: the wake-up, one per GPU */

/* The server: its scheduler state is dispatch.c's server_sched. */
struct sim_server {
    bool up;
    struct tenant tenants[SIM_MAX_TENANTS];     /* the server's (server.h) */
    struct device *gpus[SIM_MAX_GPUS];          /* what devices.c made of each GPU */
    uint64_t last_notice[SIM_MAX_GPUS]; /* when a GRANT for a new bound alone last went out */
    /* its timers (timer_init, sim_driver.c): armed ones wait in the event
     * queue, each event with the generation it was armed in */
    struct timer *timers[SIM_TIMERS];
    uint64_t timer_gen[SIM_TIMERS];
    int ntimers;
    uint64_t started_at;
    int starts;
    bool tenant_gone[SIM_MAX_TENANTS]; /* removed from the configuration
                                          (server_tenant_removed), not added
                                          again: none of its processes connects */
};

/* ---- a run ------------------------------------------------------------------ */

/* Planted bugs of the shim's model (the scheduler's are patched in: see
 * test/sim/plant.py). */
enum sim_flags {
    SIM_TRACE = 1,
};

struct figures {
    /* per tenant, per GPU */
    uint64_t held[SIM_MAX_TENANTS][SIM_MAX_GPUS];      /* by the server's grants */
    uint64_t max_wait[SIM_MAX_TENANTS][SIM_MAX_GPUS];  /* longest wait while eligible */
    uint64_t wait_since[SIM_MAX_TENANTS][SIM_MAX_GPUS];
    uint64_t wait_ungated_at[SIM_MAX_TENANTS][SIM_MAX_GPUS]; /* gpu_ungated_busy then */
    uint64_t max_held[SIM_MAX_TENANTS][SIM_MAX_GPUS];  /* its longest slice */
    /* idle time a slice's GRANT left on its way to the process, charged
     * to its tenant beyond what the scheduler refunds (sim_check.c,
     * check_slice_held), after the warm-up; of the slice now held, the
     * grant and how long its GRANT took to arrive */
    uint64_t grant_idle_charged[SIM_MAX_TENANTS][SIM_MAX_GPUS];
    uint64_t grant_last[SIM_MAX_TENANTS][SIM_MAX_GPUS];
    uint64_t grant_transit[SIM_MAX_TENANTS][SIM_MAX_GPUS];
    /* a latency tenant due on a GPU a batch tenant holds (sim_check.c):
     * since when, and the most its preemption may take meanwhile */
    uint64_t latency_due_since[SIM_MAX_GPUS], latency_due_bound[SIM_MAX_GPUS];
    uint64_t latency_due_waits, latency_due_max; /* episodes, the longest */
    /* a batch holder of d's slice unbounded while a latency tenant names
     * d (sim_check.c): since when; 0 none */
    uint64_t unbounded_since[SIM_MAX_GPUS];
    uint64_t grants;
    uint64_t events, steps, messages;
};

struct script;

/* An event's place in the queue: its time in the high half, its seq in
 * the low one, so that one comparison orders events by time, then by
 * posting (one a heap walk makes without a branch to mispredict). */
__extension__ typedef unsigned __int128 heap_key;

struct world {
    uint64_t seed;
    unsigned flags;
    bool exact;              /* messages arrive as they are sent and the
                                server's timers fire on time: a scripted
                                case's node (sim_script.c), the fuzz
                                target's */
    struct script *script;   /* that case's harness; NULL in other runs */
    bool check_sched;        /* after every event (and every step outside
                                one), the scheduler's state is checked
                                whole (sim_check_sched.c) */
    /* what an APP_DRIVEN process receives goes to its driver (NULL: nowhere) */
    void (*driven_receive)(struct world *w, struct sim_proc *p, const struct gs_msg *m);
    struct rng rng;
    uint64_t now, end, seq;
    int nfree, nheap;        /* of the event queue, below */
    /* the node */
    int ngpus, ntenants, nprocs, nconns, nfaults;
    struct sim_gpu gpu[SIM_MAX_GPUS];
    struct tenant_plan tenant[SIM_MAX_TENANTS];
    struct sim_proc proc[SIM_MAX_PROCS];
    struct sim_conn conn[SIM_MAX_CONNS];
    struct fault fault[16];
    struct sim_server server;
    int mem_in_flight;       /* events that change memory counts, pending */
    int mem_in_flight_of[SIM_MAX_TENANTS]; /* ... messages of a tenant's connections */
    bool mem_changed;        /* such an event was handled since the last check */
    int holding[SIM_MAX_TENANTS][SIM_MAX_GPUS];  /* its processes holding the GPU */
    uint64_t holding_since[SIM_MAX_TENANTS][SIM_MAX_GPUS];
    int wanting[SIM_MAX_TENANTS][SIM_MAX_GPUS];  /* its processes waiting for it */
    bool over_cap_excused[SIM_MAX_TENANTS];      /* uncounted allocations under `open` */
    bool limit_changed[SIM_MAX_TENANTS];
    uint64_t limit_changed_at[SIM_MAX_TENANTS]; /* its limit's last change */
    bool stalls;             /* faults that stop the world's progress for a while
                                (SIGSTOP, a server restart, a hung holder) */
    uint64_t warmup;         /* figures count from here */
    double share_tolerance;  /* a clean run's shares (sim_check.c); 0: the
                                default, SHARE_TOLERANCE */
    uint64_t busy_at_warmup[SIM_MAX_GPUS][SIM_MAX_TENANTS];
    bool warm;
    enum on_server_down policy;
    double late_wakes;       /* the share of the shim's gate thread wake-ups
                                that run late by 0.1 to 2 ms (0.05; a named
                                case may make the machine busier) */
    /* what the scenario promises, for the end-of-run figures */
    bool clean;              /* honest deep-queue tenants on GPU 0, nothing else */
    bool honest_pair;        /* two honest deep-queue tenants share GPU 0
                                beside hostile ones: their ratio holds */
    int honest_a, honest_b;
    struct figures fig;
    /* the first broken invariant */
    bool failed;
    char failure[512];
    /* the event queue: a binary heap of indexes into pool (last: a run
     * resets everything above, not these) */
    int free_list[SIM_EVENTS];
    struct heap_entry {      /* the key beside the index: a heap walk reads no event */
        heap_key key;        /* the event's at, then its seq (heap_key_of) */
        int idx;
    } heap[SIM_EVENTS];
    struct event pool[SIM_EVENTS];
};

/* sim_world.c */
/* What a run's node is made of: scenario_make (from the seed), or a named
 * case's (sim_cases.c). */
typedef void scenario_fn(struct world *w);
/* One run of `duration` simulated ns on the node `make` makes. */
void world_run_for(struct world *w, uint64_t seed, unsigned flags, uint64_t duration, scenario_fn *make);
/* The same a step at a time (a scripted case): a run reset, its node made
 * by the caller, started (the server, the processes' first steps, the
 * faults), advanced to one time after another (every event due by then
 * handled, those its handling posts for then included; the clock then
 * moves there), and finished (the checks at the end, the server
 * stopped). world_next_at: when the next event is due (UINT64_MAX: none,
 * or the run failed). */
void world_reset(struct world *w, uint64_t seed, unsigned flags, uint64_t duration);
/* world_reset for a world that world_reset cleared before: of its arrays,
 * only what its last run counted (GPUs, tenants, processes, connections,
 * faults) is cleared again, and of a GPU not its queue of items (each is
 * written whole before it is read). For many small runs (the scheduler's
 * fuzz target): the whole world is megabytes. */
void world_reuse(struct world *w, uint64_t seed, unsigned flags, uint64_t duration);
void world_start(struct world *w);
void world_advance(struct world *w, uint64_t until);
uint64_t world_next_at(const struct world *w);
void world_finish(struct world *w);
void post(struct world *w, uint64_t at, enum ev_kind kind, int a, uint64_t gen);
void post_msg(struct world *w, uint64_t at, enum ev_kind kind, int a, const struct gs_msg *m, uint64_t sent);
void trace(struct world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(struct world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* sim_scenario.c */
void scenario_make(struct world *w);
/* The parts of a node, for scenario_make and the named cases: a tenant
 * (t<n>: share, no limit, a 20 ms quantum, batch), a process of it (on
 * GPU 0, items of 1 ms, depth 8, batch 4, from time 0), a fault. */
struct tenant_plan *scenario_tenant(struct world *w, double share);
struct sim_proc *scenario_proc(struct world *w, int tenant, enum app_kind app);
struct fault *scenario_fault(struct world *w, enum fault_kind kind, int target, uint64_t at, uint64_t len);
/* Traces what the node is made of (its first lines), as `kind`. */
void scenario_describe(struct world *w, const char *kind);

/* sim_cases.c: the named cases (sim --case NAME): a node each; and the
 * scripted cases (sim_script.c), a history each */
typedef void script_fn(struct script *s);
struct sim_case {
    const char *name;
    const char *what;        /* what it shows, in a line */
    scenario_fn *make;       /* a node's case: its node */
    script_fn *script;       /* a scripted case: its history (make is NULL) */
    unsigned seconds;        /* a node's case: how long it runs unless told
                                (0: as long as a generated run) */
};
extern const struct sim_case sim_cases[];
extern const int sim_ncases;
extern const struct sim_case sim_scripted_cases[];
extern const int sim_nscripted_cases;
/* The case of that name, either kind; NULL if none. */
const struct sim_case *sim_case_find(const char *name);
/* One run of a scripted case (as world_run_for runs a node). */
void script_run(struct world *w, uint64_t seed, unsigned flags, const struct sim_case *c);

/* sim_server.c */
void server_start(struct world *w);
void server_stop(struct world *w);
void server_receive(struct world *w, int conn, const struct gs_msg *m, uint64_t sent);
void server_closed(struct world *w, int conn);
/* sim_driver.c */
void server_timer(struct world *w, int timer, uint64_t gen);
/* The world whose run is under way (world_run_for): what now_ns() and the
 * rest of sim_driver.c act on. One run at a time per process. */
extern struct world *sim_world;
int sim_conn_of(const struct world *w, const struct client *c);
void send_to_proc(struct world *w, int conn, const struct gs_msg *m);
void drop_conn(struct world *w, int conn, const char *reason);
int gpu_of_device(const struct world *w, const struct device *d);
/* The server's loop wakes up `late` ns after the time GPU g's armed timer
 * asked for (a scripted case's busy loop); that time (0: it is not armed,
 * nothing moves). */
uint64_t server_timer_late(struct world *w, int g, uint64_t late);
void server_process_gone(struct world *w, int proc);
/* A process connects: a new connection (its HELLO follows). */
int server_connect(struct world *w, int proc);
/* Sends m to the server on conn, after a transport delay. */
void send_to_server(struct world *w, int conn, const struct gs_msg *m);
/* The process closes conn (exit, kill, reconnect). */
void close_from_proc(struct world *w, int conn);
void server_tenant_changed(struct world *w, int t);
/* Tenant t is removed from the configuration (tenants.c's tenant_remove:
 * its connections closed, its entries gone from every GPU), or added to
 * it again with w->tenant[t].config (a new tenant of the same name). */
void server_tenant_removed(struct world *w, int t);
void server_tenant_added(struct world *w, int t);
/* The server's sweep of the GPUs nobody uses (devices.c's devices_sweep:
 * those unused for options.device_linger_ns are forgotten). */
void server_sweep(struct world *w);

/* sim_shim.c */
void shim_start(struct world *w, struct sim_proc *p);
void shim_receive(struct world *w, struct sim_proc *p, const struct gs_msg *m, uint64_t sent);
void shim_timer(struct world *w, struct sim_proc *p);
void shim_disconnected(struct world *w, struct sim_proc *p);
/* The process is gone (killed): its holds and waits end. */
void shim_gone(struct world *w, struct sim_proc *p);
/* The application wants to launch an item on its GPU number i: admitted
 * through a slice (the caller queues it), admitted past the slice's
 * deadline before the gate thread looked (an overrun) or ungated with no
 * server under `open` (the caller queues either excused: no slice the
 * server knows of), or it must wait (the shim calls app_admitted when it
 * may ask again). */
enum shim_admit { SHIM_WAIT, SHIM_GATED, SHIM_OVERRUN, SHIM_UNGATED };
enum shim_admit shim_launch(struct world *w, struct sim_proc *p, int i);
/* Tenant t's wait for GPU g so far, less the device time spent meanwhile
 * on work queued ungated (a wait must be running). */
uint64_t wait_so_far(const struct world *w, int t, int g);
/* One of its items finished; it was submitted at `submitted`. */
void shim_item_done(struct world *w, struct sim_proc *p, int i, uint64_t submitted);
void shim_synced(struct world *w, struct sim_proc *p, int i);
void shim_alloc(struct world *w, struct sim_proc *p, int i, uint64_t bytes, int which);
void shim_free(struct world *w, struct sim_proc *p, int i, int which);
void shim_schedule(struct world *w, struct sim_proc *p);
/* What the process counts with the server on its GPU number i, and what
 * it holds there (its ledger's, shim/gs_lease.c). */
uint64_t shim_count(const struct sim_proc *p, int i);
uint64_t shim_held(const struct sim_proc *p, int i);
/* Its connection ends, as the first of the process and the server sees it
 * (a close, a drop): notes what it counts (shim_dev.counted_at_close).
 * Without a connection its ledger still gives headroom back, and the
 * MEM_FREE it would send is covered by its next declaration. */
void shim_connection_ends(struct sim_proc *p);
bool shim_policy_open(struct world *w, const struct sim_proc *p);
/* What the stand-ins (sim_shim_conn.c) for the rest of the shim below
 * gs_dispatch.c and gs_gate_messages.c do, for the process whose shim runs
 * (shim_current): a message sent (about gd: once welcomed, DEVICE first;
 * 0, or -1 when it is not sent), DEVICE for gd once per connection, the
 * connection made (HELLO) or lost, an answer arrived (the entry of the
 * lease it answers, or NULL), the launchers waiting for admission woken,
 * its drainers woken, its gate thread woken (it plans again). */
extern struct sim_proc *shim_current;
int shim_sends(struct world *w, struct sim_proc *p, struct gs_dev *gd, const struct gs_msg *m);
void shim_declares(struct world *w, struct sim_proc *p, struct gs_dev *gd);
bool shim_connects(struct world *w, struct sim_proc *p);
void shim_conn_lost(struct sim_proc *p);
struct gs_answer *shim_answer_arrived(struct sim_proc *p, uint64_t id, const struct gs_msg *m);
void shim_wake_launchers(struct world *w, struct sim_proc *p);
void shim_wake_drainers(struct world *w, struct sim_proc *p);
void shim_wake_gate(struct world *w, struct sim_proc *p);

/* sim_app.c */
void app_step(struct world *w, struct sim_proc *p);
void app_admitted(struct world *w, struct sim_proc *p, int i);
void app_alloc_done(struct world *w, struct sim_proc *p, int which, bool ok);
void gpu_submit(struct world *w, int g, struct sim_proc *p, uint64_t len, int64_t collective, enum shim_admit admit);
void gpu_event(struct world *w, int g, uint64_t gen);
void gpu_kill(struct world *w, int proc);
void gpu_excuse(struct world *w, int proc);
int gpu_tenant_in_flight(const struct world *w, int g, int except_tenant);
/* Whether g has work queued outside any slice (excused). */
bool gpu_excused_queued(const struct world *w, int g);
/* The device time g has spent so far on items queued ungated. */
uint64_t gpu_ungated_busy(const struct world *w, int g);

/* sim_hostile.c */
void hostile_start(struct world *w, struct sim_proc *p);
void hostile_act(struct world *w, struct sim_proc *p);
void hostile_receive(struct world *w, struct sim_proc *p, const struct gs_msg *m);

/* sim_script.c: the scripted processes' side (APP_SCRIPT) */
void script_receive(struct world *w, struct sim_proc *p, const struct gs_msg *m);
/* A GRANT for a new bound alone went out on conn (client_notify). */
void script_notice(struct world *w, int conn, const struct gs_msg *m);
/* The clock moves from now to `until`: the case's meters count the span. */
void script_meter(struct world *w, uint64_t until);

/* sim_check_sched.c: the scheduler's state consistent in itself (where
 * w->check_sched) */
void check_sched_state(struct world *w);

/* sim_check.c */
void check_after_step(struct world *w);
void check_end(struct world *w);
/* A message the server sends on c, whatever c's state (a GRANT, a
 * MEM_LEASED). */
void check_sent(struct world *w, const struct sim_conn *c, const struct gs_msg *m);
void check_submit(struct world *w, int g, const struct sim_proc *p, bool excused);
/* A GRANT of a new slice reached one of its tenant's processes; the
 * tenant's processes on GPU g held their slice for `held` and no more. */
void check_grant_arrived(struct world *w, const struct sim_proc *p, int g, uint64_t grant, uint64_t sent);
void check_slice_held(struct world *w, int t, int g, uint64_t held);
/* The server refuses a lease of `need` bytes to proc p's GPU g. */
void check_lease_refused(struct world *w, const struct sim_proc *p, int g, uint64_t need);

/* Kills a process (its connection closes, its GPU work stops). */
void proc_kill(struct world *w, struct sim_proc *p);
void proc_fault(struct world *w, int f);

#endif
