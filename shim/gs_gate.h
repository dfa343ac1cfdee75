/*
 * The launch gate: a process submits GPU work on a device only while its
 * tenant holds that device's time slice from gpuslice-server.
 *
 * Per device the gate keeps an admission flag and a budget, read by
 * launching threads without a lock (the fast path); everything else is
 * the business of the gate thread (gs_client.c), which talks to the
 * server, and of one drainer thread per device (gs_drain.c), which learns
 * when admitted work has finished from events it records on the streams
 * the work was admitted to. All cold state is guarded by gs_gate_lock.
 *
 * A launch belongs to the device of its stream: a created stream's own
 * context, or for the default streams the calling thread's current
 * context. Launches into a stream that is capturing a graph run nothing
 * and pass ungated (gs_capture.c).
 */
#ifndef GPUSLICE_GATE_H
#define GPUSLICE_GATE_H

#include "gs_driver.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpuslice/protocol.h"
#include "gs_slice.h"

#define GS_MAX_TRACKED_STREAMS 32 /* streams with admitted work, per device and slice */
#define GS_MAX_FLUSH_MARKS 64      /* events recorded ahead of a capture, per device */
#define GS_LAUNCH_CACHE 4          /* streams a thread's fast path remembers */

struct gs_ctx;                     /* gs_contexts.h */
struct gs_thread_mark;             /* gs_drain.c */

/* A stream the shim admitted work to in the current slice. The legacy
 * default stream of a context is stream CU_STREAM_LEGACY; per-thread
 * default streams are never listed (only their own thread can name them:
 * see struct gs_thread_mark). */
struct gs_tracked_stream {
    CUstream stream;
    struct gs_ctx *ctx;
};

/* An event recorded for the drainer to wait on, in ctx's pool. */
struct gs_flush_mark {
    CUevent event;
    struct gs_ctx *ctx;
};

struct gs_dev {
    /* Hot: read by launching threads without a lock. */
    _Atomic uint32_t stream_set_gen; /* bumped when `streams` is emptied */
    struct gs_slice slice;       /* the slice machine's state (gs_slice.h) */

    /* Cold: guarded by gs_gate_lock. */
    bool used;
    int slot;
    CUdevice ordinal;
    uint8_t uuid[16];
    uint64_t total_mem;          /* the real driver's cuDeviceTotalMem; 0 unknown */
    bool declared;               /* DEVICE sent on this connection */
    struct gs_tracked_stream streams[GS_MAX_TRACKED_STREAMS];
    int nstreams;
    struct gs_flush_mark flushes[GS_MAX_FLUSH_MARKS];
    int nflushes;
    /* the drainer thread */
    pthread_t drainer;
    bool drainer_started;
    /* device memory this process holds on it, as counted by the server */
    uint64_t mem_held;
    uint64_t mem_cap;            /* the tenant's cap, as last reported */
};

/* Guards the cold state of every gs_dev and the gate thread's state;
 * gs_gate_cv wakes threads blocked in the slow path. */
extern pthread_mutex_t gs_gate_lock;
extern pthread_cond_t gs_gate_cv;
extern struct gs_dev gs_devs[GS_MAX_DEVICES];

/* The calling thread's device gate for its current context; NULL until
 * resolved, and again after a context change. */
extern __thread struct gs_dev *gs_tls_dev;

/* What a launch was admitted as: its device (NULL when it passed
 * ungated) and, for the per-thread default stream, the thread's mark. */
struct gs_admit {
    struct gs_dev *dev;
    struct gs_thread_mark *mark;
};

/* The fast path's memory of the streams a thread launched into: valid
 * while handles_gen and the device's stream_set_gen are unchanged (so the
 * stream is still listed for the drainer). Owned by the thread. */
struct gs_launch_cache {
    CUstream stream;
    int ptsz;
    uint32_t handles_gen, stream_set_gen;
    struct gs_dev *dev;
    struct gs_thread_mark *mark;
};
extern __thread struct gs_launch_cache gs_tls_launches[GS_LAUNCH_CACHE];

/* Bumped (relaxed is enough: readers recheck under gs_gate_lock) whenever a
 * context or stream the shim knows dies, so that no thread's cache names
 * it again. Written by the lifetime wrappers. */
extern _Atomic uint32_t gs_handles_gen;

/* How a launch names its stream. */
enum gs_stream_kind { GS_STREAM_LEGACY, GS_STREAM_PER_THREAD, GS_STREAM_CREATED };

/* Where a launch on a stream goes: its kind, context and device gate. */
struct gs_launch_target {
    enum gs_stream_kind kind;
    CUstream stream;             /* CU_STREAM_LEGACY for the legacy stream */
    struct gs_ctx *ctx;
    struct gs_dev *dev;
};

/* Set on the gate thread: waking launchers (opening admission) or the
 * drainers then only notes the wake-up in gs_wakes_owed (under
 * gs_gate_lock), and the gate thread gives it after unlocking, so that a
 * woken thread finds the lock free instead of waking once for the
 * condition and again for the lock. */
extern __thread bool gs_defer_wakeups;
#define GS_WAKE_LAUNCHERS 1u /* broadcast gs_gate_cv, and the socket's reader */
#define GS_WAKE_DRAINERS 2u  /* gs_drain_wake_unlocked */
extern unsigned gs_wakes_owed;

/* The slow path: passes launches into capturing streams, resolves the
 * device, lists the stream for the drainer, starts the gate thread on
 * first use, and blocks until the launch may proceed. Returns
 * CUDA_SUCCESS with a->dev NULL for a launch that goes ungated (capturing
 * stream, or one the driver will refuse itself). */
CUresult gs_gate_slow(CUstream stream, int ptsz, struct gs_admit *a);

