/*
 * The drainers: one thread per device that learns when the work the gate
 * admitted has finished, to measure the device time per launch while a
 * slice is held and to know when the queue is empty after admission
 * closes. When a round is due, and what it tells, is the slice machine's
 * business (gs_slice.c); the questions and answers of a round are
 * gs_drain_round.c's, which the simulation (test/sim) runs unchanged.
 * This file is what it cannot run: the threads, the events recorded and
 * waited for, the streams and marks.
 *
 * How it knows: every stream the gate admitted work to in this slice is
 * listed (gs_dev.streams). A round records one of the shim's own events
 * on each listed stream (with the stream's context pushed) and waits for
 * each with cuEventSynchronize; the events are created with
 * CU_EVENT_BLOCKING_SYNC, so the wait sleeps instead of spinning a core.
 * Work on other streams (a weight-load copy, a host function) is never
 * waited for, and the application's contexts are never synchronized.
 *   - A per-thread default stream can be named only by its own thread, so
 *     that thread records its mark after each launch into it
 *     (struct gs_thread_mark); the drainer waits on the mark.
 *   - A stream about to capture, to join a capture or to be destroyed
 *     cannot be recorded into afterwards, so the application's thread
 *     records a flush mark first (gs_drain_flush, from gs_capture.c).
 *   - Drainer threads set their capture interaction mode to relaxed and
 *     wait only on events recorded outside any capture, so nothing they
 *     do counts against an application's capture (see gs_capture.c).
 *   - Contexts are used under gs_ctx_use_locked (see gs_contexts.h).
 *
 * State: the stream lists and flush marks live in gs_devs and the thread
 * marks in thread_marks, all guarded by the gate lock; the drainers' condition
 * variable is gs_locks.c's.
 */
#include "gs_drain.h"
#include "gs_capture.h"
#include "gs_contexts.h"
#include "gs_dispatch.h"
#include "gs_drain_round.h"
#include "gs_glibc_compat.h"
#include "gs_graphcost.h"
#include "gs_locks.h"
#include "gs_log.h"

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

struct gs_thread_mark {
    struct gs_ctx *ctx;
    struct gs_dev *dev;
    CUevent event;              /* recorded after each launch into the stream */
    _Atomic int recorded;       /* set by the owner, taken by the drainer */
    bool orphan;                /* its thread exited; guarded by the gate lock */
    bool dead;                  /* its context died; guarded by the gate lock */
    struct gs_thread_mark *next;
};

/* Every live thread mark; guarded by the gate lock. */
static struct gs_thread_mark *thread_marks;
/* The calling thread's marks, one per context it used; owned by it. */
#define THREAD_MARKS 4
static __thread struct gs_thread_mark *my_marks[THREAD_MARKS];
static pthread_key_t exit_key;
static bool exit_key_made;   /* written once, under exit_key_once */
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
/* ---- per-thread default streams --------------------------------------------- */

/* A thread's marks outlive it until the drainer has waited for them. */
static void thread_exited(void *unused)
{
    (void)unused;
    gs_lock(GS_LOCK_GATE);
    for (int i = 0; i < THREAD_MARKS; i++) {
        struct gs_thread_mark *m = my_marks[i];
        if (m && m->dead)
            free(m); /* unlinked when its context died: only this thread had it */
        else if (m)
            m->orphan = true;
        my_marks[i] = NULL;
    }
    gs_unlock(GS_LOCK_GATE);
}

static void make_exit_key(void)
{
    exit_key_made = pthread_key_create(&exit_key, thread_exited) == 0;
    if (!exit_key_made)
        gs_log(GS_LOG_WARN, "pthread_key_create failed: marks of exited threads are kept");
}

struct gs_thread_mark *gs_drain_thread_mark(struct gs_ctx *ctx, struct gs_dev *d)
{
    int free_index = -1;
    gs_lock(GS_LOCK_GATE);
    for (int i = 0; i < THREAD_MARKS; i++) {
        struct gs_thread_mark *m = my_marks[i];
        if (m && !m->dead && m->ctx == ctx) {
            gs_unlock(GS_LOCK_GATE);
            return m;
        }
        if (!m || m->dead)
            free_index = i;
    }
    bool usable = free_index >= 0 && gs_ctx_use_locked(ctx);
    gs_unlock(GS_LOCK_GATE);
    if (!usable)
        return NULL;
    /* The per-thread default stream is the current context's, so ctx is
     * current here: no push needed. */
    CUevent event = gs_ctx_event_take(ctx, false);
    struct gs_thread_mark *m = event ? calloc(1, sizeof *m) : NULL;
    pthread_once(&exit_key_once, make_exit_key);
    gs_lock(GS_LOCK_GATE);
    if (m) {
        m->ctx = ctx;
        m->dev = d;
        m->event = event;
        m->next = thread_marks;
        thread_marks = m;
        /* A dead mark in the slot was unlinked when its context died, and
         * only this thread still had it. */
        free(my_marks[free_index]);
        my_marks[free_index] = m;
        if (exit_key_made)
            pthread_setspecific(exit_key, m);
    }
    gs_ctx_unuse_locked(ctx);
    gs_unlock(GS_LOCK_GATE);
    if (!m && event)
        gs_ctx_event_give(ctx, event, false);
    return m;
}

