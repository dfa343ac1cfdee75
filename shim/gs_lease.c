/*
 * Leases of device memory headroom: what lets an allocation within the
 * tenant's cap cost no round trip to gpuslice-server.
 *
 * Per device the process has a count with the server (`granted`: what it
 * holds plus its headroom) and what it holds (`held`). An allocation that
 * fits in the headroom is counted here alone; one that does not asks the
 * server for the missing bytes plus a chunk of headroom sized to what the
 * process allocates (MEM_LEASE). The server never lets the tenant's counts
 * sum past the cap, so what the processes hold cannot either.
 *
 * Headroom goes back to the server: beyond four chunks at once on a free,
 * all of it when the device has seen no allocation or free for one or two
 * ticks (IDLE_TICK_NS), and all of it when the server recalls it because
 * a sibling process needs room (MEM_RECALL).
 *
 * This file owns `leases` (guarded by lease_lock, which is never held while
 * taking gs_gate_lock; the gate thread takes it under gs_gate_lock).
 */
#include "gs_memory.h"
#include "gs_log.h"

#include <stdatomic.h>
#include <time.h>

#define MIN_CHUNK (8ull << 20)
#define MAX_CHUNK (1ull << 30)
#define IDLE_TICK_NS 20000000ull   /* idle headroom goes back after 20 to 40 ms */
#define RETRY_SLEEP_NS 500000l     /* while siblings give headroom back */
#define RETRY_LIMIT 1000           /* 0.5 s of retries at most */

struct lease {
    uint64_t granted;        /* the server's count for this process: held + headroom */
    uint64_t held;           /* what the process holds on the device */
    uint64_t chunk;          /* the headroom to ask for */
    uint64_t changes;        /* allocations and frees so far */
    uint64_t changes_seen;   /* ... at the last tick */
};

static pthread_mutex_t lease_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lease leases[GS_MAX_DEVICES];
/* Whether the gate thread will tick again (cleared by the tick before it
 * looks, set by whoever leaves headroom, who wakes it if it was clear). */
static _Atomic int tick_armed;

static void arm_tick(void)
{
    if (atomic_exchange(&tick_armed, 1) == 0)
        gs_client_wake();
}

static uint64_t chunk_for(uint64_t bytes, uint64_t chunk)
{
    uint64_t want = bytes > MAX_CHUNK / 2 ? MAX_CHUNK : 2 * bytes;
    if (want < MIN_CHUNK)
        want = MIN_CHUNK;
    return want > chunk ? want : chunk;
}