/* Resolves the stream a call names to its kind, context and gate. */
CUresult gs_gate_resolve_stream(CUstream stream, int ptsz, struct gs_launch_target *t);
/* Lists t's stream for the drainer (called with gs_gate_lock held). */
void gs_gate_track_stream_locked(const struct gs_launch_target *t);
/* Blocks (gs_gate_lock held) until d admits a launch: a graph launch of
 * graph_ns (0: not measured yet) when `graph`. */
void gs_gate_wait_admission_locked(struct gs_dev *d, bool graph, uint64_t graph_ns);

/* The gate of the calling thread's current device (created on first use,
 * cached per thread), or of a device by ordinal. */
CUresult gs_gate_current_device(struct gs_dev **out);
CUresult gs_gate_device_by_ordinal(CUdevice ordinal, struct gs_dev **out);

/* Delivers ev to d's slice machine at now and carries out its actions
 * (gs_gate_lock held): sends, wake-ups, the gate thread's timer. out
 * receives what the step answered (a launch admitted, a round to run). */
void gs_gate_deliver_locked(struct gs_dev *d, const struct gs_slice_event *ev, uint64_t now,
                            struct gs_slice_actions *out);

void gs_gate_after_fork_child(void);

/* gs_drain.c: the drainer threads and the marks they wait on. */
void gs_drain_start_locked(struct gs_dev *d);
/* Wakes the drainers (gs_gate_lock held); on the gate thread, owes it. */
void gs_drain_wake_locked(void);
void gs_drain_wake_unlocked(void);
/* The calling thread's mark for its per-thread default stream in ctx. */
struct gs_thread_mark *gs_drain_thread_mark(struct gs_ctx *ctx, struct gs_dev *d);
/* Whether any thread launched into a per-thread default stream on d (its
 * work cannot be queried from another thread); gs_gate_lock held. */
bool gs_drain_has_thread_marks_locked(const struct gs_dev *d);
/* After a launch into the per-thread default stream: records the mark. */
void gs_drain_record_thread_mark(struct gs_thread_mark *mark);
/* Records events on the tracked streams a capture or a stream destruction
 * is about to make unrecordable (see gs_capture.c). Called with
 * gs_capture_lock held, on the application's thread. */
void gs_drain_flush(const struct gs_launch_target *t, bool with_legacy);
/* Forgets every stream, mark and event of a context that died, or one
 * stream that was destroyed (gs_gate_lock held). */
void gs_drain_forget_ctx_locked(struct gs_ctx *ctx);
void gs_drain_forget_stream_locked(CUstream stream, struct gs_ctx *ctx);
void gs_drain_after_fork_child(void);
/* gs_client.c: the gate thread. */
void gs_client_start_locked(void);
/* A slice machine armed its timer at `at` (gs_gate_lock held): wakes the
 * gate thread if it sleeps past it. */
void gs_client_timer_armed_locked(uint64_t at);
/* ACQUIRE, or RELEASE of grant, for d if connected (gs_gate_lock held). */
void gs_client_send_acquire_locked(struct gs_dev *d);
void gs_client_send_release_locked(struct gs_dev *d, uint64_t grant, uint64_t idle_ns, bool more);
void gs_client_wake(void);
/* Wakes every launcher blocked in gs_client_wait_locked (gs_gate_lock held). */
void gs_client_wake_launchers_locked(void);
bool gs_client_policy_open(void);
bool gs_client_connected_locked(void);
/* Not welcomed yet, but the server may be up: the gate thread runs and has
 * not tried to connect yet, or a connection is made and its WELCOME has not
 * come (gs_gate_lock held). */
bool gs_client_connecting_locked(void);
void gs_client_after_fork_child(void);
/* Blocks a launching thread until something may have changed: a message
 * from the server, a broadcast of gs_gate_cv, or 50 ms. for_grant: the
 * thread waits for a GRANT, and may read the server's socket itself; else
 * it waits for budget within a held slice (or a drain's end), which a
 * drainer round brings. Called with gs_gate_lock held; returns with it
 * held. */
void gs_client_wait_locked(bool for_grant);

/* MEM_QUERY for d: its tenant's cap and count there. Called with
 * gs_gate_lock held. Returns 0 with *result filled, or -1 when the server
 * is unreachable and the policy is open: the caller then goes on without
 * the server's figures. Under the wait policy it waits for the server. */
int gs_client_mem_query_locked(struct gs_dev *d, struct gs_msg_mem_result *result);

/* MEM_LEASE for d: takes gs_gate_lock, sends, and waits for the answer
 * without holding it (the gate thread reads it). Returns 0 with *out
 * filled, or -1 when the server is unreachable and the policy is open. */
int gs_client_lease_call(struct gs_dev *d, uint64_t need, uint64_t want, struct gs_msg_mem_leased *out);
/* MEM_FREE for d when connected (takes gs_gate_lock; no answer). */
void gs_client_mem_free(struct gs_dev *d, uint64_t bytes);
/* MEM_LEASE of bytes for d when connected, whose answer nobody waits for
 * (id 0: its MEM_LEASED is dropped): memory the driver has already taken.
 * Takes gs_gate_lock; safe on the gate thread. */
void gs_client_mem_lease_unanswered(struct gs_dev *d, uint64_t bytes);

/* Sends m once the process is connected (gs_gate_lock held; released
 * while waiting): at once if it is, after at most wait_ns if a connection
 * is being made. -1, sending nothing, when there is no connection and none
 * under way (no server, whatever the server-down policy). */
int gs_client_send_connected_locked(const struct gs_msg *m, uint64_t wait_ns);

uint64_t gs_now_ns(void);

#endif
