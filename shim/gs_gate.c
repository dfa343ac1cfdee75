/*
 * The launch gate's slow path and device bookkeeping (see gs_gate.h). The
 * fast path is gs_hook_launch_enter in gs_hooks.h; the drainers are in
 * gs_drain.c; every decision about a slice is the slice machine's
 * (gs_slice.c), to which gs_gate_deliver_locked delivers events.
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

uint64_t gs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void gs_gate_deliver_locked(struct gs_dev *d, const struct gs_slice_event *ev, uint64_t now,
                            struct gs_slice_actions *out)
{
    gs_slice_step(&d->slice, ev, now, out);
    for (int i = 0; i < out->n; i++) {
        const struct gs_slice_action *a = &out->a[i];
        switch (a->type) {
        case GS_SLICE_SEND_ACQUIRE:
            gs_client_send_acquire_locked(d);
            break;
        case GS_SLICE_SEND_RELEASE:
            gs_client_send_release_locked(d, a->grant, a->idle_ns, a->more);
            break;
        case GS_SLICE_START_ROUND:
            gs_drain_wake_locked();
            break;
        case GS_SLICE_WAKE_LAUNCHERS:
            if (gs_defer_wakeups)
                gs_wakes_owed |= GS_WAKE_LAUNCHERS; /* the gate thread wakes them after unlocking */
            else
                gs_client_wake_launchers_locked();
            break;
        case GS_SLICE_ARM_TIMER:
            if (a->wake)
                gs_client_timer_armed_locked(a->at);
            break;
        case GS_SLICE_FORGET_STREAMS:
            d->nstreams = 0;
            atomic_fetch_add(&d->stream_set_gen, 1);
            break;
        }
    }
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
    bool added = !found && free_slot;
    if (added) {
        found = free_slot;
        found->used = true;
        found->slot = (int)(found - gs_devs);
        found->ordinal = ordinal;
        memcpy(found->uuid, uuid.bytes, 16);
        found->total_mem = total;
    }
    if (found) {
        gs_drain_start_locked(found);
        gs_client_start_locked();
    }
    if (added) {
        /* After the gate thread's start: while it connects, launches wait
         * for its WELCOME (gs_slice.c). */
        struct gs_slice_event ev = {.type = GS_SLICE_ADDED, .connected = gs_client_connected_locked(),
                                    .connecting = gs_client_connecting_locked(),
                                    .policy_open = gs_client_policy_open()};
        struct gs_slice_actions out;
        gs_gate_deliver_locked(found, &ev, gs_now_ns(), &out);
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

void gs_gate_wait_admission_locked(struct gs_dev *d, bool graph, uint64_t graph_ns)
{
    struct gs_slice_event ev = {.type = GS_SLICE_LAUNCH, .graph = graph, .graph_ns = graph_ns};
    for (;;) {
        /* Threads whose start failed (a container's pids.max) are started
         * by the launches that need them; a no-op once they run. */
        gs_drain_start_locked(d);
        gs_client_start_locked();
        struct gs_slice_actions out;
        gs_gate_deliver_locked(d, &ev, gs_now_ns(), &out);
        if (out.admitted)
            return;
        ev.retry = true;
        /* Not connected: the gate thread may try again now. */
        if (!gs_client_connected_locked())
            gs_client_wake();
        /* A thread waiting for a GRANT may read the socket itself; one
         * waiting for budget or a drain's end is woken by a round. */
        gs_client_wait_locked(d->slice.state != GS_SLICE_HOLD && d->slice.state != GS_SLICE_DRAIN);
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
    gs_gate_wait_admission_locked(t.dev, false, 0);
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
