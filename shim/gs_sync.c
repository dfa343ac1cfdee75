/*
 * Synchronizations: the wrappers of cuCtxSynchronize, cuStreamSynchronize
 * (and _ptsz) and cuEventSynchronize, and what they tell the slice machine
 * (GS_SLICE_SYNCED): an idle spell begins, and a drainer round is done.
 *
 * Idle spells: the parts of a held slice in which the process had nothing
 * on the GPU, so that the server charges the device time it used rather
 * than its own pauses.
 *
 * A program that synchronizes (a training step's loss.item(), a server's
 * wait for each batch) leaves the GPU idle from the moment its work
 * finishes until its next launch reaches the device. Slices are exclusive,
 * so nobody else can use that time; charged as used, it would cost the
 * tenant its share (a tenant of 50 us kernels that synchronizes after each
 * one uses the device perhaps half the time it holds it) and a `limit`
 * would be a limit on holding, not on use.
 *
 * How a spell is seen:
 *   - The synchronization wrappers below (cuCtxSynchronize,
 *     cuStreamSynchronize and its _ptsz variant, cuEventSynchronize) ask,
 *     once the real call returns, whether every stream the gate admitted
 *     work to in this slice has finished (cuStreamQuery on each). If so,
 *     the device is idle: idle_since is set.
 *   - From when? A stream or context synchronization with a single
 *     admitted stream first records a timed event on it (struct
 *     sync_mark), which completes when the work ends; afterwards an event
 *     recorded on the idle stream completes at once, and the time between
 *     the two is how long ago the work ended (the driver noticing, the
 *     thread waking). Otherwise, from when the synchronization returned.
 *   - The next launch admitted on the device, from any thread, ends the
 *     spell (gs_slice_end_idle, called from the launch path only when
 *     idle_since is set) and adds it to idle_ns.
 *   - A new slice starts idle: from the grant's sending (the server
 *     charges from then; gpuslice/transport.h) to its first launch.
 *   - RELEASE reports idle_ns, plus the spell still open.
 * Only spells that are certain are counted: while a capture is under way,
 * while per-thread default streams or flush marks hold admitted work (they
 * cannot be queried from here), or when the admitted streams belong to
 * another context than the caller's current one, nothing is counted, and
 * the slice is charged whole, as before.
 *
 * The race with a launch on another thread is the slice machine's to
 * settle (gs_slice.c): never a spell that outlives a launch.
 *
 * Owns nothing: the spells are the slice machine's; the stream list it
 * checks is gs_dev.streams, under the gate lock. The capture lock
 * (gs_locks.h) keeps the streams alive while they are queried (a stream's
 * destruction takes it) and captures from beginning; no lock is held
 * while a mark or probe is waited for.
 */
#include "gs_capture.h"
#include "gs_contexts.h"
#include "gs_dispatch.h"
#include "gs_drain.h"
#include "gs_launch.h"
#include "gs_locks.h"

#include <string.h>

#define IDLE_STREAMS_MAX 8 /* more admitted streams than this: not checked */

/* The device a synchronization on `stream` concerns: the gate the calling
 * thread last launched into that stream through, or its latest one; for
 * a thread that launched nothing there (a server's thread that waits for
 * what another launched), the GPU of the stream's context, or of its
 * current one, if the process has it. */
static struct gs_dev *sync_device(bool any_stream, CUstream stream, int ptsz)
{
    for (int i = 0; i < GS_LAUNCH_CACHE; i++)
        if (gs_launch_cache[i].dev && (any_stream || (gs_launch_cache[i].stream == stream &&
                                                      gs_launch_cache[i].ptsz == ptsz)))
            return gs_launch_cache[i].dev;
    return gs_lookup_known(any_stream, stream);
}

/* A timed event recorded on the only stream with admitted work as a
 * synchronization begins. It completes when the work before it ends, so
 * that once the synchronization returns, the time since then (the driver
 * noticing and waking the thread) is known, and counts in the spell. */
struct sync_mark {
    struct gs_ctx *ctx;      /* a use of it is held while event is set */
    CUstream stream;
    CUevent event;
    uint64_t host_ns;        /* when it was recorded */
};

/* Whether d may turn idle (held, admission open, no capture anywhere). */
static bool may_turn_idle(const struct gs_dev *d)
{
    return d && atomic_load_explicit(&d->slice.open, memory_order_relaxed) &&
           atomic_load(&d->slice.idle_since) == 0 &&
           atomic_load_explicit(&gs_captures_active, memory_order_relaxed) == 0;
}

static void before_sync(struct gs_dev *d, struct sync_mark *m)
{
    m->event = NULL;
    CUcontext current = NULL;
    if (!may_turn_idle(d) || GS_REAL(cuCtxGetCurrent)(&current) != CUDA_SUCCESS || !current)
        return;
    gs_lock(GS_LOCK_CAPTURE);
    gs_lock(GS_LOCK_GATE);
    bool single = d->slice.state == GS_SLICE_HOLD && d->nstreams == 1 && d->nflushes == 0 &&
                  !gs_drain_has_thread_marks_locked(d) && d->streams[0].ctx->handle == current &&
                  gs_ctx_use_locked(d->streams[0].ctx);
    if (single) {
        m->ctx = d->streams[0].ctx;
        m->stream = d->streams[0].stream;
    }
    gs_unlock(GS_LOCK_GATE);
    if (single) {
        m->event = gs_ctx_event_take(m->ctx, true);
        m->host_ns = gs_now_ns();
        if (m->event && GS_REAL(cuEventRecord)(m->event, m->stream) != CUDA_SUCCESS) {
            gs_ctx_event_give(m->ctx, m->event, true);
            m->event = NULL;
        }
        if (!m->event) {
            gs_lock(GS_LOCK_GATE);
            gs_ctx_unuse_locked(m->ctx);
            gs_unlock(GS_LOCK_GATE);
        }
    }
    gs_unlock(GS_LOCK_CAPTURE);
}