void gs_drain_record_thread_mark(struct gs_thread_mark *mark)
{
    if (GS_REAL(cuEventRecord)(mark->event, CU_STREAM_PER_THREAD) == CUDA_SUCCESS)
        atomic_store_explicit(&mark->recorded, 1, memory_order_release);
}

bool gs_drain_has_thread_marks_locked(const struct gs_dev *d)
{
    for (const struct gs_thread_mark *m = thread_marks; m; m = m->next)
        if (m->dev == d)
            return true;
    return false;
}

/* ---- flushes (application threads) -------------------------------------------- */

static bool tracked_locked(const struct gs_dev *d, CUstream stream, const struct gs_ctx *ctx)
{
    for (int i = 0; i < d->nstreams; i++)
        if (d->streams[i].stream == stream && d->streams[i].ctx == ctx)
            return true;
    return false;
}

/* Records a flush mark on one stream of ctx (pushed) if work was admitted
 * to it and it can still be recorded into; a mark that finds no room is
 * handed back in *unkept. */
static void flush_one(struct gs_dev *d, struct gs_ctx *ctx, CUstream stream, struct gs_unkept_marks *unkept)
{
    gs_lock(GS_LOCK_GATE);
    bool wanted = tracked_locked(d, stream, ctx);
    gs_unlock(GS_LOCK_GATE);
    if (!wanted || gs_capture_unrecordable(stream))
        return;
    CUevent event = gs_ctx_event_take(ctx, false);
    if (!event)
        return;
    if (GS_REAL(cuEventRecord)(event, stream) != CUDA_SUCCESS) {
        gs_ctx_event_give(ctx, event, false);
        return;
    }
    gs_lock(GS_LOCK_GATE);
    bool kept = d->nflushes < GS_MAX_FLUSH_MARKS;
    if (kept)
        d->flushes[d->nflushes++] = (struct gs_flush_mark){event, ctx};
    gs_unlock(GS_LOCK_GATE);
    if (!kept)
        unkept->events[unkept->n++] = event; /* the flush's use of ctx lasts until the wait */
}

void gs_drain_flush(const struct gs_launch_target *t, bool with_legacy, struct gs_unkept_marks *unkept)
{
    unkept->n = 0;
    unkept->ctx = t->ctx;
    gs_lock(GS_LOCK_GATE);
    bool any = t->dev->nstreams > 0 && gs_ctx_use_locked(t->ctx);
    gs_unlock(GS_LOCK_GATE);
    if (!any)
        return;
    CUstreamCaptureMode mode = gs_capture_relax_thread();
    if (gs_ctx_push(t->ctx)) {
        if (t->kind == GS_STREAM_CREATED)
            flush_one(t->dev, t->ctx, t->stream, unkept);
        if (with_legacy || t->kind == GS_STREAM_LEGACY)
            flush_one(t->dev, t->ctx, CU_STREAM_LEGACY, unkept);
        gs_ctx_pop();
    }
    gs_capture_restore_thread(mode);
    if (unkept->n > 0)
        return; /* its use of the context is given back by gs_drain_wait_unkept */
    gs_lock(GS_LOCK_GATE);
    gs_ctx_unuse_locked(t->ctx);
    gs_unlock(GS_LOCK_GATE);
}

void gs_drain_wait_unkept(struct gs_unkept_marks *unkept)
{
    /* No room was left for them: waited for here, on the application's
     * thread, with no lock held, before its capture begins. */
    if (unkept->n == 0)
        return;
    gs_locks_check_none("a flush mark");
    CUstreamCaptureMode mode = gs_capture_relax_thread();
    bool pushed = gs_ctx_push(unkept->ctx);
    for (int i = 0; i < unkept->n; i++) {
        if (pushed)
            GS_REAL(cuEventSynchronize)(unkept->events[i]);
        gs_ctx_event_give(unkept->ctx, unkept->events[i], false);
    }
    if (pushed)
        gs_ctx_pop();
    gs_capture_restore_thread(mode);
    gs_lock(GS_LOCK_GATE);
    gs_ctx_unuse_locked(unkept->ctx);
    gs_unlock(GS_LOCK_GATE);
    unkept->n = 0;
}

/* ---- forgetting ---------------------------------------------------------------- */

