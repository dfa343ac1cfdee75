/*
 * fakecuda host synchronization: how a thread waits in cuCtxSynchronize,
 * cuStreamSynchronize, cuEventSynchronize and the synchronous copies. As
 * the "cuCtxCreate" reference describes the CU_CTX_SCHED_* flags:
 *   - CU_CTX_SCHED_SPIN: the thread spins, burning its CPU until the work
 *     is done (see SPIN_YIELD_NS);
 *   - CU_CTX_SCHED_YIELD: it spins but yields its CPU to other threads on
 *     every round;
 *   - CU_CTX_SCHED_BLOCKING_SYNC: it blocks (sleeps) until the work is done;
 *   - CU_CTX_SCHED_AUTO (0, the default): with C active contexts in the
 *     process and P logical processors, YIELD if C > P, otherwise SPIN.
 * An event created with CU_EVENT_BLOCKING_SYNC blocks in
 * cuEventSynchronize whatever the context says ("cuEventCreate").
 */
#include "fc_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

/* Threads blocked in fc_wait_fences_locked and the condition they sleep
 * on; guarded by the exec lock. */
static pthread_cond_t fences_done = PTHREAD_COND_INITIALIZER;
static unsigned blocked_waiters;

/* Logical processors (P), read once; written under pthread_once. */
static pthread_once_t cpus_once = PTHREAD_ONCE_INIT;
static long logical_cpus = 1;

static void load_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    logical_cpus = n > 0 ? n : 1;
}

enum fc_wait_policy fc_ctx_wait_policy_locked(const struct fc_ctx *ctx)
{
    switch (ctx->flags & CU_CTX_SCHED_MASK) {
    case CU_CTX_SCHED_SPIN:
        return FC_WAIT_SPIN;
    case CU_CTX_SCHED_YIELD:
        return FC_WAIT_YIELD;
    case CU_CTX_SCHED_BLOCKING_SYNC:
        return FC_WAIT_BLOCK;
    default:
        pthread_once(&cpus_once, load_cpus);
        return (long)fc_live_contexts_locked() > logical_cpus ? FC_WAIT_YIELD : FC_WAIT_SPIN;
    }
}

static bool all_done(struct fc_fence **fences, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!atomic_load_explicit(&fences[i]->done, memory_order_acquire))
            return false;
    return true;
}

/* A spinning thread still yields its CPU every SPIN_YIELD_NS: fakecuda's
 * device is made of host threads, which a real GPU is not, and on a small
 * machine spinners would otherwise starve them (the device's utilization
 * drops). The spinner burns its CPU all the same whenever nothing else
 * wants it. */
#define SPIN_YIELD_NS 5000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void fc_wait_fences_locked(struct fc_fence **fences, size_t count, enum fc_wait_policy policy)
{
    if (policy == FC_WAIT_BLOCK && !all_done(fences, count)) {
        for (size_t i = 0; i < count; i++)
            fences[i]->waiters++;
        while (!all_done(fences, count)) {
            blocked_waiters++;
            pthread_cond_wait(&fences_done, fc_exec_mutex());
            blocked_waiters--;
        }
        for (size_t i = 0; i < count; i++)
            fences[i]->waiters--;
    } else if (!all_done(fences, count)) {
        /* The references keep the fences allocated while unlocked. */
        fc_exec_unlock();
        uint64_t next_yield = fc_now_ns() + SPIN_YIELD_NS;
        while (!all_done(fences, count)) {
            if (policy == FC_WAIT_YIELD) {
                sched_yield();
            } else if (fc_now_ns() >= next_yield) {
                sched_yield();
                next_yield = fc_now_ns() + SPIN_YIELD_NS;
            } else {
                cpu_relax();
            }
        }
        fc_exec_lock();
    }
    for (size_t i = 0; i < count; i++)
        fc_fence_unref(fences[i]);
}

void fc_wake_waiters_locked(void)
{
    if (blocked_waiters)
        pthread_cond_broadcast(&fences_done);
}

/* Appends a reference to fence to the list unless it is done. */
static bool collect(struct fc_fence ***list, long *count, long *cap, struct fc_fence *fence)
{
    if (!fence || atomic_load(&fence->done))
        return true;
    if (*count == *cap) {
        long grown_cap = *cap ? *cap * 2 : 8;
        struct fc_fence **grown = realloc(*list, (size_t)grown_cap * sizeof *grown);
        if (!grown)
            return false;
        *list = grown;
        *cap = grown_cap;
    }
    (*list)[(*count)++] = fc_fence_ref(fence);
    return true;
}

static long collect_failed(struct fc_fence **list, long count)
{
    for (long i = 0; i < count; i++)
        fc_fence_unref(list[i]);
    free(list);
    return -1;
}

long fc_stream_sync_fences_locked(struct fc_stream *stream, struct fc_fence ***out)
{
    struct fc_fence **list = NULL;
    long count = 0, cap = 0;
    if (!collect(&list, &count, &cap, stream->last))
        return collect_failed(list, count);
    /* The legacy stream waits for all prior work of the blocking streams. */
    if (stream->kind == FC_STREAM_LEGACY)
        for (struct fc_stream *s = stream->ctx->streams; s; s = s->next)
            if (s != stream && fc_stream_blocking(s) && !collect(&list, &count, &cap, s->last))
                return collect_failed(list, count);
    *out = list;
    return count;
}

long fc_ctx_sync_fences_locked(struct fc_ctx *ctx, struct fc_fence ***out)
{
    struct fc_fence **list = NULL;
    long count = 0, cap = 0;
    for (struct fc_stream *s = ctx->streams; s; s = s->next)
        if (!collect(&list, &count, &cap, s->last))
            return collect_failed(list, count);
    *out = list;
    return count;
}
