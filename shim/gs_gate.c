/*
 * The launch gate's slow path and device bookkeeping (see gs_gate.h). The
 * fast path is gs_hook_launch_enter in gs_hooks.h; the drainers are in
 * gs_drain.c.
 *
 * Bounding the overrun: a real driver lets a process queue 1024 launches,
 * which may be seconds of work. So admission is counted against a budget:
 * the time left in the slice, less the device time already queued, divided
 * by the measured device time per kernel launch. Graph launches are
 * admitted one by one against their own measured device time (gs_graph.c).
 * Admission stops at the deadline (or on REVOKE, or when the tenant goes
 * idle); the drainer then waits for the queue to empty and the gate thread
 * releases the slice.
 */
#include "gs_gate.h"
#include "gs_capture.h"
#include "gs_contexts.h"
#include "gs_glibc_compat.h"
#include "gs_log.h"

#include <string.h>
#include <time.h>

pthread_mutex_t gs_gate_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t gs_gate_cv = PTHREAD_COND_INITIALIZER;
struct gs_dev gs_devs[GS_MAX_DEVICES];
__thread struct gs_dev *gs_tls_dev;
__thread struct gs_launch_cache gs_tls_launches[GS_LAUNCH_CACHE];
__thread bool gs_defer_wakeups;
unsigned gs_wakes_owed; /* see gs_gate.h; guarded by gs_gate_lock */

#define FIRST_SLICE_ALLOWANCE 4 /* launches, before any time per launch is known */

uint64_t gs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool gs_gate_queue_empty_locked(const struct gs_dev *d)
{
    uint64_t submitted = atomic_load(&d->submitted);
    return d->completed >= submitted && atomic_load(&d->admitted) == submitted;
}

bool gs_gate_nothing_fits_locked(const struct gs_dev *d, uint64_t now)
{
    return gs_gate_queue_empty_locked(d) && atomic_load(&d->admitted) > d->admitted_at_grant &&
           ((d->kernel_ns > 0 && now + (uint64_t)d->kernel_ns >= d->deadline_ns) ||
            (d->waiting_graph_ns && now + d->waiting_graph_ns > d->deadline_ns));
}

/* Everything not known to have finished, as counted at the last drainer
 * round or launched since. */
static double queued_since_round_ns(const struct gs_dev *d)
{
    uint64_t admitted = atomic_load(&d->admitted);
    uint64_t submitted = atomic_load(&d->submitted);
    uint64_t graphs = atomic_load(&d->graphs_submitted) - d->graphs_completed;
    uint64_t graph_ns = atomic_load(&d->graph_ns_submitted) - d->graph_ns_completed;
    uint64_t launches = (submitted > d->completed ? submitted - d->completed : 0) + (admitted - submitted);
    uint64_t kernels = launches > graphs ? launches - graphs : 0;
    return (double)kernels * d->kernel_ns + (double)graph_ns;
}

void gs_gate_note_round_locked(struct gs_dev *d)
{
    d->queued_at_round_ns = queued_since_round_ns(d);
}

double gs_gate_queued_ns_locked(const struct gs_dev *d)
{
    double queued = queued_since_round_ns(d);
    /* While the slice is held the device works through what was queued at
     * the last round: between rounds, count that part down with time. */
    if (d->state == GS_DEV_HOLD && d->last_sync_end_ns > d->slice_start_ns) {
        double ran = (double)(gs_now_ns() - d->last_sync_end_ns);
        queued -= ran < d->queued_at_round_ns ? ran : d->queued_at_round_ns;
    }
    return queued > 0 ? queued : 0;
}