void gs_drain_forget_stream_locked(CUstream stream, struct gs_ctx *ctx)
{
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        struct gs_dev *d = &gs_devs[i];
        for (int j = 0; j < d->nstreams; j++)
            if (d->streams[j].stream == stream && d->streams[j].ctx == ctx)
                d->streams[j--] = d->streams[--d->nstreams];
    }
}

void gs_drain_forget_ctx_locked(struct gs_ctx *ctx)
{
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        struct gs_dev *d = &gs_devs[i];
        for (int j = 0; j < d->nstreams; j++)
            if (d->streams[j].ctx == ctx)
                d->streams[j--] = d->streams[--d->nstreams];
        for (int j = 0; j < d->nflushes; j++)
            if (d->flushes[j].ctx == ctx)
                d->flushes[j--] = d->flushes[--d->nflushes];
    }
    for (struct gs_thread_mark **p = &thread_marks; *p;) {
        struct gs_thread_mark *m = *p;
        if (m->ctx == ctx) {
            m->dead = true; /* its event died with the context */
            *p = m->next;
            if (m->orphan)
                free(m);
        } else {
            p = &m->next;
        }
    }
    gs_graphcost_forget_ctx_locked(ctx);
}

/* ---- the drainer thread ------------------------------------------------------- */

/* One thing a round waits for: an event, or a stream to record one on. */
struct round_item {
    struct gs_ctx *ctx;       /* a use of it is held for the round */
    CUstream stream;          /* to record on; unused once event is set */
    bool has_stream;
    CUevent event;
    bool owned;               /* the event goes back to ctx's pool after */
    struct gs_thread_mark *retire; /* an orphan mark to free after waiting */
};

#define ROUND_ITEMS (GS_MAX_TRACKED_STREAMS + GS_MAX_FLUSH_MARKS + 64)

static int collect_locked(struct gs_dev *d, struct round_item *items)
{
    int n = 0;
    for (int i = 0; i < d->nstreams && n < ROUND_ITEMS; i++)
        if (gs_ctx_use_locked(d->streams[i].ctx))
            items[n++] = (struct round_item){.ctx = d->streams[i].ctx, .stream = d->streams[i].stream,
                                             .has_stream = true};
    int kept = 0;
    for (int i = 0; i < d->nflushes; i++) {
        struct gs_flush_mark *f = &d->flushes[i];
        if (n < ROUND_ITEMS && gs_ctx_use_locked(f->ctx))
            items[n++] = (struct round_item){.ctx = f->ctx, .event = f->event, .owned = true};
        else if (!f->ctx->dead && !f->ctx->closing)
            d->flushes[kept++] = *f;
    }
    d->nflushes = kept;
    for (struct gs_thread_mark **p = &thread_marks; *p && n < ROUND_ITEMS;) {
        struct gs_thread_mark *m = *p;
        bool take = m->dev == d && (atomic_exchange(&m->recorded, 0) || m->orphan);
        if (take && gs_ctx_use_locked(m->ctx)) {
            items[n++] = (struct round_item){.ctx = m->ctx, .event = m->event, .retire = m->orphan ? m : NULL};
            if (m->orphan) {
                *p = m->next; /* freed after the round */
                continue;
            }
        } else if (take && !m->orphan) {
            atomic_store(&m->recorded, 1); /* its context is closing: next round */
        }
        p = &m->next;
    }
    return n;
}

/* timed: a drain's round on one stream. Returns the drain's tail: how long
 * ago the stream's work ended when the drainer saw it, time the GPU sat
 * idle before the release, which is reported as idle. */
static uint64_t run_round(struct gs_dev *d, struct round_item *items, int n, bool timed)
{
    uint64_t tail = 0;
    for (int i = 0; i < n; i++) {
        struct round_item *it = &items[i];
        if (!it->has_stream || !gs_ctx_push(it->ctx))
            continue;
        gs_lock(GS_LOCK_CAPTURE);
        gs_lock(GS_LOCK_GATE);
        bool listed = tracked_locked(d, it->stream, it->ctx);
        gs_unlock(GS_LOCK_GATE);
        /* A stream that captures now had its admitted work flushed before
         * it began; one that was destroyed, before it went. */
        if (listed && !gs_capture_unrecordable(it->stream)) {
            CUevent event = gs_ctx_event_take(it->ctx, timed);
            if (event && GS_REAL(cuEventRecord)(event, it->stream) == CUDA_SUCCESS) {
                it->event = event;
                it->owned = true;
            } else {
                gs_ctx_event_give(it->ctx, event, timed);
                timed = false;
            }
        } else {
            timed = false;
        }
        gs_unlock(GS_LOCK_CAPTURE);
        gs_ctx_pop();
    }
    for (int i = 0; i < n; i++) {
        struct round_item *it = &items[i];
        if (!it->event || !gs_ctx_push(it->ctx))
            continue;
        gs_locks_check_none("a drainer round");
        CUresult rc = GS_REAL(cuEventSynchronize)(it->event);
        if (rc != CUDA_SUCCESS)
            GS_DEBUG("drainer: cuEventSynchronize returned %d", (int)rc);
        bool stream_timed = timed && it->has_stream && it->owned;
        if (stream_timed && rc == CUDA_SUCCESS) {
            /* recorded only while the stream is not capturing; waited for
             * with no lock held */
            gs_lock(GS_LOCK_CAPTURE);
            CUevent probe = gs_capture_unrecordable(it->stream) ? NULL : gs_ctx_probe(it->ctx, it->stream);
            gs_unlock(GS_LOCK_CAPTURE);
            tail = gs_ctx_probe_age_ns(it->ctx, probe, it->event);
        }
        if (it->retire)
            GS_REAL(cuEventDestroy_v2)(it->event);
        else if (it->owned)
            gs_ctx_event_give(it->ctx, it->event, stream_timed);
        gs_ctx_pop();
    }
    return tail;
}

