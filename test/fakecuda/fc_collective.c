/*
 * fakecuda collective kernels: the parameters of a "collective*" kernel and
 * the table of collectives in progress in the state file, through which
 * ranks on different devices (and in different processes) learn that their
 * peers have started, as an NCCL kernel learns it from its peers' flags.
 *
 * Parameters, in this order (kernelParams, or an `extra` buffer with this
 * layout, 32 bytes):
 *   offset  0  uint64_t ns        device time after every rank has started
 *   offset  8  uint64_t group     communicator key, not 0
 *   offset 16  uint64_t seq       the collective's number in its group
 *   offset 24  uint32_t rank      0 .. nranks-1
 *   offset 28  uint32_t nranks    1 .. FC_COLLECTIVE_MAX_RANKS
 *
 * A rank marks (group, seq) started when its kernel first holds its
 * device's compute engine (fc_exec.c), then waits until all nranks ranks
 * have, or until FAKECUDA_COLLECTIVE_TIMEOUT_NS have passed since it
 * started. An entry is freed when every rank is done waiting. A rank whose
 * bit is already set starts a new instance (a job run again with the same
 * key), and marks of processes that have exited are dropped when a rank
 * arrives, so a rerun after a killed job does not count the dead job's
 * ranks. When the table is full, the least recently touched entry (a
 * collective abandoned by a timeout) is reused.
 */
#include "fc_internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define COLLECTIVE_BYTES 32

/* FAKECUDA_COLLECTIVE_TIMEOUT_NS, read once under pthread_once by
 * load_timeout, read-only afterwards. */
static pthread_once_t timeout_once = PTHREAD_ONCE_INIT;
static uint64_t timeout_ns = 10ull * 1000 * 1000 * 1000;

static void load_timeout(void)
{
    const char *v = getenv("FAKECUDA_COLLECTIVE_TIMEOUT_NS");
    uint64_t parsed;
    if (v && fc_parse_bytes(v, &parsed) && parsed > 0)
        timeout_ns = parsed;
    else if (v)
        fc_log("FAKECUDA_COLLECTIVE_TIMEOUT_NS=%s: expected a positive number of nanoseconds", v);
}

/* ---- parameters --------------------------------------------------------- */

static bool from_extra(void **extra, unsigned char buf[COLLECTIVE_BYTES])
{
    const void *ptr = NULL;
    size_t size = COLLECTIVE_BYTES; /* assumed when the size is not given */
    for (size_t i = 0; i < 16 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            ptr = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
            memcpy(&size, extra[i + 1], sizeof size);
    }
    if (!ptr || size < COLLECTIVE_BYTES)
        return false;
    memcpy(buf, ptr, COLLECTIVE_BYTES);
    return true;
}

bool fc_collective_parse(void **params, void **extra, uint64_t *ns, struct fc_collective_args *out,
                         const char **why)
{
    unsigned char buf[COLLECTIVE_BYTES];
    if (params) {
        for (int i = 0; i < 5; i++)
            if (!params[i]) {
                *why = "a parameter pointer is NULL";
                return false;
            }
        memcpy(buf, params[0], 8);
        memcpy(buf + 8, params[1], 8);
        memcpy(buf + 16, params[2], 8);
        memcpy(buf + 24, params[3], 4);
        memcpy(buf + 28, params[4], 4);
    } else if (!extra || !from_extra(extra, buf)) {
        *why = "it needs 5 parameters (ns, group, seq, rank, nranks; 32 bytes)";
        return false;
    }
    memcpy(ns, buf, 8);
    memcpy(&out->group, buf + 8, 8);
    memcpy(&out->seq, buf + 16, 8);
    memcpy(&out->rank, buf + 24, 4);
    memcpy(&out->nranks, buf + 28, 4);
    if (out->group == 0)
        *why = "group 0 is not a communicator key";
    else if (out->nranks == 0 || out->nranks > FC_COLLECTIVE_MAX_RANKS)
        *why = "nranks must be 1 to 64";
    else if (out->rank >= out->nranks)
        *why = "rank must be below nranks";
    else
        return true;
    return false;
}

/* ---- the table ---------------------------------------------------------- */

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

static uint64_t full_mask(uint32_t nranks)
{
    return nranks >= 64 ? ~0ull : (1ull << nranks) - 1;
}

static uint64_t slot_tag(const struct fc_proc_slot *slot)
{
    uint64_t tag;
    memcpy(&tag, slot->id, sizeof tag);
    return tag;
}

/* Whether the process that started rank r of e still runs. Lock held. */
static bool owner_alive_locked(struct fc_shared *s, const struct fc_collective_entry *e, unsigned r)
{
    int slot = e->owner_slot[r];
    return slot >= 0 && slot < FC_MAX_PROCS && slot_tag(&s->procs[slot]) == e->owner_tag[r] &&
           fc_slot_alive(s, slot);
}

static void entry_reset_locked(struct fc_collective_entry *e, const struct fc_collective_args *a, uint64_t now)
{
    e->group = a->group;
    e->seq = a->seq;
    e->nranks = a->nranks;
    e->mask = 0;
    e->departed = 0;
    e->touched_ns = now;
    atomic_store(&e->started, 0);
    atomic_fetch_add(&e->generation, 1);
}

