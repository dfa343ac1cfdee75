/*
 * fakecuda execution: each stream's queue of pending work, the ordering
 * between streams that the legacy default stream imposes, and each
 * context's two executors, as on a GPU with a compute engine and a copy
 * engine that run side by side:
 *   - the compute worker runs kernels, one at a time per device across
 *     processes behind the device's compute engine (time-sliced, metered;
 *     a collective holds it until its peer ranks have started);
 *   - the copy worker runs copies and memsets behind the device's copy
 *     engine, each taking bytes / FAKECUDA_COPY_BYTES_PER_S.
 * An op runs once the op before it in its stream and everything it depends
 * on have completed ("Streams" and "Default Stream" in the CUDA Programming
 * Guide): the legacy stream waits for all prior work of the context's
 * blocking streams, and blocking streams wait for prior legacy work.
 * Event records and event waits take no engine and complete as soon as
 * they are ready. A context has at most FC_MAX_PENDING ops queued; a
 * launcher blocks beyond that, like a real driver.
 */
#include "fc_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

/* The process's execution state (see fc_internal.h); guarded by exec_lock,
 * which fc_exec_lock() takes. */
static pthread_mutex_t exec_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_ctx *live_ctxs;     /* contexts not yet stopped */
static uint64_t next_op_seq;         /* submission order across the process */
static bool watched_fence_done;      /* ops of other contexts may have become ready */

void fc_exec_lock(void)
{
    pthread_mutex_lock(&exec_lock);
}

void fc_exec_unlock(void)
{
    pthread_mutex_unlock(&exec_lock);
}

pthread_mutex_t *fc_exec_mutex(void)
{
    return &exec_lock;
}

/* Tunables read once from the environment; written by load_tunables under
 * pthread_once, read-only afterwards. */
static pthread_once_t tunables_once = PTHREAD_ONCE_INIT;
static uint64_t kernel_default_ns = 5000;
static uint64_t switch_ns;
static uint64_t timeslice_ns = 1024000; /* the hardware's default slice */
static uint64_t copy_bytes_per_s = 25ull << 30;
static uint64_t worker_awake_ns = 200000;

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
    if ((v = getenv("FAKECUDA_COPY_BYTES_PER_S")) && fc_parse_bytes(v, &parsed) && parsed > 0)
        copy_bytes_per_s = parsed;
    if ((v = getenv("FAKECUDA_WORKER_AWAKE_NS")) && fc_parse_bytes(v, &parsed))
        worker_awake_ns = parsed;
}

uint64_t fc_kernel_default_ns(void)
{
    pthread_once(&tunables_once, load_tunables);
    return kernel_default_ns;
}

uint64_t fc_copy_ns(size_t bytes)
{
    pthread_once(&tunables_once, load_tunables);
    return (uint64_t)((double)bytes * 1e9 / (double)copy_bytes_per_s);
}

/* ---- fences and ops ----------------------------------------------------- */

struct fc_op {
    struct fc_work work;
    uint64_t seq;
    struct fc_stream *stream;
    struct fc_fence *fence;      /* its completion; the op holds one reference */
    struct fc_fence **deps;      /* must complete first; one reference each */
    unsigned ndeps;
    bool running;
    struct fc_op *next;
};

struct fc_fence *fc_fence_ref(struct fc_fence *fence)
{
    if (fence)
        fence->refs++;
    return fence;
}

void fc_fence_unref(struct fc_fence *fence)
{
    if (fence && --fence->refs == 0)
        free(fence);
}

static bool deps_done(const struct fc_op *op)
{
    for (unsigned i = 0; i < op->ndeps; i++)
        if (!atomic_load(&op->deps[i]->done))
            return false;
    return true;
}

static bool uses_copy_engine(enum fc_work_kind kind)
{
    return kind == FC_WORK_COPY || kind == FC_WORK_SET;
}

static bool takes_no_engine(enum fc_work_kind kind)
{
    return kind == FC_WORK_RECORD || kind == FC_WORK_WAIT || kind == FC_WORK_FREE;
}

