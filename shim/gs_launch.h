/*
 * The launch gate (gs_launch.c): what every wrapper of a compute
 * submission runs around the real call.
 *
 * The fast path, gs_launch_enter below, for a thread that launched into
 * the same stream before in this slice, while its GPU holds a slice with
 * budget left and no graph capture is under way in the process: a few
 * relaxed loads, one atomic add and two loads after it; no lock, no
 * system call, no clock read, no driver call (the first launch after a
 * synchronization that left the GPU idle also reads the clock, to end the
 * spell). Each thread remembers the last GS_LAUNCH_CACHE streams it
 * launched into, with their GPU; an entry is good while no context or
 * stream has died since (gs_handles_gen) and the stream is still listed for
 * the GPU's drainer (stream_set_gen).
 *
 * Everything else is gs_launch_slow: launches into a capturing stream pass
 * ungated (they run nothing); the GPU is looked up (gs_lookup.c); the
 * launch is delivered to the slice machine, and waits until it is
 * admitted; the stream is listed for the drainer.
 */
#ifndef GPUSLICE_LAUNCH_H
#define GPUSLICE_LAUNCH_H

#include "gs_capture.h"
#include "gs_contexts.h"
#include "gs_dev.h"
#include "gs_drain.h"
#include "gs_lookup.h"

#define GS_LAUNCH_CACHE 4          /* streams a thread's fast path remembers */

/* What a launch was admitted as: its GPU (NULL when it passed ungated) and,
 * for the per-thread default stream, the thread's mark. */
struct gs_admit {
    struct gs_dev *dev;
    struct gs_thread_mark *mark;
};

/* A stream the thread launched into; owned by the thread. */
struct gs_launch_cache {
    CUstream stream;
    int ptsz;
    uint32_t handles_gen, stream_set_gen;
    struct gs_dev *dev;
    struct gs_thread_mark *mark;
};
extern __thread struct gs_launch_cache gs_launch_cache[GS_LAUNCH_CACHE];

CUresult gs_launch_slow(CUstream stream, int ptsz, struct gs_admit *a);
/* Waits (gate lock held, released meanwhile) until d admits a launch: a
 * graph launch of graph_ns (0: not measured yet) when `graph`. */
void gs_launch_wait_admission_locked(struct gs_dev *d, bool graph, uint64_t graph_ns);
/* Lists t's stream for the drainer (gate lock held). */
void gs_launch_track_stream_locked(const struct gs_launch_target *t);
/* Remembers the stream in the calling thread's launch cache, with the GPU
 * it was admitted to, the stream set's generation read under the gate lock
 * after gs_launch_track_stream_locked, and gs_handles_gen read before the
 * stream was looked up: the fast path's entry, and what a synchronization
 * on the stream concerns (gs_sync.c). */
void gs_launch_remember(CUstream stream, int ptsz, struct gs_dev *d, struct gs_thread_mark *mark, uint32_t set_gen,
                        uint32_t handles_gen);
void gs_launch_after_fork_child(void);

#define GS_RELAXED(x) atomic_load_explicit(&(x), memory_order_relaxed)

static inline CUresult gs_launch_enter(CUstream stream, int ptsz, struct gs_admit *a)
{
    const struct gs_launch_cache *c = gs_launch_cache;
    for (int i = 0; i < GS_LAUNCH_CACHE; i++, c++) {
        if (c->stream != stream || c->ptsz != ptsz || !c->dev)
            continue;
        struct gs_dev *d = c->dev;
        if (__builtin_expect(GS_RELAXED(gs_captures_active) == 0, 1) &&
            __builtin_expect(c->handles_gen == GS_RELAXED(gs_handles_gen), 1) &&
            __builtin_expect(c->stream_set_gen == GS_RELAXED(d->stream_set_gen), 1) &&
            __builtin_expect(gs_slice_admit_fast(&d->slice), 1)) {
            /* Sequentially consistent with the add (gs_slice_admit_fast):
             * a synchronization that marks the device idle either sees
             * this launch or is seen by it (gs_slice.c). */
            if (__builtin_expect(atomic_load(&d->slice.idle_since) != 0, 0))
                gs_slice_end_idle(&d->slice, gs_now_ns());
            a->dev = d;
            a->mark = c->mark;
            return CUDA_SUCCESS;
        }
        break;
    }
    return gs_launch_slow(stream, ptsz, a);
}

static inline void gs_launch_exit(const struct gs_admit *a, CUresult rc)
{
    if (a->mark && rc == CUDA_SUCCESS)
        gs_drain_record_thread_mark(a->mark);
    if (a->dev)
        atomic_fetch_add_explicit(&a->dev->slice.submitted, 1, memory_order_release);
}

/* The calling thread's current context may have changed: what its default
 * streams resolve to may have too. */
static inline void gs_launch_context_changed(void)
{
    gs_lookup_forget_current();
    for (int i = 0; i < GS_LAUNCH_CACHE; i++)
        gs_launch_cache[i].dev = NULL;
}

#endif
