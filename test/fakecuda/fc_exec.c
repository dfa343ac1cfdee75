/*
 * fakecuda execution: each context's queue of pending work (at most
 * FC_MAX_PENDING ops, as a real driver blocks the launcher there), the
 * worker thread that runs it in order, the device engine it takes for each
 * kernel, the meter, and the stream and event calls built on that queue.
 *
 * One queue per context runs every stream of that context in submission
 * order: stricter than CUDA's per-stream order, never looser.
 */
#include "fc_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

/* Tunables read once from the environment; written by load_tunables under
 * pthread_once, read-only afterwards. */
static pthread_once_t tunables_once = PTHREAD_ONCE_INIT;
static uint64_t kernel_default_ns = 5000;
static uint64_t switch_ns;
static uint64_t timeslice_ns = 1024000; /* the hardware's default slice */

static void load_tunables(void)
{
    const char *v;
    uint64_t parsed;
    if ((v = getenv("FAKECUDA_KERNEL_NS")) && fc_parse_bytes(v, &parsed))
        kernel_default_ns = parsed;
    if ((v = getenv("FAKECUDA_SWITCH_NS")) && fc_parse_bytes(v, &parsed))
        switch_ns = parsed;
    if ((v = getenv("FAKECUDA_TIMESLICE_NS")) && fc_parse_bytes(v, &parsed))
        timeslice_ns = parsed;
}

uint64_t fc_kernel_default_ns(void)
{
    pthread_once(&tunables_once, load_tunables);
    return kernel_default_ns;
}

/* Keeps the calling thread busy until `ns` have passed: sleeps through most
 * of a long wait, spins the rest for precision. */
static void occupy(uint64_t ns)
{
    uint64_t end = fc_now_ns() + ns;
    if (ns > 200000) {
        uint64_t wake = end - 60000;
        struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
        }
    }
    while (fc_now_ns() < end) {
    }
}

static void wait_event(struct fc_event *event, uint64_t seq)
{
    struct fc_ctx *other = event->ctx;
    if (!other)
        return;
    fc_ctx_wait_seq(other, seq);
}

/* The worker's hold on its device's engine. */
struct engine_hold {
    bool holding;
    uint32_t ticket;
    uint64_t since;
};

static void engine_take(struct fc_ctx *ctx, struct engine_hold *h)
{
    struct fc_shared *s = fc_shared_state();
    int slot = fc_self_slot();
    h->ticket = fc_engine_acquire(s, &s->dev[ctx->device].compute, slot);
    h->holding = true;
    h->since = fc_now_ns();
    int32_t last = atomic_exchange(&s->dev[ctx->device].compute.last_slot, slot);
    if (switch_ns && last != slot)
        occupy(switch_ns);
}

static void engine_drop(struct fc_ctx *ctx, struct engine_hold *h)
{
    fc_engine_release(&fc_shared_state()->dev[ctx->device].compute, h->ticket);
    h->holding = false;
}

/* Runs one kernel. Like a GPU with compute preemption, a kernel longer than
 * what is left of the time slice is preempted when another context waits,
 * and resumes when the engine comes back round. */
static void run_kernel(struct fc_ctx *ctx, uint64_t ns, struct engine_hold *h)
{
    struct fc_shared *s = fc_shared_state();
    int slot = fc_self_slot();
    uint64_t remaining = ns;
    do {
        /* Skipped while stopped (SIGSTOP): the engine moved on without us. */
        if (h->holding && atomic_load(&s->dev[ctx->device].compute.serving) != h->ticket)
            h->holding = false;
        if (!h->holding)
            engine_take(ctx, h);
        uint64_t start = fc_now_ns();
        uint64_t slice_left = h->since + timeslice_ns > start ? h->since + timeslice_ns - start : 0;
        uint64_t chunk = remaining;
        if (chunk > slice_left && fc_engine_contended(&s->dev[ctx->device].compute, h->ticket))
            chunk = slice_left;
        fc_engine_busy_until(&s->dev[ctx->device].compute, start + chunk);
        occupy(chunk);
        uint64_t busy = fc_now_ns() - start;
        remaining -= chunk;
        atomic_fetch_add(&s->dev[ctx->device].busy_ns, busy);
        if (slot >= 0)
            atomic_fetch_add(&s->procs[slot].busy_ns[ctx->device], busy);
        if (remaining > 0)
            engine_drop(ctx, h); /* preempted: back of the line */
    } while (remaining > 0);
    atomic_fetch_add(&s->dev[ctx->device].kernels, 1);
    if (slot >= 0)
        atomic_fetch_add(&s->procs[slot].kernels[ctx->device], 1);
}