bool fc_stream_blocking(const struct fc_stream *stream)
{
    return !(stream->flags & CU_STREAM_NON_BLOCKING);
}

struct fc_ctx *fc_live_contexts_locked_first(void)
{
    return live_ctxs;
}

void fc_exec_atfork_prepare(void) { pthread_mutex_lock(&exec_lock); }
void fc_exec_atfork_parent(void) { pthread_mutex_unlock(&exec_lock); }

void fc_exec_atfork_child(void)
{
    /* The parent's contexts and their workers do not exist here. */
    live_ctxs = NULL;
    pthread_mutex_unlock(&exec_lock);
}

unsigned fc_live_contexts_locked(void)
{
    unsigned n = 0;
    for (struct fc_ctx *c = live_ctxs; c; c = c->live_next)
        n++;
    return n;
}

void fc_stream_release_locked(struct fc_stream *stream)
{
    if (!stream->destroyed || stream->head || stream->users || stream->active || stream->capture)
        return;
    struct fc_ctx *ctx = stream->ctx;
    if (stream->prev)
        stream->prev->next = stream->next;
    else
        ctx->streams = stream->next;
    if (stream->next)
        stream->next->prev = stream->prev;
    fc_fence_unref(stream->last);
    free(stream);
}

/* Wakes a context's idle workers that have work queued for their engine
 * (or all of them with `all`). */
static void wake_workers_locked(struct fc_ctx *ctx, bool all)
{
    atomic_fetch_add(&ctx->compute_pokes, 1);
    if (ctx->compute_idle && (all || ctx->queued_kernels > 0))
        pthread_cond_signal(&ctx->compute_work);
    if (ctx->copy_idle && (all || ctx->queued_transfers > 0))
        pthread_cond_signal(&ctx->copy_work);
}

static void wake_all_contexts_locked(void)
{
    for (struct fc_ctx *c = live_ctxs; c; c = c->live_next)
        wake_workers_locked(c, false);
}

static void count_queued(struct fc_ctx *ctx, enum fc_work_kind kind, int delta)
{
    if (kind == FC_WORK_KERNEL)
        ctx->queued_kernels += (unsigned)delta;
    else if (uses_copy_engine(kind))
        ctx->queued_transfers += (unsigned)delta;
}

/* Marks the head op of its stream complete and frees it. */
static void complete_locked(struct fc_op *op)
{
    struct fc_stream *stream = op->stream;
    struct fc_ctx *ctx = stream->ctx;
    stream->head = op->next;
    if (!stream->head)
        stream->tail = NULL;
    if (op->work.kind == FC_WORK_FREE)
        fc_mem_release_now(op->work.dst, op->work.bytes, (int)op->work.value);
    op->fence->time_ns = fc_now_ns();
    atomic_store(&op->fence->done, true);
    if (op->fence->watched)
        watched_fence_done = true;
    if (op->fence->waiters)
        fc_wake_waiters_locked();
    count_queued(ctx, op->work.kind, -1);
    for (unsigned i = 0; i < op->ndeps; i++)
        fc_fence_unref(op->deps[i]);
    free(op->deps);
    fc_fence_unref(op->fence);
    free(op);
    if (ctx->pending-- == FC_MAX_PENDING)
        pthread_cond_broadcast(&ctx->space);
    wake_workers_locked(ctx, false);
}

/* Removes streams with empty queues from the active list. */
static void prune_active_locked(struct fc_ctx *ctx)
{
    struct fc_stream **link = &ctx->active;
    while (*link) {
        struct fc_stream *s = *link;
        if (s->head) {
            link = &s->active_next;
            continue;
        }
        *link = s->active_next;
        s->active = false;
        s->active_next = NULL;
        fc_stream_release_locked(s);
    }
}

static void advance_one_locked(struct fc_ctx *ctx)
{
    bool progress = true;
    while (progress) {
        progress = false;
        for (struct fc_stream *s = ctx->active; s; s = s->active_next) {
            while (s->head && !s->head->running && takes_no_engine(s->head->work.kind) &&
                   deps_done(s->head)) {
                complete_locked(s->head);
                progress = true;
            }
        }
    }
    prune_active_locked(ctx);
}