/* Waits on the drainers' condition variable (the gate lock held) until a
 * wake-up or `until` on CLOCK_MONOTONIC (it is created for that clock). */
static void timed_wait_locked(uint64_t until)
{
    struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
    pthread_cond_timedwait(gs_drainer_cv(), gs_lock_mutex(GS_LOCK_GATE), &ts);
}

/* The drainer's loop: asks the slice machine whether a round is due (it
 * says when), runs it, and tells the machine what finished
 * (gs_drain_round.c, which the simulation runs too). A round first waits
 * until every launch already admitted has been handed to the driver (for
 * a drain), then reads how many have been. */
static void *drainer_main(void *arg)
{
    struct gs_dev *d = arg;
    static struct round_item items_by_dev[GS_MAX_DEVICES][ROUND_ITEMS]; /* one row per drainer */
    struct round_item *items = items_by_dev[d->slot];
    prctl(PR_SET_NAME, "gpuslice-drain", 0, 0, 0);
    gs_capture_relax_thread();
    gs_lock(GS_LOCK_GATE);
    for (;;) {
        struct gs_drain_ask ask = gs_drain_round_ask_locked(d, gs_now_ns());
        if (!ask.begins) {
            if (ask.wait_until)
                timed_wait_locked(ask.wait_until);
            else
                pthread_cond_wait(gs_drainer_cv(), gs_lock_mutex(GS_LOCK_GATE));
            continue;
        }
        gs_unlock(GS_LOCK_GATE);

        /* Launches admitted just before admission closed may still be on
         * their way into the driver. */
        while (ask.draining && !gs_drain_round_handed(d)) {
            struct timespec pause = {0, 20000};
            nanosleep(&pause, NULL);
        }
        gs_lock(GS_LOCK_GATE);
        /* Read before listing the streams. */
        struct gs_slice_event done = gs_drain_round_reading(d);
        int n = collect_locked(d, items);
        gs_unlock(GS_LOCK_GATE);

        /* A drain of one stream times its round, to report the idle tail. */
        bool timed = ask.draining && n == 1 && items[0].has_stream;
        uint64_t tail = run_round(d, items, n, timed);
        gs_graphcost_measure(d);
        uint64_t end = gs_now_ns();

        gs_lock(GS_LOCK_GATE);
        for (int i = 0; i < n; i++) {
            gs_ctx_unuse_locked(items[i].ctx);
            free(items[i].retire);
        }
        gs_drain_round_done_locked(d, &done, tail, end);
    }
    return NULL;
}

void gs_drain_start_locked(struct gs_dev *d)
{
    if (d->drainer_started)
        return;
    /* Whether a failed start was logged; guarded by the gate lock. Tried
     * again by every launch that waits and by the gate thread while a
     * slice is held: a drain without a drainer ends at once (gs_slice.c). */
    static bool warned;
    int err = pthread_create(&d->drainer, NULL, drainer_main, d);
    if (err == 0) {
        d->drainer_started = true;
        struct gs_slice_event started = {.type = GS_SLICE_DRAINER_STARTED};
        struct gs_slice_actions out;
        gs_dispatch_locked(d, &started, gs_now_ns(), &out);
        if (warned)
            gs_log(GS_LOG_WARN, "the drainer thread started after all: slices are drained again");
        warned = false;
    } else if (!warned) {
        gs_log(GS_LOG_ERROR, "cannot start the drainer thread (%s): slices end without waiting for their work "
               "until it starts", strerror(err));
        warned = true;
    }
}

void gs_drain_after_fork_child(void)
{
    /* The parent's marks name its contexts and threads, none of which
     * exist here. */
    thread_marks = NULL;
    memset(my_marks, 0, sizeof my_marks);
}