static void run_op(struct fc_ctx *ctx, struct fc_op *op, struct engine_hold *h)
{
    switch (op->kind) {
    case FC_OP_KERNEL:
        run_kernel(ctx, op->ns, h);
        break;
    case FC_OP_EVENT:
        op->event->time_ns = fc_now_ns();
        break;
    case FC_OP_COPY:
        memmove(op->dst, op->src, op->bytes);
        break;
    case FC_OP_SET:
        for (size_t i = 0; i < op->bytes; i++) {
            if (op->elem_size == 1)
                ((uint8_t *)op->dst)[i] = (uint8_t)op->value;
            else if (op->elem_size == 2)
                ((uint16_t *)op->dst)[i] = (uint16_t)op->value;
            else
                ((uint32_t *)op->dst)[i] = op->value;
        }
        break;
    case FC_OP_WAIT:
        wait_event(op->event, op->wait_seq);
        break;
    }
}

static bool queue_has_kernel_locked(const struct fc_ctx *ctx)
{
    for (unsigned i = 0; i < ctx->count; i++) {
        const struct fc_op *op = &ctx->ring[(ctx->head + i) % FC_MAX_PENDING];
        if (op->kind == FC_OP_WAIT)
            return false; /* never hold the engine across a cross-context wait */
        if (op->kind == FC_OP_KERNEL)
            return true;
    }
    return false;
}

