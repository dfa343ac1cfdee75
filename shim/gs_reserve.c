/*
 * Reserving device memory (see gs_reserve.h): the lease ledger
 * (gs_lease.c) first; what it lacks is asked of the server (MEM_LEASE,
 * gs_rpc.c). RETRY (siblings were asked to give back idle headroom) is
 * asked again every 0.5 ms, for at most 0.5 s; REFUSED is
 * CUDA_ERROR_OUT_OF_MEMORY, logged with what the application asked for
 * (the server knows only the lease, what the process's headroom lacked).
 * With no server under the open policy the bytes are counted without it,
 * and declared when it is back.
 *
 * Owns the refusals' rate limit.
 */
#include "gs_reserve.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_rpc.h"
#include "gpuslice/rules.h"

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define RETRY_SLEEP_NS 500000l     /* while siblings give headroom back */
#define RETRY_LIMIT 1000           /* 0.5 s of retries at most */

/* When a refusal was last logged (gs_now_ns; 0: never), and the refusals
 * since that were not: a line a second at most, whatever the application
 * retries. Any thread; owned here, atomics and no lock (two threads may
 * both log in one second: harmless). */
static _Atomic uint64_t refusal_logged_ns;
static atomic_uint refusals_unlogged;

static void log_refusal(const struct gs_dev *d, const char *what, uint64_t asked,
                        const struct gs_msg_mem_leased *r)
{
    if (!GS_LOG_ENABLED(GS_LOG_WARN))
        return;
    uint64_t now = gs_now_ns(), last = atomic_load(&refusal_logged_ns);
    if (last && now - last < 1000000000ull) {
        atomic_fetch_add(&refusals_unlogged, 1);
        return;
    }
    atomic_store(&refusal_logged_ns, now);
    unsigned more = atomic_exchange(&refusals_unlogged, 0);
    char size[32], used[32], cap[32], also[64] = "";
    if (more)
        snprintf(also, sizeof also, " (%u more refused since the line before, not logged)", more);
    gs_log(GS_LOG_WARN, "%s of %s refused: the tenant holds %s of its %s cap on device %d (all its processes, "
           "their contexts and leased headroom); CUDA_ERROR_OUT_OF_MEMORY%s", what, gs_bytes_text(asked, size),
           gs_bytes_text(r->used, used), gs_bytes_text(r->cap, cap), (int)d->ordinal, also);
}

CUresult gs_reserve(struct gs_dev *d, uint64_t bytes, const char *what, uint64_t asked)
{
    for (int tries = 0;; tries++) {
        uint64_t need, want;
        if (gs_lease_take_headroom(d, bytes, &need, &want))
            return CUDA_SUCCESS;
        struct gs_msg_mem_leased r;
        if (gs_rpc_lease(d, need, want, &r) != 0) {
            gs_lease_granted_uncounted(d, need); /* or the server is back: ask it */
            continue;
        }
        /* A grant is in the ledger already (counted as it arrived, by the
         * thread that read it: gs_gate_thread.c). Less than asked for is no answer a server gives (a
         * wrong or changed one): retried like RETRY, so that it cannot
         * keep this thread asking without pause. */
        if (r.status == GS_LEASE_GRANTED && r.granted >= need)
            continue;
        if ((r.status == GS_LEASE_RETRY || r.status == GS_LEASE_GRANTED) && tries < RETRY_LIMIT) {
            struct timespec pause = {0, RETRY_SLEEP_NS};
            nanosleep(&pause, NULL);
            continue;
        }
        GS_DEBUG("reservation of %llu bytes refused: the tenant's cap is %llu, %llu counted",
                 (unsigned long long)bytes, (unsigned long long)r.cap, (unsigned long long)r.used);
        log_refusal(d, what, asked, &r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}