/* Completes every event record, event wait and stream-ordered free that is
 * ready, in any stream of the context; and in every context, when an op
 * that another context waits for has completed (an event wait takes no
 * worker: whoever completes what it waits for moves it on). */
static void advance_locked(struct fc_ctx *ctx)
{
    advance_one_locked(ctx);
    while (watched_fence_done) {
        watched_fence_done = false;
        for (struct fc_ctx *c = live_ctxs; c; c = c->live_next)
            advance_one_locked(c);
        wake_all_contexts_locked();
    }
}

/* The oldest ready op for one engine, or NULL. */
static struct fc_op *pick_ready_locked(struct fc_ctx *ctx, bool copy_engine)
{
    struct fc_op *best = NULL;
    for (struct fc_stream *s = ctx->active; s; s = s->active_next) {
        struct fc_op *op = s->head;
        if (!op || op->running || takes_no_engine(op->work.kind) ||
            uses_copy_engine(op->work.kind) != copy_engine || !deps_done(op))
            continue;
        if (!best || op->seq < best->seq)
            best = op;
    }
    return best;
}

/* ---- the engines -------------------------------------------------------- */

/* Keeps the calling worker busy until `end` (CLOCK_MONOTONIC): sleeps
 * through most of a long wait, spins the last 60 us for precision. */
static void occupy_until(uint64_t end)
{
    if (end > fc_now_ns() + 200000) {
        uint64_t wake = end - 60000;
        struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
        }
    }
    while (fc_now_ns() < end) {
    }
}

/* The same for `ns` from now. */
static void occupy(uint64_t ns)
{
    occupy_until(fc_now_ns() + ns);
}

/* The compute worker's hold on its device's compute engine. */
struct engine_hold {
    bool holding;
    uint32_t ticket;
    uint64_t since;    /* when the hold began: the time slice counts from it */
    uint64_t first_at; /* when the hold's first kernel starts; 0 once it has */
    uint64_t ended;    /* when the hold's last kernel ended */
};

/* Joins the engine's line and waits for its turn. A GPU switches to the
 * next context in line by itself, its work already in the GPU's work
 * queues (test/fakecuda/README.md, "Execution"): so the hold begins when the last
 * holder's work ended, or when this context asked if that was later, not
 * when this thread woke up for it. How late the host's scheduler runs the
 * thread then costs no device time. */
static void engine_take(struct fc_ctx *ctx, struct engine_hold *h)
{
    struct fc_shared *s = fc_shared_state();
    struct fc_engine *e = &s->dev[ctx->device].compute;
    int slot = fc_self_slot();
    uint64_t asked = fc_now_ns(), free_since;
    h->ticket = fc_engine_acquire(s, e, slot, &free_since);
    h->holding = true;
    uint64_t now = fc_now_ns(), begin = free_since > asked ? free_since : asked;
    if (begin > now)
        begin = now;
    h->since = begin;
    int32_t last = atomic_exchange(&e->last_slot, slot);
    if (switch_ns && last != slot) {
        begin += switch_ns;
        occupy_until(begin);
    }
    h->first_at = begin;
    h->ended = begin;
}

static void engine_drop(struct fc_ctx *ctx, struct engine_hold *h)
{
    fc_engine_release(&fc_shared_state()->dev[ctx->device].compute, h->ticket, h->ended);
    h->holding = false;
}

/* What a kernel reading %globaltimer ("A predefined, 64-bit global
 * nanosecond timer", PTX ISA, "Special Registers") would read: one clock
 * for every process of the machine. CLOCK_REALTIME, as a GPU's timer
 * counts from the epoch; programs must not count on that and calibrate. */
static uint64_t globaltimer_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How long a waiting collective sleeps between looks at the engine's
 * line when nobody waits for the engine: a context that starts waiting
 * meanwhile is noticed this late at most. */