void gs_gate_update_budget_locked(struct gs_dev *d, uint64_t now)
{
    if (d->state != GS_DEV_HOLD)
        return;
    uint64_t admitted = atomic_load(&d->admitted);
    uint64_t submitted = atomic_load(&d->submitted);
    uint64_t allowance;
    if (now >= d->deadline_ns) {
        allowance = 0;
    } else if (d->catch_up) {
        allowance = admitted > d->admitted_at_grant ? 0 : 1;
    } else if (!d->drainer_started) {
        /* Nothing measures or counts finished work (the drainer could not
         * start): admission is open until the deadline, unbounded. */
        allowance = 1u << 30;
    } else if (d->kernel_ns <= 0) {
        allowance = FIRST_SLICE_ALLOWANCE;
        if (admitted - d->completed >= FIRST_SLICE_ALLOWANCE)
            allowance = 0;
    } else {
        double left = (double)(d->deadline_ns - now);
        double fits = (left - gs_gate_queued_ns_locked(d)) / d->kernel_ns;
        allowance = fits > 0 ? (uint64_t)fits : 0;
        /* Always let one launch through at the start of a slice: a kernel
         * longer than the slice must still run (its overrun is charged). */
        if (allowance == 0 && gs_gate_queue_empty_locked(d) && now - d->slice_start_ns < d->deadline_ns - now)
            allowance = 1;
    }
    uint64_t budget = admitted + allowance;
    if (budget > atomic_load(&d->budget) || allowance == 0)
        atomic_store(&d->budget, budget > admitted ? budget : admitted);
    atomic_store(&d->open, 1);
    if (allowance > 0 || d->waiting_graph_ns) {
        if (gs_defer_wakeups)
            gs_wakes_owed |= GS_WAKE_LAUNCHERS; /* the gate thread wakes them after unlocking */
        else
            gs_client_wake_launchers_locked();
    }
    /* work in flight: the drainer measures it, unless the application's
     * synchronizations are doing that (gs_drain_note_finished_locked) */
    if (submitted > d->completed && !gs_drain_round_fresh_locked(d, now))
        gs_drain_wake_locked();
}

void gs_gate_begin_drain_locked(struct gs_dev *d)
{
    atomic_store(&d->open, 0);
    d->state = GS_DEV_DRAIN;
    d->drain_requested = true;
    gs_drain_start_locked(d); /* its start failed before (no threads left): again */
    if (!d->drainer_started) {
        /* Nobody can wait for the work: the slice ends now, so that
         * launches go on (in later slices) instead of waiting for good. */
        d->drain_requested = false;
        gs_client_wake();
        return;
    }
    gs_drain_wake_locked();
}

bool gs_gate_drained_locked(const struct gs_dev *d)
{
    return !d->drain_requested;
}

void gs_gate_set_all_open_locked(bool open)
{
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        struct gs_dev *d = &gs_devs[i];
        if (!d->used)
            continue;
        if (open) {
            atomic_store(&d->budget, UINT64_MAX);
            atomic_store(&d->open, 1);
        } else {
            atomic_store(&d->open, 0);
        }
    }
    if (open)
        pthread_cond_broadcast(&gs_gate_cv);
}

/* The gate of a device by ordinal, created on first use, with its drainer
 * and the gate thread started. */
