/*
 * Device memory per tenant and GPU: every allocation a shim makes is
 * reserved here first, against the tenant's `memory` cap, summed over all
 * of the tenant's processes. The count lives in the server, so a process's
 * death is seen at once (its socket closes) and nothing goes stale; a shim
 * that reconnects declares what it holds, so the count survives a server
 * restart. A cap lowered below current usage frees nothing but refuses new
 * allocations until usage falls.
 *
 * Leases: a process asks for headroom (MEM_LEASE: at least `need`, ideally
 * `want`) and spends it without asking again; its count here is what it
 * holds plus that headroom, so the tenant's count is the sum of leases and
 * never passes the cap. Headroom beyond need is at most half of the room
 * left, so that siblings find room too. When a lease does not fit, the
 * tenant's other processes on the device that hold any count are sent
 * MEM_RECALL (answered with MEM_FREE of their idle headroom) and the asker
 * is told to retry; once every recall is answered, or RECALL_TIMEOUT_NS has
 * passed, a lease that still does not fit is refused. One round of recalls
 * per lease that does not fit (client.recalling), so that retries end.
 *
 * Counts never wrap: a reservation that would overflow a count is refused,
 * and a declaration that would is a client lying, which is dropped. What a
 * slot holds is given back when the slot goes or names another GPU.
 */
#include "server.h"

#define RECALL_TIMEOUT_NS 200000000ull /* a sibling that does not answer a recall in 200 ms is skipped */

static void reply(struct client *c, uint64_t id, bool ok, const struct device_tenant *dt)
{
    struct gs_msg msg = {.type = GS_MSG_MEM_RESULT};
    msg.u.mem_result.id = id;
    msg.u.mem_result.ok = ok;
    msg.u.mem_result.cap = dt->tenant->config.memory;
    msg.u.mem_result.used = dt->mem_used;
    client_send(c, &msg);
}

/* Whether bytes more can be counted for the tenant and the client. */
static bool fits(const struct device_tenant *dt, const struct client *c, int slot, uint64_t bytes)
{
    return bytes <= UINT64_MAX - dt->mem_used && bytes <= UINT64_MAX - c->mem_held[slot];
}

static void add(struct device_tenant *dt, struct client *c, int slot, uint64_t bytes)
{
    dt->mem_used += bytes;
    c->mem_held[slot] += bytes;
    if (dt->mem_used > dt->mem_peak)
        dt->mem_peak = dt->mem_used;
}

static void sub(struct device_tenant *dt, struct client *c, int slot, uint64_t bytes)
{
    if (bytes > c->mem_held[slot])
        bytes = c->mem_held[slot];
    c->mem_held[slot] -= bytes;
    dt->mem_used -= bytes > dt->mem_used ? dt->mem_used : bytes;
}

void mem_handle(struct client *c, const struct gs_msg *msg)
{
    int slot = (int)msg->u.mem.slot;
    struct device_tenant *dt = device_tenant_find(c->devices[slot], c->tenant);
    if (!dt)
        return; /* declared devices always have their tenant's entry */
    uint64_t cap = c->tenant->config.memory, bytes = msg->u.mem.bytes;
    switch (msg->type) {
    case GS_MSG_MEM_RESERVE: {
        bool ok = fits(dt, c, slot, bytes) && (cap == 0 || (dt->mem_used <= cap && bytes <= cap - dt->mem_used));
        if (ok)
            add(dt, c, slot, bytes);
        else
            dt->oom_refusals++;
        reply(c, msg->u.mem.id, ok, dt);
        break;
    }
    case GS_MSG_MEM_FREE:
        sub(dt, c, slot, bytes);
        c->recall_sent_ns[slot] = 0; /* also the answer to a recall */
        break;
    case GS_MSG_MEM_QUERY:
        reply(c, msg->u.mem.id, true, dt);
        break;
    case GS_MSG_MEM_DECLARE:
        sub(dt, c, slot, c->mem_held[slot]);
        if (!fits(dt, c, slot, bytes)) {
            client_drop(c, "declared more device memory than can be counted");
            break;
        }
        add(dt, c, slot, bytes);
        if (cap && dt->mem_used > cap)
            slog_limited(c->tenant, LOG_WARN, "tenant %s: %llu bytes in use after pid %u reconnected, over its cap of %llu",
                         c->tenant->name, (unsigned long long)dt->mem_used, c->pid, (unsigned long long)cap);
        break;
    default:
        break;
    }
}

/* The tenant's other processes on c's device: with `send`, asks each that
 * holds a count for its idle headroom. Returns whether any recall is
 * unanswered (and not older than RECALL_TIMEOUT_NS). */
static bool recall_siblings(struct client *c, int slot, bool send, uint64_t now)
{
    bool outstanding = false;
    for (struct client *s = c->tenant->members; s; s = s->member_next) {
        if (s == c || s->closing)
            continue;
        for (int i = 0; i < GS_MAX_DEVICES; i++) {
            if (s->devices[i] != c->devices[slot])
                continue;
            if (s->recall_sent_ns[i] && now - s->recall_sent_ns[i] < RECALL_TIMEOUT_NS) {
                outstanding = true;
            } else if (send && !s->recall_sent_ns[i] && s->mem_held[i]) {
                struct gs_msg msg = {.type = GS_MSG_MEM_RECALL};
                msg.u.recall.slot = (uint32_t)i;
                if (client_send(s, &msg) == 0) {
                    s->recall_sent_ns[i] = now ? now : 1;
                    outstanding = true;
                }
            }
        }
    }
    return outstanding;
}

void mem_lease(struct client *c, const struct gs_msg *msg)
{
    int slot = (int)msg->u.lease.slot;
    struct device_tenant *dt = device_tenant_find(c->devices[slot], c->tenant);
    if (!dt)
        return;
    uint64_t cap = c->tenant->config.memory, need = msg->u.lease.need, want = msg->u.lease.want;
    uint64_t room = cap == 0 ? UINT64_MAX : dt->mem_used < cap ? cap - dt->mem_used : 0;
    struct gs_msg out = {.type = GS_MSG_MEM_LEASED};
    out.u.leased.id = msg->u.lease.id;
    if (need <= room && fits(dt, c, slot, need)) {
        uint64_t extra = want - need, spare = (room - need) / 2;
        if (extra > spare)
            extra = spare;
        if (!fits(dt, c, slot, need + extra))
            extra = 0;
        add(dt, c, slot, need + extra);
        out.u.leased.status = GS_LEASE_GRANTED;
        out.u.leased.granted = need + extra;
        c->recalling[slot] = false;
    } else if (need <= cap && recall_siblings(c, slot, !c->recalling[slot], now_ns())) {
        /* One round of recalls per lease that does not fit: the first
         * request sends them, its retries wait for the answers. */
        c->recalling[slot] = true;
        out.u.leased.status = GS_LEASE_RETRY;
    } else {
        c->recalling[slot] = false;
        out.u.leased.status = GS_LEASE_REFUSED;
        dt->oom_refusals++;
    }
    out.u.leased.cap = cap;
    out.u.leased.used = dt->mem_used;
    client_send(c, &out);
}

void mem_slot_gone(struct client *c, int slot)
{
    if (!c->devices[slot] || !c->mem_held[slot])
        return;
    struct device_tenant *dt = device_tenant_find(c->devices[slot], c->tenant);
    if (dt)
        sub(dt, c, slot, c->mem_held[slot]);
    c->mem_held[slot] = 0;
    c->recall_sent_ns[slot] = 0;
    c->recalling[slot] = false;
}
