/*
 * Device memory per tenant and GPU, against the tenant's `memory` cap,
 * summed over all of its processes: the part of the scheduler's step
 * (sched.h) that handles MEM_LEASE, MEM_FREE, MEM_DECLARE and MEM_QUERY. Like the
 * rest of the step it sends nothing and reads no clock: it leaves actions
 * (a MEM_LEASED answer, MEM_RECALLs, a drop, a log line).
 *
 * The count lives in the server, so a process's death is seen at once (its
 * socket closes, its slots are undeclared) and nothing goes stale; a shim
 * that reconnects declares what it holds, so the count survives a server
 * restart. A cap lowered below current usage frees nothing but refuses new
 * leases until usage falls.
 *
 * Leases: a process asks for headroom (MEM_LEASE: at least `need`, ideally
 * `want`) and spends it without asking again; its count here is what it
 * holds plus that headroom, so the tenant's count is the sum of leases and
 * never passes the cap. Headroom beyond need is at most half of the room
 * left, so that siblings find room too. When a lease does not fit, the
 * tenant's other slots on the GPU that hold any count are sent MEM_RECALL
 * (answered with MEM_FREE of their idle headroom) and the asker is told to
 * retry; once every recall is answered, or RECALL_TIMEOUT_NS has passed, a
 * lease that still does not fit is refused. One round of recalls per lease
 * that does not fit (slot.recalling), so that retries end; a retry recalls
 * only the siblings granted a lease since the round began (and not
 * recalled since): a sibling that held no count when the round went out,
 * leased after it and freed what it leased kept it as headroom, and the
 * asker was refused within the tenant's cap (the simulation's named case
 * sibling-leases-after-recall-round). While a slot
 * waits on such a round, its siblings' leases get what they need and no
 * headroom beyond it: a sibling that answered a recall and asked again at
 * once took back as headroom the room the recall made, and the asker was
 * refused within the tenant's cap (the simulation's named case
 * sibling-frees-after-recall; the shim keeps none of what it frees after a
 * recall either, shim/gs_lease.c).
 *
 * Counts never wrap: a lease that would overflow a count is refused, and a
 * declaration that would is a client lying, which is dropped.
 *
 * A connection that closes while its process lives on (the server dropped
 * it, or it reconnects) leaves what the process holds counted, as a ghost
 * of the tenant's entry keyed by its PID: the memory is still on the GPU,
 * and a sibling must not lease it meanwhile. The ghost goes when the
 * process declares again (a new connection's MEM_DECLARE) or exits
 * (SCHED_PROCESS_GONE, from the server's check of its ghosts' processes).
 * At most MEM_GHOSTS per entry: beyond that the oldest is let go. Until
 * its ghosts go, a GPU that no slot declares any more is kept, not freed
 * with the counts on it (sched_device_unused).
 *
 * After a restart (sched.recovering_until), processes that were running
 * reconnect one by one, up to a second apart (their backoff), and declare
 * what they hold. A lease granted before all of them have would count room
 * that is in fact held: the tenant could pass its cap by what its slower
 * processes hold. So until then a lease waits, unanswered (the shim waits
 * for its answer), and is answered at the recovery's end (SCHED_WAKE).
 */
#include "sched.h"

#include <string.h>

#define RECALL_TIMEOUT_NS 200000000ull /* a sibling that does not answer a recall in 200 ms is skipped */

/* Whether bytes more can be counted for the tenant and the slot. */
static bool fits(const struct device_tenant *dt, const struct sched_slot *slot, uint64_t bytes)
{
    return bytes <= UINT64_MAX - dt->mem_used && bytes <= UINT64_MAX - slot->mem_held;
}

static void add(struct device_tenant *dt, struct sched_slot *slot, uint64_t bytes)
{
    dt->mem_used += bytes;
    slot->mem_held += bytes;
    if (dt->mem_used > dt->mem_peak)
        dt->mem_peak = dt->mem_used;
}

static void sub(struct device_tenant *dt, struct sched_slot *slot, uint64_t bytes)
{
    if (bytes > slot->mem_held)
        bytes = slot->mem_held;
    slot->mem_held -= bytes;
    dt->mem_used -= bytes > dt->mem_used ? dt->mem_used : bytes;
}

