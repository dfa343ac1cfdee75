/*
 * The launch gate's slow path, device bookkeeping and drainers (see
 * gs_gate.h). The fast path is gs_hook_launch_enter in gs_hooks.h.
 *
 * Bounding the overrun: a real driver lets a process queue 1024 launches,
 * which may be seconds of work. So admission is counted against a budget:
 * roughly the time left in the slice divided by the measured device time
 * per launch, minus what is already queued. The drainer measures that time
 * by synchronising the process's contexts in a loop: each round ends when
 * everything submitted before it started has finished. Admission stops at
 * the deadline (or on REVOKE, or when the tenant goes idle); the drainer
 * then waits for the queue to empty and the gate thread releases the slice.
 */
#include "gs_gate.h"
#include "gs_glibc_compat.h"
#include "gs_log.h"

#include <string.h>
#include <time.h>

pthread_mutex_t gs_gate_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t gs_gate_cv = PTHREAD_COND_INITIALIZER;
struct gs_dev gs_devs[GS_MAX_DEVICES];
__thread struct gs_dev *gs_tls_dev;
__thread bool gs_defer_wakeups;
bool gs_wakeup_pending;
/* Signals drainers; used with gs_gate_lock. */
static pthread_cond_t drainer_cv = PTHREAD_COND_INITIALIZER;


#define FIRST_SLICE_ALLOWANCE 4 /* launches, before any time per launch is known */

uint64_t gs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void gs_gate_update_budget_locked(struct gs_dev *d, uint64_t now)
{
    if (d->state != GS_DEV_HOLD)
        return;
    uint64_t admitted = atomic_load(&d->admitted);
    uint64_t submitted = atomic_load(&d->submitted);
    uint64_t allowance;
    if (now >= d->deadline_ns) {
        allowance = 0;
    } else if (d->kernel_ns <= 0) {
        allowance = FIRST_SLICE_ALLOWANCE;
        if (admitted - d->completed >= FIRST_SLICE_ALLOWANCE)
            allowance = 0;
    } else {
        double left = (double)(d->deadline_ns - now);
        double queued = (double)(submitted > d->completed ? submitted - d->completed : 0) +
                        (double)(admitted - submitted);
        double fits = left / d->kernel_ns - queued;
        allowance = fits > 0 ? (uint64_t)fits : 0;
        /* Always let one launch through at the start of a slice: a kernel
         * longer than the slice must still run (its overrun is charged). */
        if (allowance == 0 && queued == 0 && now - d->slice_start_ns < d->deadline_ns - now)
            allowance = 1;
    }
    uint64_t budget = admitted + allowance;
    if (budget > atomic_load(&d->budget) || allowance == 0)
        atomic_store(&d->budget, budget > admitted ? budget : admitted);
    atomic_store(&d->open, 1);
    if (allowance > 0) {
        if (gs_defer_wakeups)
            gs_wakeup_pending = true; /* the gate thread broadcasts after unlocking */
        else
            pthread_cond_broadcast(&gs_gate_cv);
    }
    /* work in flight: the drainer measures it */
    if (submitted > d->completed)
        pthread_cond_broadcast(&drainer_cv);
}

void gs_gate_begin_drain_locked(struct gs_dev *d)
{
    atomic_store(&d->open, 0);
    d->state = GS_DEV_DRAIN;
    d->drain_requested = true;
    pthread_cond_broadcast(&drainer_cv);
}

bool gs_gate_drained_locked(const struct gs_dev *d)
{
    return !d->drain_requested;
}

void gs_gate_set_all_open_locked(bool open)
{
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        struct gs_dev *d = &gs_devs[i];
        if (!d->used)
            continue;
        if (open) {
            atomic_store(&d->budget, UINT64_MAX);
            atomic_store(&d->open, 1);
        } else {
            atomic_store(&d->open, 0);
        }
    }
    if (open)
        pthread_cond_broadcast(&gs_gate_cv);
}

/* Waits until every launch already admitted has been handed to the
 * driver, then until the driver has finished all of it. */
static void *drainer_main(void *arg)
{
    struct gs_dev *d = arg;
    pthread_mutex_lock(&gs_gate_lock);
    for (;;) {
        while (!d->drain_requested &&
               !((d->state == GS_DEV_HOLD) && atomic_load(&d->submitted) > d->completed))
            pthread_cond_wait(&drainer_cv, &gs_gate_lock);
        bool draining = d->drain_requested;
        CUcontext ctxs[GS_GATE_MAX_CTX];
        int nctx = d->nctx;
        memcpy(ctxs, d->ctxs, sizeof ctxs);
        uint64_t since = d->last_sync_end_ns > d->slice_start_ns ? d->last_sync_end_ns : d->slice_start_ns;
        pthread_mutex_unlock(&gs_gate_lock);

        /* Launches admitted just before admission closed may still be on
         * their way into the driver. */
        while (draining && atomic_load(&d->submitted) < atomic_load(&d->admitted)) {
            struct timespec pause = {0, 20000};
            nanosleep(&pause, NULL);
        }
        uint64_t target = atomic_load(&d->submitted);
        for (int i = 0; i < nctx; i++) {
            if (GS_REAL(cuCtxPushCurrent_v2)(ctxs[i]) != CUDA_SUCCESS)
                continue;
            GS_REAL(cuCtxSynchronize)();
            CUcontext popped;
            GS_REAL(cuCtxPopCurrent_v2)(&popped);
        }
        uint64_t end = gs_now_ns();

        pthread_mutex_lock(&gs_gate_lock);
        uint64_t finished = target - d->completed;
        if (finished > 0 && end > since) {
            double per = (double)(end - since) / (double)finished;
            d->kernel_ns = d->kernel_ns > 0 ? 0.5 * d->kernel_ns + 0.5 * per : per;
        }
        d->completed = target;
        d->last_sync_end_ns = end;
        if (draining && atomic_load(&d->submitted) == target)
            d->drain_requested = false;
        if (d->state == GS_DEV_HOLD)
            gs_gate_update_budget_locked(d, end);
        gs_client_wake();
    }
    return NULL;
}

