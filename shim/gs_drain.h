/*
 * The drainers (gs_drain.c): a thread per GPU that learns when the work the
 * gate admitted has finished, from events of the shim's own it records on
 * the streams the work was admitted to and waits on; and what it waits on:
 * the streams listed per slice (gs_dev.streams), the marks of per-thread
 * default streams, the flush marks recorded before a capture.
 */
#ifndef GPUSLICE_DRAIN_H
#define GPUSLICE_DRAIN_H

#include "gs_dev.h"

struct gs_thread_mark;             /* a thread's mark for its per-thread default stream */

/* Starts d's drainer unless it runs (gate lock held); its start may fail
 * (the calls that need it try again), and a drain without a drainer ends
 * at once (gs_slice.c). */
void gs_drain_start_locked(struct gs_dev *d);
/* The calling thread's mark for its per-thread default stream in ctx;
 * NULL if none can be made (the launch is drained through the legacy
 * stream). Takes the gate lock. */
struct gs_thread_mark *gs_drain_thread_mark(struct gs_ctx *ctx, struct gs_dev *d);
/* Whether any thread launched into a per-thread default stream on d (its
 * work cannot be queried from another thread); gate lock held. */
bool gs_drain_has_thread_marks_locked(const struct gs_dev *d);
/* After a launch into the per-thread default stream: records the mark. */
void gs_drain_record_thread_mark(struct gs_thread_mark *mark);
/* Records events on the listed streams a capture or a stream's
 * destruction is about to make unrecordable (t's stream, and with
 * with_legacy its context's legacy stream), on the application's thread,
 * with the capture lock held (gs_capture.c). Events it cannot keep are
 * handed back in *unkept to be waited for once the caller let the lock go
 * (gs_drain_wait_unkept). */
struct gs_unkept_marks {
    int n;
    CUevent events[2];
    struct gs_ctx *ctx;
};
void gs_drain_flush(const struct gs_launch_target *t, bool with_legacy, struct gs_unkept_marks *unkept);
void gs_drain_wait_unkept(struct gs_unkept_marks *unkept);
/* Forgets every stream, mark and event of a context that died, or one
 * stream that was destroyed (gate lock held). */
void gs_drain_forget_ctx_locked(struct gs_ctx *ctx);
void gs_drain_forget_stream_locked(CUstream stream, struct gs_ctx *ctx);
void gs_drain_after_fork_child(void);

#endif
