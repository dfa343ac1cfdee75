/*
 * Device memory per tenant and GPU: every allocation a shim makes is
 * reserved here first, against the tenant's `memory` cap, summed over all
 * of the tenant's processes. The count lives in the server, so a process's
 * death is seen at once (its socket closes) and nothing goes stale; a shim
 * that reconnects declares what it holds, so the count survives a server
 * restart. A cap lowered below current usage frees nothing but refuses new
 * allocations until usage falls.
 *
 * Counts never wrap: a reservation that would overflow a count is refused,
 * and a declaration that would is a client lying, which is dropped. What a
 * slot holds is given back when the slot goes or names another GPU.
 */
#include "server.h"

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

void mem_slot_gone(struct client *c, int slot)
{
    if (!c->devices[slot] || !c->mem_held[slot])
        return;
    struct device_tenant *dt = device_tenant_find(c->devices[slot], c->tenant);
    if (dt)
        sub(dt, c, slot, c->mem_held[slot]);
    c->mem_held[slot] = 0;
}