/* After a successful synchronization: if everything admitted on d in this
 * slice has finished, d is idle since the work ended (the mark's age) or
 * at least since now. */
static void after_sync(struct gs_dev *d, struct sync_mark *m, bool as_round)
{
    uint64_t admitted = d ? atomic_load(&d->slice.admitted) : 0;
    CUcontext current = NULL;
    struct gs_tracked_stream streams[IDLE_STREAMS_MAX];
    struct gs_ctx *ctx = NULL;
    int n = 0;
    bool checkable = may_turn_idle(d) && atomic_load(&d->slice.submitted) == admitted && /* none on its way in */
                     GS_REAL(cuCtxGetCurrent)(&current) == CUDA_SUCCESS && current;
    /* The capture lock keeps the streams alive while they are queried
     * (stream_destroy holds it), and keeps captures from starting. */
    gs_lock(GS_LOCK_CAPTURE);
    if (checkable) {
        gs_lock(GS_LOCK_GATE);
        checkable = d->slice.state == GS_SLICE_HOLD && d->nstreams <= IDLE_STREAMS_MAX && d->nflushes == 0 &&
                    !gs_drain_has_thread_marks_locked(d);
        if (checkable) {
            n = d->nstreams;
            memcpy(streams, d->streams, (size_t)n * sizeof streams[0]);
            for (int i = 0; i < n && checkable; i++)
                checkable = streams[i].ctx == streams[0].ctx && streams[i].ctx->handle == current;
            if (n > 0 && checkable) {
                ctx = streams[0].ctx;
                checkable = gs_ctx_use_locked(ctx);
            }
        }
        gs_unlock(GS_LOCK_GATE);
    }
    for (int i = 0; i < n && checkable; i++)
        checkable = GS_REAL(cuStreamQuery)(streams[i].stream) == CUDA_SUCCESS;
    /* How long ago the work before the mark ended: a probe recorded on the
     * idle stream completes at once (recorded here, waited for with no lock
     * held). */
    bool idle = checkable && atomic_load_explicit(&gs_captures_active, memory_order_relaxed) == 0;
    CUevent probe = idle && m->event && n == 1 && m->stream == streams[0].stream ? gs_ctx_probe(m->ctx, m->stream)
                                                                               : NULL;
    gs_unlock(GS_LOCK_CAPTURE);
    /* Everything admitted had finished: the device is idle since the work
     * ended (the mark's age, never earlier than the mark was recorded) or
     * at least since now; and after a wait for a stream or a context, that
     * is a drainer round, done. (Not after a wait for an event: a program
     * that keeps its queue full waits for events, and the drainer's rounds
     * serve it as before.) */
    struct gs_slice_event ev = {.type = GS_SLICE_SYNCED, .finished = admitted, .as_round = as_round && n > 0};
    uint64_t age = probe ? gs_ctx_probe_age_ns(m->ctx, probe, m->event) : 0;
    if (idle) {
        uint64_t now = gs_now_ns();
        uint64_t bound = now > m->host_ns ? now - m->host_ns : 0;
        ev.idle_from = now - (age < bound ? age : bound);
    }
    gs_lock(GS_LOCK_GATE);
    if (ctx)
        gs_ctx_unuse_locked(ctx);
    if (checkable && (ev.idle_from || ev.as_round)) {
        struct gs_slice_actions out;
        gs_dispatch_locked(d, &ev, gs_now_ns(), &out);
    }
    gs_unlock(GS_LOCK_GATE);
    if (m->event) {
        gs_ctx_event_give(m->ctx, m->event, true);
        gs_lock(GS_LOCK_GATE);
        gs_ctx_unuse_locked(m->ctx);
        gs_unlock(GS_LOCK_GATE);
    }
}

/* Each wrapper: the mark (for a wait on everything queued), the real
 * call, and whether it left d idle. */
#define SYNC_AROUND(device_expr, call, with_mark)                        \
    struct gs_dev *d = (device_expr);                                    \
    struct sync_mark mark = {0};                                         \
    if (with_mark)                                                       \
        before_sync(d, &mark);                                           \
    CUresult rc = (call);                                                \
    if (rc == CUDA_SUCCESS || mark.event) {                              \
        if (rc != CUDA_SUCCESS)                                          \
            d = NULL; /* only gives the mark back */                     \
        after_sync(d, &mark, with_mark);                                 \
    }                                                                    \
    return rc

GS_EXPORT CUresult cuCtxSynchronize(void)
{
    GS_PROLOGUE(cuCtxSynchronize);
    SYNC_AROUND(sync_device(true, NULL, 0), GS_REAL(cuCtxSynchronize)(), true);
}

GS_EXPORT CUresult cuStreamSynchronize(CUstream stream)
{
    GS_PROLOGUE(cuStreamSynchronize);
    SYNC_AROUND(sync_device(false, stream, 0), GS_REAL(cuStreamSynchronize)(stream), true);
}

GS_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream stream)
{
    GS_PROLOGUE(cuStreamSynchronize_ptsz);
    SYNC_AROUND(sync_device(false, stream, 1), GS_REAL(cuStreamSynchronize_ptsz)(stream), true);
}

GS_EXPORT CUresult cuEventSynchronize(CUevent event)
{
    GS_PROLOGUE(cuEventSynchronize);
    /* An event may be followed by more work: no mark, which would cost a
     * record on every wait of a program that keeps its queue full. */
    SYNC_AROUND(sync_device(true, NULL, 0), GS_REAL(cuEventSynchronize)(event), false);
}
