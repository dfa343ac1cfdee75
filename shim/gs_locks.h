/*
 * Every lock of libgpuslice.so, in one table (gs_locks.c defines them).
 * A thread that holds one may take only locks further down the table;
 * atfork_prepare takes all of them, in this order.
 *
 *  #  lock            guards                                         held across
 *  1  driver_init     loading the real driver (gs_driver.c)          dlopen of libcuda.so.1
 *  2  nvml_init       loading the real NVML (gs_nvml.c)              dlopen of libnvidia-ml.so.1
 *  3  births          context creations and their footprints         the driver's context creation
 *                     (gs_ctxmem.c: measured, primaries)
 *  4  graphs          graphs' allocation nodes (gs_graphmem.c)       reading a device's graph memory
 *  5  pools           stream-ordered pools (gs_mempools.c, gs_pools.c) a pool allocation, reading pools
 *  6  capture         a capture beginning or a stream dying, against recording an event
 *                     a shim thread's "not capturing? record" (gs_capture.c)
 *  7  gate            the slice machines and everything of a GPU     a send on the socket
 *                     (gs_dispatch.h), the connection and its
 *                     answers (gs_conn.c), the gate thread's state,
 *                     contexts (gs_contexts.c), drainer marks and
 *                     flushes (gs_drain.c), graph costs
 *                     (gs_graphcost.c), NVML's waiting requests
 *  8  table           counted allocations and VMM mappings (gs_memory.c)
 *  9  lease           leases of device memory (gs_lease.c)
 * 10  usage_cache     NVML's cached answers and handles (gs_nvml_usage.c)
 *
 * No lock is held across a round trip to the server, a wait for admission,
 * or a cuEventSynchronize / cuStreamSynchronize / cuCtxSynchronize: the
 * gate lock is released while waiting (its condition variable gs_gate_cv),
 * and no other lock is held then. In builds with assertions (every build
 * but --buildtype=release, where NDEBUG is defined) each thread keeps the
 * set of table locks it holds, and:
 *   - taking a lock while holding one further down the table,
 *   - waiting for the server or for admission while holding any lock but
 *     the gate lock (which the wait releases),
 *   - a shim thread's cuEventSynchronize while holding any lock
 * print the lock held and where, and abort (gs_locks_check_*).
 *
 * Condition variables, each used with the gate lock: gs_gate_cv (launches
 * waiting for admission, requests waiting for the server's answer) and
 * the drainers' (gs_drainer_cv, on CLOCK_MONOTONIC), both here; ctx_cv
 * (gs_contexts.c) wakes a context's closer when its last use ends.
 */
#ifndef GPUSLICE_LOCKS_H
#define GPUSLICE_LOCKS_H

#include <pthread.h>
#include <stdbool.h>

enum gs_lock {
    GS_LOCK_DRIVER_INIT,
    GS_LOCK_NVML_INIT,
    GS_LOCK_BIRTHS,
    GS_LOCK_GRAPHS,
    GS_LOCK_POOLS,
    GS_LOCK_CAPTURE,
    GS_LOCK_GATE,
    GS_LOCK_TABLE,
    GS_LOCK_LEASE,
    GS_LOCK_USAGE_CACHE,
    GS_LOCK_COUNT
};

/* The locks, by enum gs_lock. Take them with gs_lock/gs_unlock (which keep
 * the checks above), or hand them to pthread_cond_wait with gs_lock_mutex. */
void gs_lock(enum gs_lock lock);
void gs_unlock(enum gs_lock lock);
bool gs_trylock(enum gs_lock lock);
pthread_mutex_t *gs_lock_mutex(enum gs_lock lock);

/* The gate lock's condition variable: launches waiting for admission, and
 * requests waiting for the server's answer, wait on it. */
extern pthread_cond_t gs_gate_cv;

/* Waits on gs_gate_cv (gate lock held) for a broadcast or `ms`
 * milliseconds (gs_gate_cv measures time on CLOCK_REALTIME). */
void gs_gate_cv_wait_ms_locked(long ms);

/* The drainers' condition variable (used with the gate lock; its waits
 * time out on CLOCK_MONOTONIC). */
pthread_cond_t *gs_drainer_cv(void);

/* Wakes every thread waiting on gs_gate_cv, or on the drainers' condition
 * variable (with the gate lock or without). The one way gs_dispatch.c
 * wakes them: the simulation (test/sim) stands in for these two. */
void gs_gate_cv_broadcast(void);
void gs_drainer_cv_broadcast(void);

/* A thread is about to wait for the server's answer, or for admission
 * (what): it holds no lock but the gate lock, which the wait releases. */
void gs_locks_check_wait(const char *what);
/* A shim thread is about to wait for the GPU (what): it holds no lock. */
void gs_locks_check_none(const char *what);

/* fork(): every lock in the table's order, and back (the parent), or
 * unlocked and the condition variables made anew (the child, whose only
 * thread is the one that forked). Called by gs_fork.c's handlers; a second
 * set, registered once the real driver is loaded (its handlers, registered
 * when it loaded, must run between ours), does the same where it runs
 * first (see gs_locks.c). */
void gs_locks_before_fork(void);
void gs_locks_after_fork_parent(void);
void gs_locks_after_fork_child(void);
void gs_locks_fork_after_driver(void);

#endif