#define COLLECTIVE_STEP_NS 250000ull

/* Runs one kernel. Like a GPU with compute preemption, a kernel longer than
 * what is left of the time slice is preempted when another context waits,
 * and resumes when the engine comes back round. A collective first marks
 * its rank started, then holds the engine until every rank has started
 * (metered as device time, as a spinning NCCL kernel is), preempted like
 * any kernel; then it runs its ns. */
static void run_kernel(struct fc_ctx *ctx, const struct fc_work *w, struct engine_hold *h)
{
    struct fc_shared *s = fc_shared_state();
    struct fc_engine *e = &s->dev[ctx->device].compute;
    int slot = fc_self_slot();
    uint64_t remaining = w->ns;
    bool waiting = w->collective, begun = false;
    struct fc_collective_wait coll;
    uint64_t stamps[2] = {0, 0}; /* a "stamp*" kernel's %globaltimer at its start and end */
    for (;;) {
        /* Skipped while stopped (SIGSTOP): the engine moved on without us. */
        if (h->holding && atomic_load(&e->serving) != h->ticket)
            h->holding = false;
        if (!h->holding)
            engine_take(ctx, h);
        /* A kernel the engine came round to runs from then (engine_take). */
        uint64_t timer_now = w->stamp_out && !stamps[0] ? globaltimer_ns() : 0;
        uint64_t real_start = fc_now_ns(), start = real_start;
        bool backdated = h->first_at && !waiting && h->first_at < start;
        if (backdated)
            start = h->first_at;
        else if (h->first_at)
            h->since = start; /* a collective's wait is not backdated */
        h->first_at = 0;
        /* %globaltimer at the kernel's start, backdated with it (read
         * before real_start: never later than the start it stands for). */
        if (timer_now)
            stamps[0] = timer_now - (real_start - start);
        uint64_t slice_left = h->since + timeslice_ns > start ? h->since + timeslice_ns - start : 0;
        bool contended = fc_engine_contended(e, h->ticket);
        bool preempted;
        uint64_t ran = 0; /* ns of the kernel run in this piece */
        if (waiting) {
            if (!begun) {
                fc_collective_begin(&w->coll, &coll);
                begun = true;
            }
            uint64_t step = contended ? slice_left : COLLECTIVE_STEP_NS;
            fc_engine_busy_until(e, start + step);
            enum fc_collective_state state = fc_collective_wait(&coll, start + step);
            if (state != FC_COLL_WAITING) {
                waiting = false;
                fc_collective_end(&coll, state);
                if (state == FC_COLL_TIMED_OUT)
                    remaining = 0;
            }
            preempted = waiting && fc_engine_contended(e, h->ticket) &&
                        fc_now_ns() - h->since >= timeslice_ns;
        } else {
            uint64_t chunk = remaining;
            if (chunk > slice_left && contended)
                chunk = slice_left;
            fc_engine_busy_until(e, start + chunk);
            occupy_until(start + chunk);
            ran = chunk;
            remaining -= chunk;
            preempted = remaining > 0;
        }
        /* A thread that came round later than the kernel's end (it was
         * not run) does not make the kernel longer. */
        h->ended = fc_now_ns();
        if (backdated && h->ended > start + ran)
            h->ended = start + ran;
        uint64_t busy = h->ended - start;
        atomic_fetch_add(&s->dev[ctx->device].busy_ns, busy);
        if (slot >= 0)
            atomic_fetch_add(&s->procs[slot].busy_ns[ctx->device], busy);
        if (!waiting && remaining == 0)
            break;
        if (preempted)
            engine_drop(ctx, h); /* back of the line */
    }
    atomic_fetch_add(&s->dev[ctx->device].kernels, 1);
    if (slot >= 0)
        atomic_fetch_add(&s->procs[slot].kernels[ctx->device], 1);
    if (w->stamp_out) {
        stamps[1] = globaltimer_ns();
        /* Written where the launch found device memory, unless it has been
         * freed since (a GPU would fault; nothing is written instead). */
        if (fc_mem_range_valid((CUdeviceptr)(uintptr_t)w->stamp_out, sizeof stamps))
            memcpy(w->stamp_out, stamps, sizeof stamps);
    }
}

