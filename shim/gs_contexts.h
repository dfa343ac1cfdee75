/*
 * The contexts the shim has seen, and the rule that keeps its own threads
 * off a context the application has destroyed.
 *
 * The drainer and the capture bookkeeping push an application's context
 * to record and wait on events in it. NVIDIA forbids touching a context
 * after cuCtxDestroy, after the last cuDevicePrimaryCtxRelease or after
 * cuDevicePrimaryCtxReset. So every shim thread that wants to use a
 * context first takes a use of it (gs_ctx_use_locked), and the wrappers of
 * those calls mark the context closing, wait until no use is left, make
 * the real call, and then either forget everything the shim holds in the
 * context (it died) or reopen it (a release that left it alive).
 *
 * Each context also keeps a small pool of the shim's own events: blocking
 * ones without timing, for the drainer's marks, and timed ones, for
 * measuring graph launches and the idle tail of a drain.
 */
#ifndef GPUSLICE_CONTEXTS_H
#define GPUSLICE_CONTEXTS_H

#include "gs_driver.h"

#include <stdbool.h>
#include <stdint.h>

#define GS_CTX_EVENT_POOL 16

struct gs_dev;

struct gs_ctx {
    CUcontext handle;
    bool primary;            /* retained with cuDevicePrimaryCtxRetain */
    bool device_known;
    CUdevice device;
    struct gs_dev *dev;      /* its device gate, once resolved */
    bool closing;            /* a destroy, release or reset is under way */
    bool dead;               /* destroyed: never touched again */
    int uses;                /* shim threads using it right now */
    CUevent events[GS_CTX_EVENT_POOL];
    int nevents;
    CUevent timed_events[GS_CTX_EVENT_POOL];
    int ntimed_events;
    struct gs_ctx *next;
};

/* Bumped (relaxed is enough: readers recheck under the gate lock) whenever
 * a context or stream the shim knows dies, so that no thread's launch
 * cache names it again. */
extern _Atomic uint32_t gs_handles_gen;

/* The entry of a live context, created on first sight (gate lock held).
 * A dead entry whose handle the driver hands out again is reused. NULL
 * only when memory runs out. */
struct gs_ctx *gs_ctx_get_locked(CUcontext handle);

/* Takes a use of c for a driver call outside the gate lock; false when the
 * context is closing or dead. gs_ctx_unuse_locked gives it back. */
bool gs_ctx_use_locked(struct gs_ctx *c);
void gs_ctx_unuse_locked(struct gs_ctx *c);

/* Makes c the calling thread's current context for a moment (the caller
 * holds a use of it); gs_ctx_pop restores the previous one. */
bool gs_ctx_push(struct gs_ctx *c);
void gs_ctx_pop(void);

/* An event of the shim's from c's pool (created when the pool is empty),
 * and back. The caller holds a use of c and has pushed it. `timed` events
 * measure time; the others block without spinning and never time. */
CUevent gs_ctx_event_take(struct gs_ctx *c, bool timed);
void gs_ctx_event_give(struct gs_ctx *c, CUevent event, bool timed);

/* How long ago the work before `ended` (a timed event of c, complete)
 * finished on `stream`, which is idle now: a probe recorded on it
 * completes at once, and the time between the two is the answer. The
 * probe is recorded by gs_ctx_probe (NULL: it cannot be), with the
 * capture lock held if the stream may capture, and waited for by
 * gs_ctx_probe_age_ns with no lock held (0 if it cannot be told). The
 * caller holds a use of c and has pushed it. */
CUevent gs_ctx_probe(struct gs_ctx *c, CUstream stream);
uint64_t gs_ctx_probe_age_ns(struct gs_ctx *c, CUevent probe, CUevent ended);

/* The device ordinal of c; the caller holds a use of it. */
CUresult gs_ctx_device(struct gs_ctx *c, CUdevice *out);

/* A destroy, release or reset of a context begins: the entry (NULL if the
 * shim has none) is marked closing, and the call waits until no shim
 * thread uses it. Takes the gate lock. */
struct gs_ctx *gs_ctx_begin_close(CUcontext handle, bool primary, CUdevice device);
/* After the real call (gate lock held): it died (never touched again), and
 * in any case it is no longer closing. */
void gs_ctx_died_locked(struct gs_ctx *c);
void gs_ctx_end_close_locked(struct gs_ctx *c);
/* A primary context of device was retained. Takes the gate lock. */
void gs_ctx_retained(CUcontext handle, CUdevice device);

void gs_contexts_after_fork_child(void);

#endif