static CUresult device_gate(CUdevice ordinal, struct gs_dev **out)
{
    CUuuid uuid;
    CUresult rc = GS_REAL(cuDeviceGetUuid_v2) ? GS_REAL(cuDeviceGetUuid_v2)(&uuid, ordinal)
                                              : GS_REAL(cuDeviceGetUuid)(&uuid, ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* Sent with the device's declaration: the server warns of a memory
     * cap larger than the GPU. Not on any launch's path. */
    size_t total = 0;
    if (!GS_REAL(cuDeviceTotalMem_v2) || GS_REAL(cuDeviceTotalMem_v2)(&total, ordinal) != CUDA_SUCCESS)
        total = 0;
    pthread_mutex_lock(&gs_gate_lock);
    struct gs_dev *found = NULL, *free_slot = NULL;
    for (int i = 0; i < GS_MAX_DEVICES && !found; i++) {
        struct gs_dev *d = &gs_devs[i];
        if (d->used && memcmp(d->uuid, uuid.bytes, 16) == 0)
            found = d;
        else if (!d->used && !free_slot)
            free_slot = d;
    }
    if (!found && free_slot) {
        found = free_slot;
        found->used = true;
        found->slot = (int)(found - gs_devs);
        found->ordinal = ordinal;
        memcpy(found->uuid, uuid.bytes, 16);
        found->total_mem = total;
        found->state = GS_DEV_NONE;
        if (gs_client_policy_open() && !gs_client_connected_locked()) {
            atomic_store(&found->budget, UINT64_MAX);
            atomic_store(&found->open, 1);
        }
    }
    if (found) {
        gs_drain_start_locked(found);
        gs_client_start_locked();
    }
    pthread_mutex_unlock(&gs_gate_lock);
    if (!found)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = found;
    return CUDA_SUCCESS;
}

CUresult gs_gate_device_by_ordinal(CUdevice ordinal, struct gs_dev **out)
{
    return device_gate(ordinal, out);
}

/* The gate and registry entry of a context. */
static CUresult context_gate(CUcontext handle, struct gs_ctx **ctx_out, struct gs_dev **dev_out)
{
    pthread_mutex_lock(&gs_gate_lock);
    struct gs_ctx *c = gs_ctx_get_locked(handle);
    struct gs_dev *d = c ? c->dev : NULL;
    /* A context another thread is releasing lives on unless that release
     * is its last: its device is known, and nothing of the context is
     * touched here, so its work is gated and its memory counted like any
     * other (gs_ctx_use_locked refuses a closing context). */
    if (c && d && !c->dead) {
        pthread_mutex_unlock(&gs_gate_lock);
        *ctx_out = c;
        *dev_out = d;
        return CUDA_SUCCESS;
    }
    bool usable = gs_ctx_use_locked(c);
    pthread_mutex_unlock(&gs_gate_lock);
    if (!usable)
        return c ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = CUDA_SUCCESS;
    if (!d) {
        CUdevice ordinal;
        if ((rc = gs_ctx_device(c, &ordinal)) == CUDA_SUCCESS)
            rc = device_gate(ordinal, &d);
    }
    pthread_mutex_lock(&gs_gate_lock);
    if (rc == CUDA_SUCCESS)
        c->dev = d;
    gs_ctx_unuse_locked(c);
    pthread_mutex_unlock(&gs_gate_lock);
    *ctx_out = c;
    *dev_out = d;
    return rc;
}

CUresult gs_gate_current_device(struct gs_dev **out)
{
    if (gs_tls_dev) {
        *out = gs_tls_dev;
        return CUDA_SUCCESS;
    }
    CUcontext ctx = NULL;
    CUresult rc = GS_REAL(cuCtxGetCurrent)(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct gs_ctx *c;
    if ((rc = context_gate(ctx, &c, out)) == CUDA_SUCCESS)
        gs_tls_dev = *out;
    return rc;
}

CUresult gs_gate_resolve_stream(CUstream stream, int ptsz, struct gs_launch_target *t)
{
    uintptr_t value = (uintptr_t)stream;
    CUcontext ctx = NULL;
    CUresult rc;
    if (value == 0)
        t->kind = ptsz ? GS_STREAM_PER_THREAD : GS_STREAM_LEGACY;
    else if (value == (uintptr_t)CU_STREAM_LEGACY)
        t->kind = GS_STREAM_LEGACY;
    else if (value == (uintptr_t)CU_STREAM_PER_THREAD)
        t->kind = GS_STREAM_PER_THREAD;
    else
        t->kind = GS_STREAM_CREATED;
    t->stream = t->kind == GS_STREAM_LEGACY ? CU_STREAM_LEGACY
              : t->kind == GS_STREAM_PER_THREAD ? CU_STREAM_PER_THREAD : stream;
    /* A created stream carries its context, with or without a current one
     * (a CUkernel launch needs none); a default stream is the current
     * context's. */
    if (t->kind == GS_STREAM_CREATED && GS_REAL(cuStreamGetCtx))
        rc = GS_REAL(cuStreamGetCtx)(stream, &ctx);
    else
        rc = GS_REAL(cuCtxGetCurrent)(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return context_gate(ctx, &t->ctx, &t->dev);
}

void gs_gate_track_stream_locked(const struct gs_launch_target *t)
{
    if (t->kind == GS_STREAM_PER_THREAD)
        return; /* its thread records its own mark */
    /* Its context died after the launch was resolved (another thread's last
     * release): the launch fails in the driver, and the entry, which a new
     * context of the same handle may reuse, must not name its stream. */
    if (t->ctx->dead)
        return;
    struct gs_dev *d = t->dev;
    for (int i = 0; i < d->nstreams; i++)
        if (d->streams[i].stream == t->stream && d->streams[i].ctx == t->ctx)
            return;
    if (d->nstreams < GS_MAX_TRACKED_STREAMS) {
        d->streams[d->nstreams++] = (struct gs_tracked_stream){t->stream, t->ctx};
        return;
    }
    /* More streams than tracked: fall back to the legacy stream of the
     * context, which orders after every blocking stream's work. */
    static bool warned; /* guarded by gs_gate_lock */
    if (!warned)
        gs_log(GS_LOG_WARN, "more than %d streams with work on one device: the rest are drained through the legacy stream",
               GS_MAX_TRACKED_STREAMS);
    warned = true;
    d->streams[GS_MAX_TRACKED_STREAMS - 1] = (struct gs_tracked_stream){CU_STREAM_LEGACY, t->ctx};
}

void gs_gate_wait_admission_locked(struct gs_dev *d, bool (*fits)(struct gs_dev *d, void *arg), void *arg)
{
    for (;;) {
        /* Threads whose start failed (a container's pids.max) are started
         * by the launches that need them; a no-op once they run. */
        gs_drain_start_locked(d);
        gs_client_start_locked();
        if (atomic_load(&d->open) && atomic_load(&d->admitted) < atomic_load(&d->budget) &&
            (!fits || fits(d, arg))) {
            atomic_fetch_add(&d->admitted, 1);
            if (atomic_load(&d->idle_since) != 0)
                gs_idle_end(d);
            return;
        }
        d->waiters++;
        /* Short of budget while work runs: a drainer round, which counts
         * what finished, may give more. */
        if (d->state == GS_DEV_HOLD && atomic_load(&d->submitted) > d->completed)
            gs_drain_wake_locked();
        /* Only a device with no slice asked for needs the gate thread now
         * (to send ACQUIRE); otherwise a grant, a drainer round or the
         * end of a drain wakes this thread. */
        if (d->state == GS_DEV_NONE || !gs_client_connected_locked())
            gs_client_wake();
        gs_client_wait_locked(d->state != GS_DEV_HOLD && d->state != GS_DEV_DRAIN);
        d->waiters--;
    }
}

/* Remembers the stream in the calling thread's launch cache. */
static void cache_launch(CUstream stream, int ptsz, struct gs_dev *d, struct gs_thread_mark *mark,
                         uint32_t set_gen, uint32_t handles_gen)
{
    memmove(&gs_tls_launches[1], &gs_tls_launches[0], sizeof gs_tls_launches[0] * (GS_LAUNCH_CACHE - 1));
    gs_tls_launches[0] = (struct gs_launch_cache){stream, ptsz, handles_gen, set_gen, d, mark};
}

CUresult gs_gate_slow(CUstream stream, int ptsz, struct gs_admit *a)
{
    a->dev = NULL;
    a->mark = NULL;
    /* Work captured into a graph does not run now: never gate it, never
     * wait for it. Its graph is gated when it is launched. */
    if (gs_capture_stream_is_capturing(stream, ptsz))
        return CUDA_SUCCESS;
    uint32_t handles_gen = atomic_load(&gs_handles_gen);
    struct gs_launch_target t;
    if (gs_gate_resolve_stream(stream, ptsz, &t) != CUDA_SUCCESS)
        return CUDA_SUCCESS; /* the driver answers the launch itself */
    if (t.kind == GS_STREAM_PER_THREAD && !(a->mark = gs_drain_thread_mark(t.ctx, t.dev)))
        t.kind = GS_STREAM_LEGACY, t.stream = CU_STREAM_LEGACY; /* no event: drain it through the legacy stream */
    pthread_mutex_lock(&gs_gate_lock);
    gs_gate_wait_admission_locked(t.dev, NULL, NULL);
    gs_gate_track_stream_locked(&t);
    uint32_t set_gen = atomic_load(&t.dev->stream_set_gen);
    pthread_mutex_unlock(&gs_gate_lock);
    cache_launch(stream, ptsz, t.dev, a->mark, set_gen, handles_gen);
    a->dev = t.dev;
    return CUDA_SUCCESS;
}

void gs_gate_after_fork_child(void)
{
    /* No gate or drainer thread exists in the child: start from scratch. */
    pthread_mutex_init(&gs_gate_lock, NULL);
    pthread_cond_init(&gs_gate_cv, NULL);
    memset(gs_devs, 0, sizeof gs_devs);
    memset(gs_tls_launches, 0, sizeof gs_tls_launches);
    gs_tls_dev = NULL;
    gs_wakes_owed = 0;
}