static void apply_transfer(const struct fc_work *w)
{
    if (w->kind == FC_WORK_COPY) {
        memmove(w->dst, w->src, w->bytes);
        return;
    }
    for (size_t i = 0; i < w->bytes; i++) {
        if (w->elem_size == 1)
            ((uint8_t *)w->dst)[i] = (uint8_t)w->value;
        else if (w->elem_size == 2)
            ((uint16_t *)w->dst)[i] = (uint16_t)w->value;
        else
            ((uint32_t *)w->dst)[i] = w->value;
    }
}

/* Runs one copy or set on the device's copy engine. */
static void run_transfer(struct fc_ctx *ctx, const struct fc_work *w)
{
    struct fc_shared *s = fc_shared_state();
    struct fc_engine *e = &s->dev[ctx->device].copy;
    int slot = fc_self_slot();
    size_t bytes = w->kind == FC_WORK_COPY ? w->bytes : w->bytes * w->elem_size;
    uint64_t ns = fc_copy_ns(bytes);
    uint64_t free_since; /* a copy starts when its worker runs it */
    uint32_t ticket = fc_engine_acquire(s, e, slot, &free_since);
    uint64_t start = fc_now_ns();
    fc_engine_busy_until(e, start + ns);
    apply_transfer(w);
    uint64_t spent = fc_now_ns() - start;
    if (spent < ns)
        occupy(ns - spent);
    uint64_t end = fc_now_ns(), busy = end - start;
    fc_engine_release(e, ticket, end);
    atomic_fetch_add(&s->dev[ctx->device].copy_busy_ns, busy);
    atomic_fetch_add(&s->dev[ctx->device].copies, 1);
    atomic_fetch_add(&s->dev[ctx->device].copy_bytes, bytes);
    if (slot >= 0) {
        atomic_fetch_add(&s->procs[slot].copy_busy_ns[ctx->device], busy);
        atomic_fetch_add(&s->procs[slot].copies[ctx->device], 1);
    }
}

/* ---- the workers -------------------------------------------------------- */

static void worker_setup(void)
{
    /* Precise wake-ups for simulated kernel and copy ends. Named, so that
     * tests can tell the simulated device's threads from the process's. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    prctl(PR_SET_NAME, "fakecuda-worker", 0, 0, 0);
    pthread_once(&tunables_once, load_tunables);
}

static void *compute_worker_main(void *arg)
{
    struct fc_ctx *ctx = arg;
    struct fc_shared *s = fc_shared_state();
    struct fc_engine *e = &s->dev[ctx->device].compute;
    struct engine_hold hold = {0};
    uint64_t awake_until = 0; /* stays awake for new work until then */
    worker_setup();
    pthread_mutex_lock(&exec_lock);
    for (;;) {
        advance_locked(ctx);
        struct fc_op *op = pick_ready_locked(ctx, false);
        if (!op) {
            if (hold.holding) {
                pthread_mutex_unlock(&exec_lock);
                engine_drop(ctx, &hold);
                pthread_mutex_lock(&exec_lock);
                continue;
            }
            if (ctx->stopping)
                break;
            /* A GPU starts a launch within microseconds of its arrival; a
             * thread asleep on a condition variable takes tens of them to
             * wake on an idle machine. So the worker stays awake a while
             * after its last kernel, for the next launch of a program that
             * synchronizes and launches again. */
            uint64_t now = fc_now_ns();
            if (awake_until == 0)
                awake_until = now + worker_awake_ns;
            if (now < awake_until) {
                unsigned seen = atomic_load(&ctx->compute_pokes);
                pthread_mutex_unlock(&exec_lock);
                while (atomic_load(&ctx->compute_pokes) == seen && fc_now_ns() < awake_until)
                    sched_yield();
                pthread_mutex_lock(&exec_lock);
                continue;
            }
            awake_until = 0;
            ctx->compute_idle = true;
            pthread_cond_wait(&ctx->compute_work, &exec_lock);
            ctx->compute_idle = false;
            continue;
        }
        op->running = true;
        awake_until = 0;
        pthread_mutex_unlock(&exec_lock);
        run_kernel(ctx, &op->work, &hold);
        pthread_mutex_lock(&exec_lock);
        complete_locked(op);
        /* Keep the engine while more kernels are ready, up to a
         * hardware-like time slice when other contexts wait. */
        if (hold.holding) {
            advance_locked(ctx);
            bool slice_over = fc_now_ns() - hold.since >= timeslice_ns && fc_engine_contended(e, hold.ticket);
            if (!pick_ready_locked(ctx, false) || slice_over) {
                pthread_mutex_unlock(&exec_lock);
                engine_drop(ctx, &hold);
                pthread_mutex_lock(&exec_lock);
            }
        }
    }
    pthread_mutex_unlock(&exec_lock);
    return NULL;
}

