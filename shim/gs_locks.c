/*
 * The shim's locks (the table is in gs_locks.h): their definitions, the
 * checks of their order, and what fork() does with them.
 *
 * Owns: the mutexes, gs_gate_cv and the drainers' condition variable, and
 * each thread's set of locks held (thread-local, its own).
 */
#include "gs_locks.h"
#include "gs_glibc_compat.h"
#include "gs_log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t locks[GS_LOCK_COUNT] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
};
_Static_assert(GS_LOCK_COUNT == 10, "one initializer per lock");

static const char *const names[GS_LOCK_COUNT] = {
    "driver_init", "nvml_init", "births", "graphs", "pools", "capture", "gate", "table", "lease", "usage_cache",
};

pthread_cond_t gs_gate_cv = PTHREAD_COND_INITIALIZER;
/* Wakes drainers; used with the gate lock; waits time out on
 * CLOCK_MONOTONIC (set up by init_drainer_cv, once, and again in a forked
 * child). */
static pthread_cond_t drainer_cv;
static pthread_once_t drainer_cv_once = PTHREAD_ONCE_INIT;

/* The locks the calling thread holds, one bit per enum gs_lock. */
static __thread unsigned held;

#ifndef NDEBUG
/* A broken rule of the table: a bug in the shim, found by the tests. */
__attribute__((noreturn)) static void broken(const char *rule, enum gs_lock lock, const char *what)
{
    char holding[160] = "";
    size_t n = 0;
    for (int i = 0; i < GS_LOCK_COUNT && n + 16 < sizeof holding; i++)
        if (held & (1u << i))
            n += (size_t)snprintf(holding + n, sizeof holding - n, "%s%s", n ? ", " : "", names[i]);
    gs_log(GS_LOG_ERROR, "lock table broken: %s %s while holding %s", rule, lock < GS_LOCK_COUNT ? names[lock] : what,
           n ? holding : "nothing");
    abort();
}
#endif

void gs_lock(enum gs_lock lock)
{
#ifndef NDEBUG
    /* A lock of the table (so that the compiler, too, knows the index is
     * in bounds below), and only one further down it than those held. */
    if ((unsigned)lock >= GS_LOCK_COUNT)
        broken("took an unknown lock", lock, "?");
    if (held >> lock)
        broken("took", lock, NULL);
#endif
    pthread_mutex_lock(&locks[lock]);
    held |= 1u << lock;
}

bool gs_trylock(enum gs_lock lock)
{
    if (pthread_mutex_trylock(&locks[lock]) != 0)
        return false;
    held |= 1u << lock;
    return true;
}

void gs_unlock(enum gs_lock lock)
{
    held &= ~(1u << lock);
    pthread_mutex_unlock(&locks[lock]);
}

void gs_gate_cv_wait_ms_locked(long ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&gs_gate_cv, &locks[GS_LOCK_GATE], &until);
}

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

void gs_gate_cv_broadcast(void)
{
    pthread_cond_broadcast(&gs_gate_cv);
}

void gs_drainer_cv_broadcast(void)
{
    pthread_cond_broadcast(gs_drainer_cv());
}

pthread_mutex_t *gs_lock_mutex(enum gs_lock lock)
{
    return &locks[lock];
}

void gs_locks_check_wait(const char *what)
{
#ifndef NDEBUG
    if (held & ~(1u << GS_LOCK_GATE))
        broken("waited for", GS_LOCK_COUNT, what);
#else
    (void)what;
#endif
}

void gs_locks_check_none(const char *what)
{
#ifndef NDEBUG
    if (held)
        broken("waited for", GS_LOCK_COUNT, what);
#else
    (void)what;
#endif
}

/* ---- fork ---------------------------------------------------------------------- */

/* fork() runs the prepare handlers in the reverse order of their
 * registration, the parent's and child's in that order. Ours must take our
 * locks before the real driver's prepare handler takes its own: a thread
 * may hold one of ours (the pools', the capture lock) across a driver call
 * that needs one of the driver's. So a second set is registered once the
 * driver is loaded (gs_locks_fork_after_driver), and runs before the
 * driver's; the first set (gs_fork.c's, at load) takes the locks only in
 * a fork the second did not. Which set took them is the forking thread's
 * to know (it is the child's only thread). */
static __thread bool took_first, took_late;
static _Atomic int late_registered;

static void lock_all(void)
{
    for (int i = 0; i < GS_LOCK_COUNT; i++)
        gs_lock((enum gs_lock)i);
}

static void unlock_all(bool child)
{
    for (int i = GS_LOCK_COUNT - 1; i >= 0; i--)
        gs_unlock((enum gs_lock)i);
    /* In the child nobody waits on a condition variable: made anew. */
    if (child) {
        pthread_cond_init(&gs_gate_cv, NULL);
        init_drainer_cv();
    }
}

static void late_prepare(void)
{
    lock_all();
    took_late = true;
}

static void late_parent(void)
{
    if (took_late)
        unlock_all(false);
    took_late = false;
}

static void late_child(void)
{
    if (took_late)
        unlock_all(true);
    took_late = false;
}

void gs_locks_fork_after_driver(void)
{
    if (atomic_exchange(&late_registered, 1) == 0)
        pthread_atfork(late_prepare, late_parent, late_child);
}

void gs_locks_before_fork(void)
{
    if (took_late)
        return;
    lock_all();
    took_first = true;
}

void gs_locks_after_fork_parent(void)
{
    if (took_first)
        unlock_all(false);
    took_first = false;
}

void gs_locks_after_fork_child(void)
{
    if (took_first)
        unlock_all(true);
    took_first = false;
}
