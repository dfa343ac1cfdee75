/*
 * The scripted cases' harness (sim_script.c): a history written by hand,
 * run on the simulation's node. The server is the simulation's (sim_server.c:
 * the production glue, dispatch.c and devices.c, and the scheduler);
 * the processes are scripted (APP_SCRIPT): each sends what its case says
 * when it says (HELLO, DEVICE, ACQUIRE, RELEASE, MEM_LEASE, a close, an
 * exit), and a busy one also gives back at once, asking again, each slice
 * the server revokes (it always has more work). The node has no transport
 * delays and the server's timers fire on time (world.exact): a message
 * arrives as it is sent, and everything it causes happens at that
 * instant, so a case replays exactly and its bounds can be exact.
 *
 * A case makes its node (script_gpus, script_tenant), starts it
 * (script_start: the clock at SCRIPT_START_NS), then acts and moves the
 * clock (script_run_for, script_until_granted); every action is carried
 * through to the end of its instant before the call returns. It judges
 * what it measured with script_check: device time held per tenant (the
 * scheduler's entries), the grants each process received, a GPU's state,
 * the time a GPU was granted to nobody while a slot waited for it (the
 * meters, from the server's state as the clock moves).
 *
 * Slot k of a scripted process names GPU k (script_declare), unless the
 * case points it at another (script_declare_as: how a process names a GPU
 * no more, as a real one does).
 */
#ifndef GPUSLICE_SIM_SCRIPT_H
#define GPUSLICE_SIM_SCRIPT_H

#include "sim.h"

#define SCRIPT_START_NS (1000 * MS) /* a case's first action: nothing comes before */
#define SCRIPT_QUANTUM_NS (20 * MS) /* every tenant's quantum, unless its case sets one */
#define SCRIPT_GRANT_SLACK_NS (2 * MS) /* what a case's bound on when a grant comes allows
                                          over the time it computes */

/* What a scripted process knows of one of its slots. */
struct script_slot {
    unsigned grants;            /* GRANTs received (extensions, joins and notices
                                   included) */
    uint64_t last_grant_ns;     /* when the last of them came */
    uint64_t last_ahead_ns;     /* and the bound it carried (ahead_ns) */
    uint64_t last_deadline;     /* and its deadline */
    unsigned notices;           /* of them, GRANTs for a new bound alone */
    uint64_t last_notice_ns;    /* when the last of those came */
    uint64_t least_notice_gap;  /* the least time between two of them */
    uint64_t held;              /* the grant it holds, as it knows: from its
                                   GRANT until it releases; 0 none */
    uint64_t asked_ns;          /* when it last asked (ACQUIRE, RELEASE with more) */
    unsigned grants_asked;      /* grants it had received then */
    uint64_t waited_ns;         /* time the server had its slot waiting */
};

struct script_proc {
    struct script *s;
    struct sim_proc *p;
    bool busy;                  /* always has work: gives back a revoked slice
                                   at once, asking again */
    struct script_slot slot[SIM_MAX_GPUS];
    uint32_t lease_status;      /* the last MEM_LEASED: enum gs_lease_status */
    uint64_t lease_granted;     /* and the bytes it granted */
    int lease_slot;             /* the slot of its last MEM_LEASE */
};

struct script {
    struct world *w;
    const char *name;
    bool started;
    unsigned checks, failures;
    char failure[512];          /* the first check that failed */
    struct script_proc procs[SIM_MAX_PROCS]; /* by process id */
    uint64_t unheld_wait_ns[SIM_MAX_GPUS]; /* time no process held the GPU while
                                              a slot waited for it */
};

static inline double script_ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

/* ---- the node, before script_start ---------------------------------------------------- */

void script_gpus(struct script *s, int n);
/* A tenant: batch, share `share`, no limit, SCRIPT_QUANTUM_NS, gang auto;
 * its number. Its configuration is w->tenant[t].config until the start. */
int script_tenant(struct script *s, const char *name, double share);
struct tenant_config *script_config(struct script *s, int t);
/* Starts the server; the clock then reads SCRIPT_START_NS. */
void script_start(struct script *s);

/* ---- processes -------------------------------------------------------------------- */

/* A process of tenant t, connected (its HELLO sent); it names no GPU yet. */
struct script_proc *script_process(struct script *s, int tenant, bool busy);
void script_declare(struct script_proc *sp, int gpu);
/* Slot `slot` names GPU `gpu` now (another than its own: the slot's GPU
 * is undeclared first, as devices.c does for a slot declared again). */
void script_declare_as(struct script_proc *sp, int slot, int gpu);
void script_acquire(struct script_proc *sp, int slot);
/* Gives back the grant it holds on the slot (as it knows), asking again if
 * `more`. */
void script_release(struct script_proc *sp, int slot, bool more);
/* Counts from now the wait script_until_granted measures (a process whose
 * slot waits already). */
void script_asks(struct script_proc *sp, int slot);
/* The process exits: its connection closes (if it has one), and a count
 * the server kept for it without one goes at the server's check of its
 * ghosts, now. */
void script_exit(struct script_proc *sp);
/* Its connection closes; the process lives on. */
void script_disconnect(struct script_proc *sp);
/* MEM_LEASE of `bytes` on the slot (need = want); the answer's status
 * (sp->lease_granted: the bytes granted). */
uint32_t script_lease(struct script_proc *sp, int slot, uint64_t bytes);

/* ---- the server ---------------------------------------------------------------------- */

/* Tenant t's configuration became `config` (the server reads its file). */
void script_tenant_changed(struct script *s, int t, struct tenant_config config);
/* GPU g's timer, armed now, fires `late` ns late (the server's loop is
 * busy); the time it was armed for (0: it is not armed, nothing moves). */
uint64_t script_timer_late(struct script *s, int g, uint64_t late);

/* ---- the clock ----------------------------------------------------------------------- */

void script_run_for(struct script *s, uint64_t ns);
void script_run_until(struct script *s, uint64_t at);
/* Runs until the process has been granted the slot since it last asked
 * (at once if it has been already), for at most `limit` past that; how
 * long after asking the grant came (`limit` if it did not). */
uint64_t script_until_granted(struct script_proc *sp, int slot, uint64_t limit);

/* ---- what is measured ------------------------------------------------------------------- */

static inline uint64_t script_now(const struct script *s)
{
    return s->w->now;
}
/* The server's GPU g (NULL until a process declares it). */
struct device *script_device(struct script *s, int g);
struct sched_tenant *script_sched_tenant(struct script *s, int t);
/* Tenant t's entry on GPU g; NULL if none. */
const struct device_tenant *script_entry(struct script *s, int g, int t);
/* The device time tenant t held GPU g so far (its entry's used_ns). */
uint64_t script_held_ns(struct script *s, int g, int t);
/* What tenant t counts of device memory on GPU g (its entry's mem_used). */
uint64_t script_mem_counted(struct script *s, int g, int t);
/* Whether the server has the process's slot holding its GPU's current grant. */
bool script_holds(const struct script_proc *sp, int slot);

/* One check: prints "ok" or "FAIL", the case and what was measured; a
 * failed one fails the run. */
void script_check(struct script *s, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