/* The entry of (group, seq): the existing one, a free one, or the least
 * recently touched one. Lock held. */
static struct fc_collective_entry *claim_locked(struct fc_shared *s, const struct fc_collective_args *a,
                                                uint64_t now)
{
    struct fc_collective_entry *free_entry = NULL, *oldest = NULL;
    for (int i = 0; i < FC_MAX_COLLECTIVES; i++) {
        struct fc_collective_entry *e = &s->coll[i];
        if (e->group == a->group && e->seq == a->seq)
            return e;
        if (e->group == 0 && !free_entry)
            free_entry = e;
        if (!oldest || e->touched_ns < oldest->touched_ns)
            oldest = e;
    }
    struct fc_collective_entry *e = free_entry ? free_entry : oldest;
    entry_reset_locked(e, a, now);
    return e;
}

void fc_collective_begin(const struct fc_collective_args *a, struct fc_collective_wait *w)
{
    pthread_once(&timeout_once, load_timeout);
    struct fc_shared *s = fc_shared_state();
    int self = fc_self_slot();
    uint64_t now = fc_now_ns(), bit = 1ull << a->rank;
    fc_state_lock(s);
    struct fc_collective_entry *e = claim_locked(s, a, now);
    if (e->mask & bit) {
        /* This rank has started this collective before: a new run of the
         * job under the same key. */
        entry_reset_locked(e, a, now);
    } else {
        for (unsigned r = 0; r < e->nranks; r++)
            if ((e->mask & (1ull << r)) && !owner_alive_locked(s, e, r)) {
                e->mask &= ~(1ull << r);
                e->departed &= ~(1ull << r);
            }
    }
    if (e->nranks != a->nranks)
        fc_log("collective group=%llu seq=%llu: rank %u says nranks=%u, an earlier rank said %u; "
               "waiting for %u",
               (unsigned long long)a->group, (unsigned long long)a->seq, a->rank, a->nranks, e->nranks,
               e->nranks);
    e->mask |= bit;
    e->owner_slot[a->rank] = (int16_t)self;
    e->owner_tag[a->rank] = self >= 0 ? slot_tag(&s->procs[self]) : 0;
    e->touched_ns = now;
    atomic_store(&e->started, (uint32_t)__builtin_popcountll(e->mask & full_mask(e->nranks)));
    w->args = *a;
    w->entry = e;
    w->generation = atomic_load(&e->generation);
    w->nranks = e->nranks;
    w->begun_ns = now;
    w->deadline_ns = now + timeout_ns;
    fc_state_unlock(s);
    if (futex(&e->started, FUTEX_WAKE, INT32_MAX, NULL) < 0)
        fc_log("collective: futex wake failed: %s", strerror(errno));
}

enum fc_collective_state fc_collective_wait(struct fc_collective_wait *w, uint64_t until_ns)
{
    struct fc_collective_entry *e = w->entry;
    for (;;) {
        uint32_t started = atomic_load(&e->started);
        /* A new instance replaced this one: nothing more to wait for. */
        if (started >= w->nranks || atomic_load(&e->generation) != w->generation)
            return FC_COLL_COMPLETE;
        uint64_t now = fc_now_ns();
        if (now >= w->deadline_ns)
            return FC_COLL_TIMED_OUT;
        if (now >= until_ns)
            return FC_COLL_WAITING;
        uint64_t end = until_ns < w->deadline_ns ? until_ns : w->deadline_ns, left = end - now;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        if (futex(&e->started, FUTEX_WAIT, started, &ts) != 0 && errno != EAGAIN && errno != EINTR &&
            errno != ETIMEDOUT) {
            fc_log("collective: futex wait failed: %s", strerror(errno));
            return FC_COLL_TIMED_OUT;
        }
    }
}

void fc_collective_end(struct fc_collective_wait *w, enum fc_collective_state how)
{
    struct fc_shared *s = fc_shared_state();
    struct fc_collective_entry *e = w->entry;
    char missing[256] = "";
    fc_state_lock(s);
    bool same = atomic_load(&e->generation) == w->generation;
    if (same) {
        uint64_t full = full_mask(e->nranks), absent = full & ~e->mask;
        size_t len = 0;
        for (unsigned r = 0; r < e->nranks && absent && len + 12 < sizeof missing; r++)
            if (absent & (1ull << r))
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%u", len ? "," : "", r);
        e->departed |= 1ull << w->args.rank;
        e->touched_ns = fc_now_ns();
        if ((e->departed & full) == full)
            e->group = 0; /* every rank is done with it */
    }
    fc_state_unlock(s);
    if (how == FC_COLL_TIMED_OUT)
        fc_log("collective group=%llu seq=%llu rank=%u nranks=%u: timed out after %llu ms waiting "
               "for rank(s) %s to start; the kernel ends (FAKECUDA_COLLECTIVE_TIMEOUT_NS)",
               (unsigned long long)w->args.group, (unsigned long long)w->args.seq, w->args.rank,
               w->nranks, (unsigned long long)((fc_now_ns() - w->begun_ns) / 1000000),
               missing[0] ? missing : "?");
}