/* Lets go of pid's ghost count in dt, if any; returns whether it had one. */
static bool forget_ghost(struct device_tenant *dt, uint32_t pid)
{
    bool had = false;
    for (int i = 0; i < MEM_GHOSTS && pid; i++)
        if (dt->ghosts[i].pid == pid) {
            uint64_t b = dt->ghosts[i].bytes;
            dt->mem_used -= b < dt->mem_used ? b : dt->mem_used;
            dt->ghosts[i] = (struct mem_ghost){0, 0};
            had = true;
        }
    return had;
}

/* Keeps bytes counted in dt for pid, which lives on without a connection. */
static void keep_ghost(struct device_tenant *dt, uint32_t pid, uint64_t bytes)
{
    int free_at = -1;
    for (int i = 0; i < MEM_GHOSTS; i++) {
        if (dt->ghosts[i].pid == pid) {
            dt->ghosts[i].bytes += bytes;
            return;
        }
        if (!dt->ghosts[i].pid && free_at < 0)
            free_at = i;
    }
    if (free_at < 0) { /* full: the oldest goes */
        forget_ghost(dt, dt->ghosts[0].pid);
        memmove(&dt->ghosts[0], &dt->ghosts[1], (MEM_GHOSTS - 1) * sizeof dt->ghosts[0]);
        free_at = MEM_GHOSTS - 1;
    }
    dt->ghosts[free_at] = (struct mem_ghost){.pid = pid, .bytes = bytes};
}

/* The tenant's other slots on the asker's GPU: with `send` (the round
 * begins), asks each that holds a count for its idle headroom; without,
 * each granted a lease since the round began and not asked since. Returns
 * whether any recall is unanswered (and not older than RECALL_TIMEOUT_NS). */
static bool recall_siblings(struct sched *s, struct sched_slot *asker, bool send, uint64_t now)
{
    bool outstanding = false;
    struct device *d = asker->device;
    for (size_t i = 0; i < d->nslots; i++) {
        struct sched_slot *sib = d->slots[i];
        if (sib == asker || sib->tenant != asker->tenant)
            continue;
        if (sib->recall_sent_ns && now - sib->recall_sent_ns < RECALL_TIMEOUT_NS) {
            outstanding = true;
        } else if (!sib->recall_sent_ns && sib->mem_held &&
                   (send || (sib->leased_ns > asker->round_ns && sib->leased_ns > sib->recalled_ns))) {
            struct sched_action a = {.type = SCHED_RECALL, .slot = sib};
            sched_emit(s, &a);
            sib->recall_sent_ns = now ? now : 1;
            sib->recalled_ns = now;
            outstanding = true;
        }
    }
    return outstanding;
}

/* Whether another slot of the asker's tenant on its GPU waits on a round
 * of recalls for its own lease. */
static bool sibling_recalling(const struct sched_slot *asker)
{
    const struct device *d = asker->device;
    for (size_t i = 0; i < d->nslots; i++) {
        const struct sched_slot *sib = d->slots[i];
        if (sib != asker && sib->tenant == asker->tenant && sib->recalling)
            return true;
    }
    return false;
}

static void lease(struct sched *s, struct sched_slot *slot, struct device_tenant *dt, uint64_t id, uint64_t need,
                  uint64_t want, uint64_t now)
{
    if (now < s->recovering_until) {
        slot->deferred = true;
        slot->deferred_id = id;
        slot->deferred_need = need;
        slot->deferred_want = want;
        if (!s->wake_asked) {
            s->wake_asked = true;
            struct sched_action a = {.type = SCHED_SET_WAKE, .at = s->recovering_until};
            sched_emit(s, &a);
        }
        return;
    }
    uint64_t cap = slot->tenant->config.memory;
    if (want < need)
        want = need;
    uint64_t room = cap == 0 ? UINT64_MAX : dt->mem_used < cap ? cap - dt->mem_used : 0;
    struct sched_action a = {.type = SCHED_LEASED, .slot = slot, .id = id, .cap = cap, .need = need};
    if (need <= room && fits(dt, slot, need)) {
        uint64_t extra = want - need, spare = (room - need) / 2;
        if (extra > spare)
            extra = spare;
        if (sibling_recalling(slot))
            extra = 0; /* the room a recall made is the asker's */
        if (!fits(dt, slot, need + extra))
            extra = 0;
        add(dt, slot, need + extra);
        a.status = GS_LEASE_GRANTED;
        a.granted = need + extra;
        slot->recalling = false;
        slot->leased_ns = now;
    } else {
        /* One round of recalls per lease that does not fit: the first
         * request sends them, its retries wait for the answers (and recall
         * the siblings leased since). */
        bool begins = !slot->recalling;
        if (begins)
            slot->round_ns = now;
        if (need <= cap && recall_siblings(s, slot, begins, now)) {
            slot->recalling = true;
            a.status = GS_LEASE_RETRY;
        } else {
            slot->recalling = false;
            a.status = GS_LEASE_REFUSED;
            dt->oom_refusals++;
        }
    }
    a.used = dt->mem_used;
    sched_emit(s, &a);
}