static void register_ctx_locked(struct gs_dev *d, CUcontext ctx)
{
    for (int i = 0; i < d->nctx; i++)
        if (d->ctxs[i] == ctx)
            return;
    if (d->nctx < GS_GATE_MAX_CTX)
        d->ctxs[d->nctx++] = ctx;
    else
        gs_log(GS_LOG_WARN, "more than %d contexts on one device: the newest are not drained", GS_GATE_MAX_CTX);
}

void gs_gate_forget_ctx(CUcontext ctx)
{
    pthread_mutex_lock(&gs_gate_lock);
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        struct gs_dev *d = &gs_devs[i];
        for (int j = 0; j < d->nctx; j++)
            if (d->ctxs[j] == ctx) {
                d->ctxs[j] = d->ctxs[--d->nctx];
                break;
            }
    }
    pthread_mutex_unlock(&gs_gate_lock);
}

/* The gate of a device, created on first use; ctx (if not NULL) is one of
 * the process's contexts on it, for the drainer. */
static CUresult device_gate(CUdevice ordinal, CUcontext ctx, struct gs_dev **out)
{
    CUuuid uuid;
    CUresult rc = GS_REAL(cuDeviceGetUuid_v2) ? GS_REAL(cuDeviceGetUuid_v2)(&uuid, ordinal)
                                              : GS_REAL(cuDeviceGetUuid)(&uuid, ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&gs_gate_lock);
    struct gs_dev *found = NULL, *free_slot = NULL;
    for (int i = 0; i < GS_MAX_DEVICES && !found; i++) {
        struct gs_dev *d = &gs_devs[i];
        if (d->used && memcmp(d->uuid, uuid.bytes, 16) == 0)
            found = d;
        else if (!d->used && !free_slot)
            free_slot = d;
    }
    if (!found && free_slot) {
        found = free_slot;
        found->used = true;
        found->slot = (int)(found - gs_devs);
        found->ordinal = ordinal;
        memcpy(found->uuid, uuid.bytes, 16);
        found->state = GS_DEV_NONE;
        if (gs_client_policy_open() && !gs_client_connected_locked()) {
            atomic_store(&found->budget, UINT64_MAX);
            atomic_store(&found->open, 1);
        }
    }
    if (found) {
        if (ctx)
            register_ctx_locked(found, ctx);
        if (!found->drainer_started) {
            if (pthread_create(&found->drainer, NULL, drainer_main, found) == 0)
                found->drainer_started = true;
            else
                gs_log(GS_LOG_ERROR, "cannot start the drainer thread: slices will not be drained");
        }
        gs_client_start_locked();
    }
    pthread_mutex_unlock(&gs_gate_lock);
    if (!found)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = found;
    return CUDA_SUCCESS;
}

CUresult gs_gate_device_by_ordinal(CUdevice ordinal, struct gs_dev **out)
{
    return device_gate(ordinal, NULL, out);
}

CUresult gs_gate_current_device(struct gs_dev **out)
{
    if (gs_tls_dev) {
        *out = gs_tls_dev;
        return CUDA_SUCCESS;
    }
    CUcontext ctx = NULL;
    CUdevice ordinal;
    CUresult rc = GS_REAL(cuCtxGetCurrent)(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if ((rc = GS_REAL(cuCtxGetDevice)(&ordinal)) != CUDA_SUCCESS)
        return rc;
    if ((rc = device_gate(ordinal, ctx, out)) == CUDA_SUCCESS)
        gs_tls_dev = *out;
    return rc;
}

CUresult gs_gate_slow(struct gs_dev **out)
{
    struct gs_dev *d;
    CUresult rc = gs_gate_current_device(&d);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&gs_gate_lock);
    for (;;) {
        if (atomic_load(&d->open) && atomic_load(&d->admitted) < atomic_load(&d->budget)) {
            atomic_fetch_add(&d->admitted, 1);
            break;
        }
        d->waiters++;
        gs_client_wake();
        gs_client_wait_locked();
        d->waiters--;
    }
    pthread_mutex_unlock(&gs_gate_lock);
    *out = d;
    return CUDA_SUCCESS;
}

void gs_gate_after_fork_child(void)
{
    /* No gate or drainer thread exists in the child: start from scratch. */
    pthread_mutex_init(&gs_gate_lock, NULL);
    pthread_cond_init(&gs_gate_cv, NULL);
    pthread_cond_init(&drainer_cv, NULL);
    memset(gs_devs, 0, sizeof gs_devs);
    gs_tls_dev = NULL;
}
