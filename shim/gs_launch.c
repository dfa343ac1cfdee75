/*
 * The launch gate's slow path (see gs_launch.h): a launch the fast path
 * could not admit is delivered to its GPU's slice machine (LAUNCH) and
 * waits until the machine admits it; a thread waiting for a GRANT may read
 * the server's socket itself (gs_gate_thread.c), one waiting for budget
 * within a held slice is woken by a drainer round.
 *
 * Owns each thread's launch cache (its own).
 */
#include "gs_launch.h"
#include "gs_conn.h"
#include "gs_dispatch.h"
#include "gs_gate_thread.h"
#include "gs_locks.h"
#include "gs_log.h"

#include <string.h>

__thread struct gs_launch_cache gs_launch_cache[GS_LAUNCH_CACHE];

void gs_launch_track_stream_locked(const struct gs_launch_target *t)
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
    static bool warned; /* guarded by the gate lock */
    if (!warned)
        gs_log(GS_LOG_WARN, "more than %d streams with work on one device: the rest are drained through the legacy stream",
               GS_MAX_TRACKED_STREAMS);
    warned = true;
    d->streams[GS_MAX_TRACKED_STREAMS - 1] = (struct gs_tracked_stream){CU_STREAM_LEGACY, t->ctx};
}

void gs_launch_wait_admission_locked(struct gs_dev *d, bool graph, uint64_t graph_ns)
{
    struct gs_slice_event ev = {.type = GS_SLICE_LAUNCH, .graph = graph, .graph_ns = graph_ns};
    for (;;) {
        /* Threads whose start failed (a container's pids.max) are started
         * by the launches that need them; a no-op once they run. */
        gs_drain_start_locked(d);
        gs_gate_thread_start_locked();
        struct gs_slice_actions out;
        gs_dispatch_locked(d, &ev, gs_now_ns(), &out);
        if (out.admitted)
            return;
        ev.retry = true;
        /* Not connected: the gate thread may try again now. */
        if (!gs_conn_connected_locked())
            gs_conn_wake_gate_thread();
        /* A thread waiting for a GRANT may read the socket itself; one
         * waiting for budget or a drain's end is woken by a round. */
        gs_gate_thread_wait_locked(d->slice.state != GS_SLICE_HOLD && d->slice.state != GS_SLICE_DRAIN);
    }
}

void gs_launch_remember(CUstream stream, int ptsz, struct gs_dev *d, struct gs_thread_mark *mark, uint32_t set_gen,
                        uint32_t handles_gen)
{
    memmove(&gs_launch_cache[1], &gs_launch_cache[0], sizeof gs_launch_cache[0] * (GS_LAUNCH_CACHE - 1));
    gs_launch_cache[0] = (struct gs_launch_cache){stream, ptsz, handles_gen, set_gen, d, mark};
}

CUresult gs_launch_slow(CUstream stream, int ptsz, struct gs_admit *a)
{
    a->dev = NULL;
    a->mark = NULL;
    /* Work captured into a graph does not run now: never gate it, never
     * wait for it. Its graph is gated when it is launched. */
    if (gs_capture_stream_is_capturing(stream, ptsz))
        return CUDA_SUCCESS;
    uint32_t handles_gen = atomic_load(&gs_handles_gen);
    struct gs_launch_target t;
    if (gs_lookup_stream(stream, ptsz, &t) != CUDA_SUCCESS)
        return CUDA_SUCCESS; /* the driver answers the launch itself */
    if (t.kind == GS_STREAM_PER_THREAD && !(a->mark = gs_drain_thread_mark(t.ctx, t.dev)))
        t.kind = GS_STREAM_LEGACY, t.stream = CU_STREAM_LEGACY; /* no event: drain it through the legacy stream */
    gs_lock(GS_LOCK_GATE);
    gs_launch_wait_admission_locked(t.dev, false, 0);
    gs_launch_track_stream_locked(&t);
    uint32_t set_gen = atomic_load(&t.dev->stream_set_gen);
    gs_unlock(GS_LOCK_GATE);
    gs_launch_remember(stream, ptsz, t.dev, a->mark, set_gen, handles_gen);
    a->dev = t.dev;
    return CUDA_SUCCESS;
}

void gs_launch_after_fork_child(void)
{
    memset(gs_launch_cache, 0, sizeof gs_launch_cache);
    gs_lookup_forget_current();
}