/* The recovery is over: the leases that waited for it are answered. */
static void recovered(struct sched *s, uint64_t now)
{
    s->wake_asked = false;
    for (struct device *d = s->devices; d; d = d->next)
        for (size_t i = 0; i < d->nslots; i++) {
            struct sched_slot *slot = d->slots[i];
            struct device_tenant *dt = sched_entry_find(d, slot->tenant);
            if (slot->deferred && dt) {
                slot->deferred = false;
                lease(s, slot, dt, slot->deferred_id, slot->deferred_need, slot->deferred_want, now);
            }
        }
}

void mem_event(struct sched *s, const struct sched_event *ev, uint64_t now)
{
    if (ev->type == SCHED_WAKE) {
        if (now >= s->recovering_until) {
            recovered(s, now);
        } else if (s->wake_asked) { /* early (a timer's rounding): ask again */
            struct sched_action a = {.type = SCHED_SET_WAKE, .at = s->recovering_until};
            sched_emit(s, &a);
        }
        return;
    }
    if (ev->type == SCHED_PROCESS_GONE) {
        /* A GPU that no slot declares is in use until its last ghost goes
         * (sched_device_unused); its linger starts then. */
        for (struct device *d = s->devices; d; d = d->next)
            for (size_t i = 0; i < d->ntenants; i++)
                if (forget_ghost(&d->tenants[i], ev->pid) && d->nslots == 0)
                    d->unused_since = now;
        return;
    }
    struct sched_slot *slot = ev->slot;
    struct device_tenant *dt = slot->device ? sched_entry_find(slot->device, slot->tenant) : NULL;
    if (!dt)
        return; /* the client layer lets only declared slots through */
    switch (ev->type) {
    case SCHED_MEM_LEASE:
        lease(s, slot, dt, ev->id, ev->bytes, ev->want, now);
        break;
    case SCHED_MEM_FREE:
        sub(dt, slot, ev->bytes);
        slot->recall_sent_ns = 0; /* also the answer to a recall */
        break;
    case SCHED_MEM_DECLARE: {
        forget_ghost(dt, slot->pid); /* what it held before is in this declaration */
        sub(dt, slot, slot->mem_held);
        if (!fits(dt, slot, ev->bytes)) {
            struct sched_action a = {.type = SCHED_DROP, .slot = slot,
                                     .reason = "declared more device memory than can be counted"};
            sched_emit(s, &a);
            break;
        }
        add(dt, slot, ev->bytes);
        uint64_t cap = slot->tenant->config.memory;
        if (cap && dt->mem_used > cap) {
            struct sched_action a = {.type = SCHED_OVER_CAP, .slot = slot, .cap = cap, .used = dt->mem_used};
            sched_emit(s, &a);
        }
        break;
    }
    case SCHED_MEM_QUERY: {
        struct sched_action a = {.type = SCHED_MEM_RESULT, .slot = slot, .id = ev->id,
                                 .cap = slot->tenant->config.memory, .used = dt->mem_used};
        sched_emit(s, &a);
        break;
    }
    default:
        break;
    }
}

void mem_slot_gone(struct sched *s, struct sched_slot *slot, bool lives_on)
{
    (void)s;
    struct device_tenant *dt = slot->device ? sched_entry_find(slot->device, slot->tenant) : NULL;
    if (dt && slot->mem_held && lives_on && slot->pid)
        keep_ghost(dt, slot->pid, slot->mem_held); /* still counted */
    else if (dt && slot->mem_held)
        sub(dt, slot, slot->mem_held);
    slot->mem_held = 0;
    slot->recall_sent_ns = 0;
    slot->recalling = false;
    slot->deferred = false;
}