static void *worker_main(void *arg)
{
    struct fc_ctx *ctx = arg;
    struct fc_shared *s = fc_shared_state();
    struct engine_hold hold = {0};

    /* Precise wake-ups for simulated kernel ends. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    pthread_once(&tunables_once, load_tunables);

    pthread_mutex_lock(&ctx->lock);
    for (;;) {
        while (ctx->count == 0 && !ctx->stopping)
            pthread_cond_wait(&ctx->work, &ctx->lock);
        if (ctx->count == 0)
            break;
        struct fc_op op = ctx->ring[ctx->head];
        pthread_mutex_unlock(&ctx->lock);

        run_op(ctx, &op, &hold);

        pthread_mutex_lock(&ctx->lock);
        ctx->head = (ctx->head + 1) % FC_MAX_PENDING;
        ctx->count--;
        ctx->completed_seq = op.seq;
        if (op.kind == FC_OP_EVENT && op.event->seq == op.seq)
            op.event->completed = true;
        pthread_cond_broadcast(&ctx->done);
        pthread_cond_signal(&ctx->space);

        /* Keep the engine while more kernels are queued, up to a
         * hardware-like time slice when other contexts wait. */
        if (hold.holding) {
            bool slice_over = fc_now_ns() - hold.since >= timeslice_ns &&
                              fc_engine_contended(&s->dev[ctx->device].compute, hold.ticket);
            if (!queue_has_kernel_locked(ctx) || slice_over) {
                pthread_mutex_unlock(&ctx->lock);
                engine_drop(ctx, &hold);
                pthread_mutex_lock(&ctx->lock);
            }
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    if (hold.holding)
        engine_drop(ctx, &hold);
    return NULL;
}

CUresult fc_ctx_start(struct fc_ctx *ctx)
{
    if (pthread_create(&ctx->worker, NULL, worker_main, ctx) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx->worker_started = true;
    return CUDA_SUCCESS;
}

void fc_ctx_stop(struct fc_ctx *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    ctx->stopping = true;
    pthread_cond_broadcast(&ctx->work);
    pthread_cond_broadcast(&ctx->space);
    pthread_mutex_unlock(&ctx->lock);
    if (ctx->worker_started && !pthread_equal(ctx->worker, pthread_self()))
        pthread_join(ctx->worker, NULL);
    ctx->worker_started = false;
}

CUresult fc_submit(struct fc_stream *stream, struct fc_op *op)
{
    struct fc_ctx *ctx = stream->ctx;
    pthread_mutex_lock(&ctx->lock);
    while (ctx->count == FC_MAX_PENDING && !ctx->stopping)
        pthread_cond_wait(&ctx->space, &ctx->lock);
    if (ctx->stopping) {
        pthread_mutex_unlock(&ctx->lock);
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    op->seq = ++ctx->submitted_seq;
    if (op->kind == FC_OP_EVENT) {
        op->event->ctx = ctx;
        op->event->seq = op->seq;
        op->event->completed = false;
    }
    ctx->ring[(ctx->head + ctx->count) % FC_MAX_PENDING] = *op;
    ctx->count++;
    stream->last_seq = op->seq;
    pthread_cond_signal(&ctx->work);
    pthread_mutex_unlock(&ctx->lock);
    return CUDA_SUCCESS;
}

void fc_ctx_wait_seq(struct fc_ctx *ctx, uint64_t seq)
{
    pthread_mutex_lock(&ctx->lock);
    while (ctx->completed_seq < seq && ctx->worker_started)
        pthread_cond_wait(&ctx->done, &ctx->lock);
    pthread_mutex_unlock(&ctx->lock);
}

void fc_ctx_drain(struct fc_ctx *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    uint64_t target = ctx->submitted_seq;
    pthread_mutex_unlock(&ctx->lock);
    fc_ctx_wait_seq(ctx, target);
}

/* ---- streams ----------------------------------------------------------- */

static CUresult stream_create(CUstream *phstream, unsigned int flags, int priority)
{
    CUresult rc;
    struct fc_ctx *ctx = fc_current_ctx(&rc);
    if (!ctx)
        return rc;
    if (!phstream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_stream *stream = calloc(1, sizeof *stream);
    if (!stream)
        return CUDA_ERROR_OUT_OF_MEMORY;
    stream->ctx = ctx;
    stream->flags = flags;
    stream->priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;
    stream->handle = fc_handle_new(FC_H_STREAM, stream);
    if (!stream->handle) {
        free(stream);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phstream = (CUstream)(uintptr_t)stream->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuStreamCreate(CUstream *phstream, unsigned int flags)
{
    return stream_create(phstream, flags, 0);
}

FC_API CUresult cuStreamCreateWithPriority(CUstream *phstream, unsigned int flags, int priority)
{
    return stream_create(phstream, flags, priority);
}

FC_API CUresult cuStreamDestroy_v2(CUstream hstream)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_stream *stream = fc_handle_get(FC_H_STREAM, (uint64_t)(uintptr_t)hstream);
    if (!stream)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Work already queued still completes, as on a real device: queued
     * ops name their context, never the stream. */
    fc_handle_free(FC_H_STREAM, stream->handle);
    free(stream);
    return CUDA_SUCCESS;
}

FC_API CUresult cuStreamDestroy(CUstream hstream) { return cuStreamDestroy_v2(hstream); }

FC_API CUresult cuStreamSynchronize(CUstream hstream)
{
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream(hstream, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&stream->ctx->lock);
    uint64_t target = stream->last_seq;
    pthread_mutex_unlock(&stream->ctx->lock);
    fc_ctx_wait_seq(stream->ctx, target);
    return CUDA_SUCCESS;
}

FC_API CUresult cuStreamQuery(CUstream hstream)
{
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream(hstream, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&stream->ctx->lock);
    bool idle = stream->ctx->completed_seq >= stream->last_seq;
    pthread_mutex_unlock(&stream->ctx->lock);
    return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* ---- events ------------------------------------------------------------ */

static struct fc_event *event_get(CUevent hevent)
{
    return fc_handle_get(FC_H_EVENT, (uint64_t)(uintptr_t)hevent);
}

FC_API CUresult cuEventCreate(CUevent *phevent, unsigned int flags)
{
    CUresult rc;
    if (!fc_current_ctx(&rc))
        return rc;
    if (!phevent)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_event *event = calloc(1, sizeof *event);
    if (!event)
        return CUDA_ERROR_OUT_OF_MEMORY;
    event->flags = flags;
    event->handle = fc_handle_new(FC_H_EVENT, event);
    if (!event->handle) {
        free(event);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phevent = (CUevent)(uintptr_t)event->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuEventRecord(CUevent hevent, CUstream hstream)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_event *event = event_get(hevent);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_stream *stream;
    if ((rc = fc_resolve_stream(hstream, &stream)) != CUDA_SUCCESS)
        return rc;
    struct fc_op op = {.kind = FC_OP_EVENT, .event = event};
    return fc_submit(stream, &op);
}

FC_API CUresult cuEventRecordWithFlags(CUevent hevent, CUstream hstream, unsigned int flags)
{
    (void)flags;
    return cuEventRecord(hevent, hstream);
}

/* Whether the event's last record has completed; never-recorded counts as
 * complete, as on a real driver. */
static bool event_done(struct fc_event *event, uint64_t *seq_out)
{
    struct fc_ctx *ctx = event->ctx;
    if (!ctx)
        return true;
    pthread_mutex_lock(&ctx->lock);
    bool done = event->completed || event->seq == 0;
    if (seq_out)
        *seq_out = event->seq;
    pthread_mutex_unlock(&ctx->lock);
    return done;
}

FC_API CUresult cuEventQuery(CUevent hevent)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_event *event = event_get(hevent);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    return event_done(event, NULL) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FC_API CUresult cuEventSynchronize(CUevent hevent)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_event *event = event_get(hevent);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t seq = 0;
    if (!event_done(event, &seq))
        fc_ctx_wait_seq(event->ctx, seq);
    return CUDA_SUCCESS;
}

FC_API CUresult cuEventElapsedTime(float *ms, CUevent hstart, CUevent hend)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_event *start = event_get(hstart), *end = event_get(hend);
    if (!start || !end)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!start->ctx || !end->ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!event_done(start, NULL) || !event_done(end, NULL))
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)(end->time_ns - start->time_ns)) / 1e6);
    return CUDA_SUCCESS;
}

FC_API CUresult cuEventElapsedTime_v2(float *ms, CUevent hstart, CUevent hend)
{
    return cuEventElapsedTime(ms, hstart, hend);
}

FC_API CUresult cuEventDestroy_v2(CUevent hevent)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_event *event = event_get(hevent);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_handle_free(FC_H_EVENT, event->handle);
    /* A queued record still points at the event: let it pass first. */
    uint64_t seq = 0;
    if (!event_done(event, &seq))
        fc_ctx_wait_seq(event->ctx, seq);
    free(event);
    return CUDA_SUCCESS;
}

FC_API CUresult cuEventDestroy(CUevent hevent) { return cuEventDestroy_v2(hevent); }

FC_API CUresult cuStreamWaitEvent(CUstream hstream, CUevent hevent, unsigned int flags)
{
    (void)flags;
    struct fc_stream *stream;
    CUresult rc = fc_resolve_stream(hstream, &stream);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_event *event = event_get(hevent);
    if (!event)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t seq = 0;
    if (event_done(event, &seq) || event->ctx == stream->ctx)
        return CUDA_SUCCESS; /* one queue per context keeps order already */
    struct fc_op op = {.kind = FC_OP_WAIT, .event = event, .wait_seq = seq};
    return fc_submit(stream, &op);
}
