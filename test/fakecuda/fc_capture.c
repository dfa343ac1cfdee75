/*
 * fakecuda stream capture: cuStreamBeginCapture (and _v2, ToGraph),
 * cuStreamEndCapture, cuStreamIsCapturing, cuStreamGetCaptureInfo (and
 * _v2, _v3), cuThreadExchangeStreamCaptureMode, and the rules of the CUDA
 * Programming Guide's "Prohibited and Unhandled Operations" (CUDA Graphs,
 * stream capture):
 *   - work pushed into a capturing stream is recorded into the capture's
 *     graph and does not run;
 *   - a stream that waits on an event recorded in a capture joins it;
 *   - synchronizing or querying a capturing stream, or a context in which a
 *     capture is active, is prohibited;
 *   - using the legacy stream while a blocking stream of its context
 *     captures is prohibited (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
 *   - "potentially unsafe" calls are prohibited for a thread whose
 *     interaction mode says so ("cuThreadExchangeStreamCaptureMode");
 *   - a prohibited operation invalidates the capture sequences it conflicts
 *     with: their streams answer CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and
 *     cuStreamEndCapture returns that error and a NULL graph.
 * Every invalidation is appended, one line each, to FAKECUDA_CAPTURE_LOG.
 */
#include "fc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct fc_capture {
    uint64_t id;
    struct fc_stream *origin;
    struct fc_graph *graph;
    bool graph_owned;                /* made by cuStreamBeginCapture, not given */
    CUstreamCaptureMode mode;
    pthread_t thread;                /* the thread that began it */
    long tid;
    bool invalidated;
    CUdeviceptr *deferred_frees;     /* cuMemFreeAsync into the capture */
    size_t nfrees;
    struct fc_capture *next;
};

/* Active capture sequences of the process and the next id; guarded by the
 * exec lock. */
static struct fc_capture *captures;
static uint64_t next_capture_id = 1;

/* The calling thread's capture interaction mode; owned by the thread. */
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* FAKECUDA_CAPTURE_LOG, opened once for appending; written under
 * pthread_once, read-only afterwards (-1 when unset). */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int capture_log_fd = -1;

static void open_capture_log(void)
{
    const char *path = getenv("FAKECUDA_CAPTURE_LOG");
    if (!path || !*path)
        return;
    capture_log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (capture_log_fd < 0)
        fc_log("FAKECUDA_CAPTURE_LOG=%s: %s", path, strerror(errno));
}

static long current_tid(void)
{
    return (long)syscall(SYS_gettid);
}

/* Invalidates a capture sequence and logs why:
 *   CALL tid=TID capture=ID reason=TEXT */
static void invalidate_locked(struct fc_capture *cap, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void invalidate_locked(struct fc_capture *cap, const char *call, const char *fmt, ...)
{
    if (cap->invalidated)
        return;
    cap->invalidated = true;
    pthread_once(&log_once, open_capture_log);
    if (capture_log_fd < 0)
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "%s tid=%ld capture=%llu reason=", call, current_tid(),
                     (unsigned long long)cap->id);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    size_t len = (size_t)n < sizeof line - 1 ? (size_t)n : sizeof line - 2;
    line[len++] = '\n';
    if (write(capture_log_fd, line, len) < 0)
        fc_log("FAKECUDA_CAPTURE_LOG: %s", strerror(errno));
}

static const char *mode_name(CUstreamCaptureMode mode)
{
    switch (mode) {
    case CU_STREAM_CAPTURE_MODE_GLOBAL: return "global";
    case CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: return "thread-local";
    case CU_STREAM_CAPTURE_MODE_RELAXED: return "relaxed";
    }
    return "unknown";
}

