/*
 * Reserving device memory (see gs_reserve.h): the lease ledger
 * (gs_lease.c) first; what it lacks is asked of the server (MEM_LEASE,
 * gs_rpc.c). RETRY (siblings were asked to give back idle headroom) is
 * asked again every 0.5 ms, for at most 0.5 s; REFUSED is
 * CUDA_ERROR_OUT_OF_MEMORY. With no server under the open policy the
 * bytes are counted without it, and declared when it is back.
 *
 * Owns nothing.
 */
#include "gs_reserve.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_rpc.h"

#include <time.h>

#define RETRY_SLEEP_NS 500000l     /* while siblings give headroom back */
#define RETRY_LIMIT 1000           /* 0.5 s of retries at most */

CUresult gs_reserve(struct gs_dev *d, uint64_t bytes)
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
        GS_DEBUG("allocation of %llu bytes refused: the tenant's cap is %llu, %llu counted",
                 (unsigned long long)bytes, (unsigned long long)r.cap, (unsigned long long)r.used);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}