static void *copy_worker_main(void *arg)
{
    struct fc_ctx *ctx = arg;
    worker_setup();
    pthread_mutex_lock(&exec_lock);
    for (;;) {
        advance_locked(ctx);
        struct fc_op *op = pick_ready_locked(ctx, true);
        if (!op) {
            if (ctx->stopping)
                break;
            ctx->copy_idle = true;
            pthread_cond_wait(&ctx->copy_work, &exec_lock);
            ctx->copy_idle = false;
            continue;
        }
        op->running = true;
        pthread_mutex_unlock(&exec_lock);
        run_transfer(ctx, &op->work);
        pthread_mutex_lock(&exec_lock);
        complete_locked(op);
    }
    pthread_mutex_unlock(&exec_lock);
    return NULL;
}

static CUresult start_workers_locked(struct fc_ctx *ctx)
{
    if (ctx->workers_started)
        return CUDA_SUCCESS;
    if (pthread_create(&ctx->compute_worker, NULL, compute_worker_main, ctx) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (pthread_create(&ctx->copy_worker, NULL, copy_worker_main, ctx) != 0) {
        ctx->stopping = true;
        pthread_cond_broadcast(&ctx->compute_work);
        pthread_mutex_unlock(&exec_lock);
        pthread_join(ctx->compute_worker, NULL);
        pthread_mutex_lock(&exec_lock);
        ctx->stopping = false;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ctx->workers_started = true;
    return CUDA_SUCCESS;
}

/* ---- submission --------------------------------------------------------- */

static void add_dep(struct fc_op *op, unsigned cap, struct fc_fence *fence)
{
    if (fence && !atomic_load(&fence->done) && op->ndeps < cap)
        op->deps[op->ndeps++] = fc_fence_ref(fence);
}

CUresult fc_enqueue_locked(struct fc_stream *stream, const struct fc_work *work, struct fc_fence *after,
                           struct fc_fence **fence_out)
{
    struct fc_ctx *ctx = stream->ctx;
    if (ctx->stopping)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (!takes_no_engine(work->kind)) {
        CUresult rc = start_workers_locked(ctx);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    stream->users++; /* keeps it allocated while this thread waits */
    while (ctx->pending >= FC_MAX_PENDING && !ctx->stopping)
        pthread_cond_wait(&ctx->space, &exec_lock);
    stream->users--;
    if (ctx->stopping)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (stream->destroyed) {
        fc_stream_release_locked(stream);
        return CUDA_ERROR_INVALID_HANDLE;
    }

    /* Its dependencies besides the previous op of its stream. */
    unsigned cap = 2;
    if (stream->kind == FC_STREAM_LEGACY)
        for (struct fc_stream *s = ctx->streams; s; s = s->next)
            cap++;
    struct fc_op *op = calloc(1, sizeof *op);
    struct fc_fence *fence = calloc(1, sizeof *fence);
    struct fc_fence **deps = calloc(cap, sizeof *deps);
    if (!op || !fence || !deps) {
        free(op);
        free(fence);
        free(deps);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->deps = deps;
    if (after && !atomic_load(&after->done))
        after->watched = true;
    add_dep(op, cap, after);
    if (stream->kind == FC_STREAM_LEGACY) {
        for (struct fc_stream *s = ctx->streams; s; s = s->next)
            if (s != stream && fc_stream_blocking(s))
                add_dep(op, cap, s->last);
    } else if (fc_stream_blocking(stream)) {
        add_dep(op, cap, ctx->last_legacy);
    }

    op->work = *work;
    op->seq = ++next_op_seq;
    op->stream = stream;
    op->fence = fence;
    fence->refs = 1;
    fc_fence_unref(stream->last);
    stream->last = fc_fence_ref(fence);
    if (stream->kind == FC_STREAM_LEGACY) {
        fc_fence_unref(ctx->last_legacy);
        ctx->last_legacy = fc_fence_ref(fence);
    }
    if (fence_out)
        *fence_out = fc_fence_ref(fence);
    if (stream->tail)
        stream->tail->next = op;
    else
        stream->head = op;
    stream->tail = op;
    if (!stream->active) {
        stream->active = true;
        stream->active_next = ctx->active;
        ctx->active = stream;
    }
    ctx->pending++;
    count_queued(ctx, work->kind, 1);
    advance_locked(ctx);
    wake_workers_locked(ctx, false);
    return CUDA_SUCCESS;
}

/* ---- context lifetime --------------------------------------------------- */

void fc_ctx_exec_init(struct fc_ctx *ctx)
{
    pthread_cond_init(&ctx->compute_work, NULL);
    pthread_cond_init(&ctx->copy_work, NULL);
    pthread_cond_init(&ctx->space, NULL);
    pthread_mutex_lock(&exec_lock);
    ctx->live_next = live_ctxs;
    live_ctxs = ctx;
    pthread_mutex_unlock(&exec_lock);
}

static void free_stream_locked(struct fc_stream *stream)
{
    if (stream->handle)
        fc_handle_free(FC_H_STREAM, stream->handle);
    fc_fence_unref(stream->last);
    free(stream);
}

void fc_ctx_stop(struct fc_ctx *ctx)
{
    pthread_mutex_lock(&exec_lock);
    fc_capture_ctx_stopping_locked(ctx);
    struct fc_fence **fences = NULL;
    long n = fc_ctx_sync_fences_locked(ctx, &fences);
    if (n > 0)
        fc_wait_fences_locked(fences, (size_t)n, FC_WAIT_BLOCK);
    free(fences);
    ctx->stopping = true;
    pthread_cond_broadcast(&ctx->compute_work);
    pthread_cond_broadcast(&ctx->copy_work);
    pthread_cond_broadcast(&ctx->space);
    bool started = ctx->workers_started;
    ctx->workers_started = false;
    pthread_mutex_unlock(&exec_lock);
    if (started) {
        pthread_join(ctx->compute_worker, NULL);
        pthread_join(ctx->copy_worker, NULL);
    }

    pthread_mutex_lock(&exec_lock);
    /* Anything still queued (a wait that never came true) is dropped. */
    for (struct fc_stream *s = ctx->streams; s; s = s->next)
        while (s->head)
            complete_locked(s->head);
    while (ctx->streams) {
        struct fc_stream *s = ctx->streams;
        ctx->streams = s->next;
        free_stream_locked(s);
    }
    ctx->active = NULL;
    ctx->legacy = NULL;
    fc_fence_unref(ctx->last_legacy);
    ctx->last_legacy = NULL;
    while (ctx->events) {
        struct fc_event *e = ctx->events;
        ctx->events = e->next;
        fc_handle_free(FC_H_EVENT, e->handle);
        fc_fence_unref(e->fence);
        free(e);
    }
    for (struct fc_ctx **link = &live_ctxs; *link; link = &(*link)->live_next)
        if (*link == ctx) {
            *link = ctx->live_next;
            break;
        }
    pthread_mutex_unlock(&exec_lock);
}