static struct fc_capture *capture_by_id_locked(uint64_t id)
{
    for (struct fc_capture *c = captures; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* Whether a capture has a member stream in the context; with
 * blocking_only, a member that synchronizes with the legacy stream.
 * Streams of any context may join a capture. */
static bool captures_in_ctx_locked(const struct fc_capture *cap, const struct fc_ctx *ctx, bool blocking_only)
{
    for (const struct fc_stream *s = ctx->streams; s; s = s->next)
        if (s->capture == cap && (!blocking_only || fc_stream_blocking(s)))
            return true;
    return false;
}

/* ---- the checks the other calls make ------------------------------------ */

CUresult fc_capture_check_unsafe_locked(const char *call)
{
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    pthread_t self = pthread_self();
    bool prohibited = false;
    for (struct fc_capture *c = captures; c; c = c->next) {
        bool own = pthread_equal(c->thread, self);
        if (own && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
            invalidate_locked(c, call, "potentially unsafe call during this thread's %s-mode capture",
                              mode_name(c->mode));
            prohibited = true;
        } else if (!own && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                   c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
            invalidate_locked(c, call, "potentially unsafe call from a global-mode thread during "
                              "thread %ld's global-mode capture", c->tid);
            prohibited = true;
        }
    }
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult fc_capture_check_unsafe(const char *call)
{
    fc_exec_lock();
    CUresult rc = fc_capture_check_unsafe_locked(call);
    fc_exec_unlock();
    return rc;
}

CUresult fc_capture_check_legacy_locked(const char *call, struct fc_stream *stream)
{
    if (stream->kind != FC_STREAM_LEGACY)
        return CUDA_SUCCESS;
    bool implicit = false;
    for (struct fc_capture *c = captures; c; c = c->next)
        if (captures_in_ctx_locked(c, stream->ctx, true)) {
            invalidate_locked(c, call, "legacy stream used while a blocking stream of its context captures");
            implicit = true;
        }
    return implicit ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
}

CUresult fc_capture_check_sync_locked(const char *call, struct fc_stream *stream)
{
    CUresult rc = fc_capture_check_legacy_locked(call, stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (stream->capture) {
        invalidate_locked(stream->capture, call, "synchronizing or querying a capturing stream");
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return fc_capture_check_unsafe_locked(call);
}

CUresult fc_capture_check_ctx_sync_locked(const char *call, struct fc_ctx *ctx)
{
    bool active = false;
    for (struct fc_capture *c = captures; c; c = c->next)
        if (captures_in_ctx_locked(c, ctx, false)) {
            invalidate_locked(c, call, "synchronizing a context with an active capture");
            active = true;
        }
    if (active)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return fc_capture_check_unsafe_locked(call);
}

CUresult fc_capture_check_event_locked(const char *call, struct fc_event *event)
{
    CUresult rc = fc_capture_check_unsafe_locked(call);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (event->capture_id) {
        /* "The operation is not permitted on an event which was last
         * recorded in a capturing stream." */
        struct fc_capture *c = capture_by_id_locked(event->capture_id);
        if (c)
            invalidate_locked(c, call, "querying or synchronizing an event recorded in the capture");
        return CUDA_ERROR_CAPTURED_EVENT;
    }
    return CUDA_SUCCESS;
}

/* ---- recording into a capture ------------------------------------------- */

static CUresult capture_add_locked(struct fc_stream *stream, const struct fc_work *work)
{
    struct fc_capture *cap = stream->capture;
    if (cap->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    size_t index;
    CUresult rc = fc_graph_append_locked(cap->graph, work, &index);
    if (rc != CUDA_SUCCESS)
        return rc;
    stream->captured_nodes++;
    stream->capture_last_node = index;
    stream->capture_joined = stream == cap->origin;
    return CUDA_SUCCESS;
}

CUresult fc_stream_submit_locked(const char *call, struct fc_stream *stream, const struct fc_work *work)
{
    CUresult rc = fc_capture_check_legacy_locked(call, stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (stream->capture)
        return capture_add_locked(stream, work);
    return fc_enqueue_locked(stream, work, NULL, NULL);
}

CUresult fc_capture_record_locked(struct fc_stream *stream, struct fc_event *event, unsigned flags)
{
    struct fc_capture *cap = stream->capture;
    if (cap->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (flags & CU_EVENT_RECORD_EXTERNAL) {
        struct fc_work work = {.kind = FC_WORK_RECORD, .event = event->handle};
        CUresult rc = capture_add_locked(stream, &work);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    /* A captured event: it stands for the stream's place in the capture. */
    fc_fence_unref(event->fence);
    event->fence = NULL;
    event->capture_id = cap->id;
    event->capture_stream_id = stream->id;
    event->capture_stream_nodes = stream->captured_nodes;
    return CUDA_SUCCESS;
}

static void join_locked(struct fc_stream *stream, struct fc_capture *cap)
{
    stream->capture = cap;
    stream->captured_nodes = 0;
    stream->capture_joined = true;
}

/* The member stream of a capture with this id, in any context. */
static struct fc_stream *member_by_id_locked(struct fc_capture *cap, uint64_t stream_id)
{
    for (struct fc_ctx *ctx = fc_live_contexts_locked_first(); ctx; ctx = ctx->live_next)
        for (struct fc_stream *s = ctx->streams; s; s = s->next)
            if (s->capture == cap && s->id == stream_id)
                return s;
    return NULL;
}

CUresult fc_capture_wait_locked(const char *call, struct fc_stream *stream, struct fc_event *event,
                                unsigned flags, bool *handled)
{
    *handled = true;
    if (event->capture_id) {
        struct fc_capture *c = capture_by_id_locked(event->capture_id);
        if (!c) {
            if (stream->capture)
                invalidate_locked(stream->capture, call, "waiting on an event of an ended capture");
            return CUDA_ERROR_CAPTURED_EVENT;
        }
        if (c->invalidated)
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        if (stream->capture && stream->capture != c) {
            invalidate_locked(c, call, "waiting would merge capture %llu into capture %llu",
                              (unsigned long long)c->id, (unsigned long long)stream->capture->id);
            invalidate_locked(stream->capture, call, "waiting would merge capture %llu into capture %llu",
                              (unsigned long long)c->id, (unsigned long long)stream->capture->id);
            return CUDA_ERROR_STREAM_CAPTURE_MERGE;
        }
        if (!stream->capture) {
            if (stream->kind == FC_STREAM_LEGACY) {
                invalidate_locked(c, call, "the legacy stream cannot join a capture");
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            }
            join_locked(stream, c); /* cross-stream capture: the stream joins */
            return CUDA_SUCCESS;
        }
        /* Within the capture: the origin waiting on a forked stream's last
         * node joins that stream back. */
        if (stream == c->origin) {
            struct fc_stream *forked = member_by_id_locked(c, event->capture_stream_id);
            if (forked && forked->captured_nodes == event->capture_stream_nodes)
                forked->capture_joined = true;
        }
        return CUDA_SUCCESS;
    }
    if (stream->capture) {
        struct fc_capture *cap = stream->capture;
        if (cap->invalidated)
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        if (!event->fence)
            return CUDA_SUCCESS; /* never recorded: nothing to wait for */
        if (flags & CU_EVENT_WAIT_EXTERNAL) {
            struct fc_work work = {.kind = FC_WORK_WAIT, .event = event->handle};
            return capture_add_locked(stream, &work);
        }
        invalidate_locked(cap, call, "a capturing stream waited on an event recorded outside the capture");
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    *handled = false;
    return CUDA_SUCCESS;
}

bool fc_capture_defer_free_locked(struct fc_stream *stream, CUdeviceptr ptr)
{
    struct fc_capture *cap = stream->capture;
    if (!cap)
        return false;
    CUdeviceptr *grown = realloc(cap->deferred_frees, (cap->nfrees + 1) * sizeof *grown);
    if (!grown)
        return false;
    cap->deferred_frees = grown;
    cap->deferred_frees[cap->nfrees++] = ptr;
    return true;
}

/* ---- ending ------------------------------------------------------------- */

static void unlink_capture_locked(struct fc_capture *cap)
{
    for (struct fc_capture **link = &captures; *link; link = &(*link)->next)
        if (*link == cap) {
            *link = cap->next;
            break;
        }
}

/* Takes the member streams of a context out of the capture; reports
 * whether a forked stream's work was left unjoined. */
static bool detach_members_locked(struct fc_capture *cap, struct fc_ctx *ctx)
{
    bool unjoined = false;
    for (struct fc_stream *s = ctx->streams; s; s = s->next) {
        if (s->capture != cap)
            continue;
        if (s != cap->origin && s->captured_nodes > 0 && !s->capture_joined)
            unjoined = true;
        s->capture = NULL;
        s->captured_nodes = 0;
        s->capture_joined = false;
    }
    return unjoined;
}

static bool detach_all_members_locked(struct fc_capture *cap)
{
    bool unjoined = false;
    for (struct fc_ctx *ctx = fc_live_contexts_locked_first(); ctx; ctx = ctx->live_next)
        unjoined |= detach_members_locked(cap, ctx);
    return unjoined;
}

/* Ends a capture; returns its graph or NULL, and the pointers whose
 * cuMemFreeAsync waited for the end (the caller frees them unlocked). */
static CUresult end_locked(struct fc_capture *cap, struct fc_graph **graph_out, CUdeviceptr **frees,
                           size_t *nfrees)
{
    bool unjoined = detach_all_members_locked(cap);
    unlink_capture_locked(cap);
    CUresult rc = cap->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                : unjoined         ? CUDA_ERROR_STREAM_CAPTURE_UNJOINED
                                   : CUDA_SUCCESS;
    cap->graph->capturing = false;
    *graph_out = rc == CUDA_SUCCESS ? cap->graph : NULL;
    if (rc != CUDA_SUCCESS && cap->graph_owned)
        fc_graph_free_locked(cap->graph);
    *frees = cap->deferred_frees;
    *nfrees = cap->nfrees;
    free(cap);
    return rc;
}

void fc_capture_stream_destroyed_locked(const char *call, struct fc_stream *stream)
{
    struct fc_capture *cap = stream->capture;
    if (!cap)
        return;
    invalidate_locked(cap, call, "a stream of the capture was destroyed");
    if (stream != cap->origin) {
        stream->capture = NULL;
        return;
    }
    /* Nobody can end it any more: the sequence ends here. */
    struct fc_graph *graph;
    CUdeviceptr *frees;
    size_t nfrees;
    end_locked(cap, &graph, &frees, &nfrees);
    free(frees); /* their memory goes with the context or the process */
}

void fc_capture_ctx_stopping_locked(struct fc_ctx *ctx)
{
    struct fc_capture *c = captures;
    while (c) {
        struct fc_capture *next = c->next;
        if (c->origin->ctx == ctx) {
            fc_capture_stream_destroyed_locked("cuCtxDestroy", c->origin);
        } else if (captures_in_ctx_locked(c, ctx, false)) {
            invalidate_locked(c, "cuCtxDestroy", "a context of the capture was destroyed");
            detach_members_locked(c, ctx);
        }
        c = next;
    }
}

/* ---- the capture calls -------------------------------------------------- */

static CUresult begin(const char *call, CUstream hstream, enum fc_null_stream null_means, CUstreamCaptureMode mode,
                      CUgraph hgraph)
{
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    struct fc_graph *graph = NULL;
    if (rc == CUDA_SUCCESS && stream->kind == FC_STREAM_LEGACY)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* "Capture may not be initiated if stream is CU_STREAM_LEGACY" */
    else if (rc == CUDA_SUCCESS && stream->capture)
        rc = CUDA_ERROR_INVALID_VALUE; /* already capturing */
    if (rc == CUDA_SUCCESS && hgraph) {
        graph = fc_handle_use(call, FC_H_GRAPH, (uint64_t)(uintptr_t)hgraph);
        if (!graph || graph->capturing)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    struct fc_capture *cap = NULL;
    if (rc == CUDA_SUCCESS) {
        cap = calloc(1, sizeof *cap);
        if (cap && !graph) {
            graph = fc_graph_new_locked();
            cap->graph_owned = true;
        }
        if (!cap || !graph) {
            free(cap);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc == CUDA_SUCCESS) {
        cap->id = next_capture_id++;
        cap->origin = stream;
        cap->graph = graph;
        graph->capturing = true;
        cap->mode = mode;
        cap->thread = pthread_self();
        cap->tid = current_tid();
        cap->next = captures;
        captures = cap;
        join_locked(stream, cap);
    }
    fc_exec_unlock();
    return rc;
}

static CUresult end(const char *call, CUstream hstream, enum fc_null_stream null_means, CUgraph *phgraph)
{
    if (!phgraph)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    struct fc_capture *cap = rc == CUDA_SUCCESS ? stream->capture : NULL;
    if (rc == CUDA_SUCCESS && !cap)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (rc == CUDA_SUCCESS && stream != cap->origin)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    else if (rc == CUDA_SUCCESS && cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
             !pthread_equal(cap->thread, pthread_self()))
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (rc != CUDA_SUCCESS) {
        fc_exec_unlock();
        return rc;
    }
    struct fc_graph *graph;
    CUdeviceptr *frees;
    size_t nfrees;
    rc = end_locked(cap, &graph, &frees, &nfrees);
    *phgraph = graph ? (CUgraph)(uintptr_t)graph->handle : NULL;
    fc_exec_unlock();
    for (size_t i = 0; i < nfrees; i++)
        fc_mem_free_deferred(frees[i]);
    free(frees);
    return rc;
}

static CUresult is_capturing(const char *call, CUstream hstream, enum fc_null_stream null_means,
                             CUstreamCaptureStatus *status, struct fc_stream **stream_out)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (stream->kind == FC_STREAM_LEGACY)
        for (struct fc_capture *c = captures; c; c = c->next)
            if (captures_in_ctx_locked(c, stream->ctx, true))
                return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; /* not invalidated */
    *status = !stream->capture              ? CU_STREAM_CAPTURE_STATUS_NONE
            : stream->capture->invalidated  ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                            : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (stream_out)
        *stream_out = stream;
    return CUDA_SUCCESS;
}

static CUresult capture_info(const char *call, CUstream hstream, enum fc_null_stream null_means,
                             CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    if (edges && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_stream *stream = NULL;
    CUresult rc = is_capturing(call, hstream, null_means, status, &stream);
    if (rc == CUDA_SUCCESS && *status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        struct fc_capture *cap = stream->capture;
        if (id)
            *id = cap->id;
        if (graph)
            *graph = (CUgraph)(uintptr_t)cap->graph->handle;
        size_t count = stream->captured_nodes > 0 ? 1 : 0;
        stream->capture_dep_out = fc_graph_node_handle(cap->graph, stream->capture_last_node);
        memset(&stream->capture_edge_out, 0, sizeof stream->capture_edge_out);
        if (deps)
            *deps = count ? &stream->capture_dep_out : NULL;
        if (edges)
            *edges = count ? &stream->capture_edge_out : NULL;
        if (ndeps)
            *ndeps = count;
    }
    fc_exec_unlock();
    return rc;
}

/* The entry points, legacy and per-thread flavours. */
#define NULL_LEGACY FC_NULL_LEGACY
#define NULL_PT FC_NULL_PER_THREAD

FC_API CUresult cuStreamBeginCapture(CUstream s)
{
    return begin(__func__, s, NULL_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL);
}
FC_API CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
    return begin(__func__, s, NULL_PT, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL);
}
FC_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    return begin(__func__, s, NULL_LEGACY, mode, NULL);
}
FC_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    return begin(__func__, s, NULL_PT, mode, NULL);
}

static CUresult begin_to_graph(const char *call, CUstream s, enum fc_null_stream null_means, CUgraph g,
                               const CUgraphNode *deps, size_t ndeps, CUstreamCaptureMode mode)
{
    if (!g || (ndeps > 0 && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    return begin(call, s, null_means, mode, g);
}

FC_API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                            const CUgraphEdgeData *edges, size_t ndeps,
                                            CUstreamCaptureMode mode)
{
    (void)edges;
    return begin_to_graph(__func__, s, NULL_LEGACY, g, deps, ndeps, mode);
}
FC_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
                                                 const CUgraphEdgeData *edges, size_t ndeps,
                                                 CUstreamCaptureMode mode)
{
    (void)edges;
    return begin_to_graph(__func__, s, NULL_PT, g, deps, ndeps, mode);
}

FC_API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) { return end(__func__, s, NULL_LEGACY, g); }
FC_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) { return end(__func__, s, NULL_PT, g); }

FC_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    fc_exec_lock();
    CUresult rc = is_capturing(__func__, s, NULL_LEGACY, status, NULL);
    fc_exec_unlock();
    return rc;
}
FC_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status)
{
    fc_exec_lock();
    CUresult rc = is_capturing(__func__, s, NULL_PT, status, NULL);
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return capture_info(__func__, s, NULL_LEGACY, status, id, NULL, NULL, NULL, NULL);
}
FC_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return capture_info(__func__, s, NULL_PT, status, id, NULL, NULL, NULL, NULL);
}
FC_API CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                          CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(__func__, s, NULL_LEGACY, status, id, graph, deps, NULL, ndeps);
}
FC_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(__func__, s, NULL_PT, status, id, graph, deps, NULL, ndeps);
}
FC_API CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                          CUgraph *graph, const CUgraphNode **deps,
                                          const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(__func__, s, NULL_LEGACY, status, id, graph, deps, edges, ndeps);
}
FC_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps,
                                               const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(__func__, s, NULL_PT, status, id, graph, deps, edges, ndeps);
}

FC_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode previous = thread_mode;
    thread_mode = *mode;
    *mode = previous;
    return CUDA_SUCCESS;
}
