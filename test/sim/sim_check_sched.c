/*
 * The server's scheduler state consistent in itself, whatever its clients
 * send: checked after every event, and after every step outside one (a
 * tenant's file read, a sweep: sim_server.c), on a node that asks for it
 * (world.check_sched: the scheduler's fuzz target, the scripted cases).
 * It reads only the server's state (the scheduler's GPUs, its tenants, the
 * slots of the open connections), never what the processes believe, so it
 * holds for hostile clients as for honest ones:
 *   - every slot a GPU lists names that GPU at that place and is an open
 *     connection's, and the GPUs list every slot that names one;
 *   - a slot that names no GPU wants, holds and counts nothing;
 *   - a slot holds a slice only of a GPU that runs one, and only for the
 *     tenant that holds it; a running GPU's count of holders is the slots
 *     that hold its grant;
 *   - virtual times are finite and not negative;
 *   - each tenant's memory count on a GPU is exactly what its slots there
 *     hold and the counts kept for its processes without a connection
 *     (its ghosts);
 *   - the counts of waiting slots, per GPU and per tenant, are the slots
 *     that want.
 * (A lost action, a GRANT for what a slot does not hold and a lease over
 * the cap are caught where they happen: dispatch.c logs the first as an
 * error, sim_check.c check_sent the others.)
 */
#include "sim.h"

#include <math.h>

static bool check_device(struct world *w, const struct device *d)
{
    int g = gpu_of_device(w, d);
    unsigned holding = 0;
    for (size_t i = 0; i < d->nslots; i++) {
        const struct sched_slot *slot = d->slots[i];
        if (slot->device != d || slot->index != i) {
            fail(w, "GPU %d: its list of slots and slot %zu disagree", g, i);
            return false;
        }
        if (!w->conn[sim_conn_of(w, slot->owner)].open) {
            fail(w, "GPU %d lists a slot of conn %d, which is closed", g, sim_conn_of(w, slot->owner));
            return false;
        }
        if (!slot->holds)
            continue;
        if (d->state != DEV_RUNNING && d->state != DEV_REVOKING) {
            fail(w, "GPU %d: a slot holds grant %llu of it while it runs no slice (state %d)", g,
                 (unsigned long long)slot->holds, (int)d->state);
            return false;
        }
        if (!d->holder || slot->tenant != d->holder->tenant) {
            fail(w, "GPU %d: a slot of tenant %s holds a slice of it that %s holds", g, slot->tenant->name,
                 d->holder ? d->holder->tenant->name : "nobody");
            return false;
        }
        if (slot->holds == d->grant)
            holding++;
    }
    if (d->state == DEV_RUNNING && holding != d->holders) {
        fail(w, "GPU %d counts %u holders of grant %llu, %u slots hold it", g, d->holders,
             (unsigned long long)d->grant, holding);
        return false;
    }
    for (size_t k = 0; k < d->ntenants; k++) {
        const struct device_tenant *dt = &d->tenants[k];
        if (!isfinite(dt->vtime) || dt->vtime < 0) {
            fail(w, "tenant %s's virtual time on GPU %d is %g", dt->tenant->name, g, dt->vtime);
            return false;
        }
        uint64_t held = 0;
        unsigned waiting = 0;
        for (size_t i = 0; i < d->nslots; i++)
            if (d->slots[i]->tenant == dt->tenant) {
                held += d->slots[i]->mem_held;
                waiting += d->slots[i]->wants;
            }
        for (int ghost = 0; ghost < MEM_GHOSTS; ghost++)
            held += dt->ghosts[ghost].bytes;
        if (held != dt->mem_used) {
            fail(w, "tenant %s counts %llu bytes on GPU %d, its slots and ghosts hold %llu", dt->tenant->name,
                 (unsigned long long)dt->mem_used, g, (unsigned long long)held);
            return false;
        }
        if (waiting != dt->waiting) {
            fail(w, "GPU %d counts %u waiting slots of tenant %s, %u want it", g, dt->waiting, dt->tenant->name,
                 waiting);
            return false;
        }
    }
    return true;
}

void check_sched_state(struct world *w)
{
    const struct sim_server *sv = &w->server;
    if (!sv->up)
        return;
    size_t listed = 0;
    for (const struct device *d = server_sched.devices; d; d = d->next) {
        if (!check_device(w, d))
            return;
        listed += d->nslots;
    }
    /* (the slots of closed connections are the server's no more: a GPU
     * listing one is caught above) */
    size_t naming = 0;
    unsigned waiting[SIM_MAX_TENANTS] = {0};
    for (int c = 0; c < w->nconns; c++) {
        const struct sim_conn *conn = &w->conn[c];
        if (!conn->open)
            continue;
        for (int i = 0; i < GS_MAX_DEVICES; i++) {
            const struct sched_slot *slot = &conn->client.slots[i];
            if (slot->device) {
                naming++;
                waiting[conn->tenant] += slot->wants;
            } else if (slot->wants || slot->holds || slot->mem_held) {
                fail(w, "conn %d slot %d names no GPU, yet it %s", c, i,
                     slot->wants ? "wants one" : slot->holds ? "holds a grant" : "counts memory");
                return;
            }
        }
    }
    if (naming != listed) {
        fail(w, "%zu slots of open connections name a GPU, the GPUs list %zu", naming, listed);
        return;
    }
    for (int t = 0; t < w->ntenants; t++)
        if (!sv->tenant_gone[t] && sv->tenants[t].sched.waiting != waiting[t]) {
            fail(w, "tenant %s counts %u waiting slots, %u of its slots want a GPU", w->tenant[t].name,
                 sv->tenants[t].sched.waiting, waiting[t]);
            return;
        }
}