CUresult gs_lease_take(struct gs_dev *d, uint64_t bytes)
{
    struct lease *l = &leases[d->slot];
    for (int tries = 0;; tries++) {
        pthread_mutex_lock(&lease_lock);
        uint64_t headroom = l->granted - l->held;
        if (headroom >= bytes) {
            l->held += bytes;
            l->changes++;
            pthread_mutex_unlock(&lease_lock);
            return CUDA_SUCCESS;
        }
        uint64_t need = bytes - headroom;
        l->chunk = chunk_for(bytes, l->chunk);
        uint64_t want = need > UINT64_MAX - l->chunk ? need : need + l->chunk;
        pthread_mutex_unlock(&lease_lock);

        struct gs_msg_mem_leased r;
        if (gs_client_lease_call(d, need, want, &r) != 0) {
            /* No server under the open policy: uncounted by it for now,
             * declared when it is back. */
            pthread_mutex_lock(&lease_lock);
            l->granted += need;
            pthread_mutex_unlock(&lease_lock);
            continue;
        }
        if (r.status == GS_LEASE_GRANTED) {
            pthread_mutex_lock(&lease_lock);
            l->granted = r.granted > UINT64_MAX - l->granted ? UINT64_MAX : l->granted + r.granted;
            pthread_mutex_unlock(&lease_lock);
            arm_tick();
            /* Less than asked for is no answer a server gives (a wrong
             * or changed one): counted, and retried like RETRY, so that
             * it cannot keep this thread asking without pause. */
            if (r.granted >= need)
                continue;
        }
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

void gs_lease_take_anyway(struct gs_dev *d, uint64_t bytes)
{
    /* The driver has the memory already: there is nothing to ask, and no
     * answer to wait for. That matters: the gate thread comes here (a
     * pool's growth, found by gs_memory_tick), and it is the thread that
     * reads the server's answers. What the headroom does not cover is
     * counted here and added to the server's count with a lease nobody
     * waits for; over the cap the server refuses it and the count errs
     * low there until the next declaration, as the driver's taking
     * cannot be undone. */
    struct lease *l = &leases[d->slot];
    pthread_mutex_lock(&lease_lock);
    uint64_t headroom = l->granted - l->held;
    uint64_t need = bytes > headroom ? bytes - headroom : 0;
    l->granted = need > UINT64_MAX - l->granted ? UINT64_MAX : l->granted + need;
    l->held = bytes > UINT64_MAX - l->held ? UINT64_MAX : l->held + bytes;
    l->changes++;
    pthread_mutex_unlock(&lease_lock);
    if (need) {
        GS_DEBUG("%llu bytes of device memory taken by the driver beyond the headroom; counted",
                 (unsigned long long)need);
        gs_client_mem_lease_unanswered(d, need);
    }
}

void gs_lease_give(struct gs_dev *d, uint64_t bytes)
{
    struct lease *l = &leases[d->slot];
    uint64_t back = 0;
    pthread_mutex_lock(&lease_lock);
    l->held -= bytes > l->held ? l->held : bytes;
    l->changes++;
    uint64_t headroom = l->granted - l->held;
    if (headroom > 4 * l->chunk) {
        back = headroom - l->chunk;
        l->granted -= back;
    }
    pthread_mutex_unlock(&lease_lock);
    if (back)
        gs_client_mem_free(d, back);
    arm_tick();
}

uint64_t gs_lease_headroom(const struct gs_dev *d)
{
    pthread_mutex_lock(&lease_lock);
    uint64_t headroom = leases[d->slot].granted - leases[d->slot].held;
    pthread_mutex_unlock(&lease_lock);
    return headroom;
}

uint64_t gs_lease_count_locked(const struct gs_dev *d)
{
    pthread_mutex_lock(&lease_lock);
    uint64_t count = leases[d->slot].granted;
    pthread_mutex_unlock(&lease_lock);
    return count;
}

uint64_t gs_lease_recall_locked(const struct gs_dev *d)
{
    pthread_mutex_lock(&lease_lock);
    struct lease *l = &leases[d->slot];
    uint64_t back = l->granted - l->held;
    l->granted = l->held;
    pthread_mutex_unlock(&lease_lock);
    return back;
}

uint64_t gs_memory_tick(uint64_t now)
{
    /* Rate of the tick, and whether the last one wanted another; owned by
     * the gate thread, the only caller. */
    static uint64_t last_tick;
    static bool wanted;
    if (now - last_tick < IDLE_TICK_NS)
        return wanted || atomic_load(&tick_armed) ? last_tick + IDLE_TICK_NS - now : 0;
    last_tick = now;
    atomic_store(&tick_armed, 0);
    gs_pools_settle(false);
    bool again = false;
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        pthread_mutex_lock(&lease_lock);
        struct lease *l = &leases[i];
        uint64_t back = 0;
        if (l->granted > l->held) {
            if (l->changes == l->changes_seen) {
                back = l->granted - l->held;
                l->granted = l->held;
            } else {
                again = true;
            }
        }
        l->changes_seen = l->changes;
        pthread_mutex_unlock(&lease_lock);
        if (back)
            gs_client_mem_free(&gs_devs[i], back);
    }
    wanted = again || gs_pools_pending();
    if (!wanted)
        return 0;
    atomic_store(&tick_armed, 1);
    return IDLE_TICK_NS;
}

void gs_lease_after_fork_child(void)
{
    /* The child holds none of the parent's device memory. */
    pthread_mutex_init(&lease_lock, NULL);
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        leases[i] = (struct lease){0};
    atomic_store(&tick_armed, 0);
}
