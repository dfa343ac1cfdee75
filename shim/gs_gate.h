/*
 * The launch gate: a process submits GPU work on a device only while its
 * tenant holds that device's time slice from gpuslice-server.
 *
 * Per device the gate keeps an admission flag and a budget, read by
 * launching threads without a lock (the fast path); everything else is
 * the business of the gate thread (gs_client.c), which talks to the
 * server, and of one drainer thread per device, which waits for the
 * device's queue to empty. All cold state is guarded by gs_gate_lock.
 */
#ifndef GPUSLICE_GATE_H
#define GPUSLICE_GATE_H

#include "gs_driver.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/protocol.h"

#define GS_GATE_MAX_CTX 8

enum gs_dev_state {
    GS_DEV_NONE,   /* no slice, none asked for */
    GS_DEV_WANT,   /* ACQUIRE sent */
    GS_DEV_HOLD,   /* slice held: admission open while budget lasts */
    GS_DEV_DRAIN,  /* admission closed, waiting for the queue to empty */
};

struct gs_dev {
    /* Hot: read and counted by launching threads, no lock. */
    _Atomic int open;            /* admission open */
    _Atomic uint64_t admitted;   /* launches let through */
    _Atomic uint64_t budget;     /* admitted may reach this */
    _Atomic uint64_t submitted;  /* launches back from the driver */
    char pad[64];

    /* Cold: guarded by gs_gate_lock. */
    bool used;
    int slot;
    CUdevice ordinal;
    uint8_t uuid[16];
    bool declared;               /* DEVICE sent on this connection */
    enum gs_dev_state state;
    uint64_t grant, deadline_ns, slice_start_ns, last_released;
    uint64_t admitted_at_grant;  /* launches admitted before this slice */
    int waiters;                 /* threads blocked in the slow path */
    CUcontext ctxs[GS_GATE_MAX_CTX];
    int nctx;
    /* idle detection (gate thread) */
    uint64_t seen_admitted, quiet_since_ns;
    /* the drainer thread */
    pthread_t drainer;
    bool drainer_started;
    bool drain_requested;
    uint64_t completed;          /* launches known finished */
    uint64_t last_sync_end_ns;
    double kernel_ns;            /* estimated device time per launch; 0 = unknown */
    /* device memory this process holds on it, as counted by the server */
    uint64_t mem_held;
    uint64_t mem_cap;            /* the tenant's cap, as last reported */
};

/* Guards the cold state of every gs_dev and the gate thread's state;
 * gs_gate_cv wakes threads blocked in the slow path. */
extern pthread_mutex_t gs_gate_lock;
extern pthread_cond_t gs_gate_cv;
extern struct gs_dev gs_devs[GS_MAX_DEVICES];

/* The calling thread's device gate for its current context; NULL until
 * the slow path has resolved it, and again after a context change. */
extern __thread struct gs_dev *gs_tls_dev;

/* Set on the gate thread: opening admission then only marks
 * gs_wakeup_pending (under gs_gate_lock), and the gate thread broadcasts
 * gs_gate_cv after unlocking, so that a woken launcher finds the lock free
 * instead of waking once for the condition and again for the lock. */
extern __thread bool gs_defer_wakeups;
extern bool gs_wakeup_pending;

/* The slow path: resolves the device, starts the gate thread on first
 * use, and blocks until the launch may proceed. */
CUresult gs_gate_slow(struct gs_dev **out);

/* The gate of the calling thread's current device (created on first use,
 * cached per thread), or of a device by ordinal. */
CUresult gs_gate_current_device(struct gs_dev **out);
CUresult gs_gate_device_by_ordinal(CUdevice ordinal, struct gs_dev **out);

/* Called with gs_gate_lock held: (re)computes a held device's budget. */
void gs_gate_update_budget_locked(struct gs_dev *d, uint64_t now);
/* Called with gs_gate_lock held: closes admission and asks the drainer to
 * empty the queue. */
void gs_gate_begin_drain_locked(struct gs_dev *d);
/* Whether the drainer has emptied the queue after a drain request. */
bool gs_gate_drained_locked(const struct gs_dev *d);
/* Opens or closes every device unconditionally (server-down policy). */
void gs_gate_set_all_open_locked(bool open);

/* A context is being destroyed: forget it. */
void gs_gate_forget_ctx(CUcontext ctx);
void gs_gate_after_fork_child(void);

/* gs_client.c: the gate thread. */
void gs_client_start_locked(void);
void gs_client_wake(void);
bool gs_client_policy_open(void);
bool gs_client_connected_locked(void);
void gs_client_after_fork_child(void);
/* Blocks a launching thread until something may have changed: a message
 * from the server, a broadcast of gs_gate_cv, or 10 ms. Called with
 * gs_gate_lock held; returns with it held. */
void gs_client_wait_locked(void);
/* Sends a memory message for d and, for RESERVE and QUERY, waits for the
 * answer. Called with gs_gate_lock held. Returns 0 with *result filled (for
 * RESERVE and QUERY), or -1 when the server is unreachable and the policy
 * is open: the caller then goes ahead uncounted by the server. Under the
 * wait policy it waits for the server instead. */
int gs_client_mem_call_locked(struct gs_dev *d, enum gs_msg_type type, uint64_t bytes,
                              struct gs_msg_mem_result *result);

uint64_t gs_now_ns(void);

#endif
