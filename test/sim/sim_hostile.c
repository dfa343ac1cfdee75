/*
 * Tenants that speak the protocol to abuse it (enum hostile_kind): they run
 * no application and no shim, and send what a modified shim could. The
 * honest tenants' figures must hold whatever they send. A hostile process
 * dropped by the server connects again after a while, as a shim would.
 */
#include "sim.h"

#include <string.h>

static void send(struct world *w, struct sim_proc *p, const struct gs_msg *m)
{
    if (p->conn >= 0)
        send_to_server(w, p->conn, m);
}

static void again(struct world *w, struct sim_proc *p, uint64_t after)
{
    post(w, w->now + after, EV_APP, p->id, ++p->app_gen);
}

static void declare(struct world *w, struct sim_proc *p, int slot, int gpu)
{
    struct gs_msg m = {.type = GS_MSG_DEVICE};
    m.u.device.slot = (uint32_t)slot;
    m.u.device.uuid[0] = (uint8_t)(gpu + 1);
    memcpy(m.u.device.uuid + 1, "simulated-gpu", 13);
    send(w, p, &m);
}

static void slot_msg(struct world *w, struct sim_proc *p, enum gs_msg_type type, int slot)
{
    struct gs_msg m = {.type = type};
    m.u.acquire.slot = (uint32_t)slot;
    send(w, p, &m);
}

static void release(struct world *w, struct sim_proc *p, uint64_t grant, uint64_t idle, bool more)
{
    struct gs_msg m = {.type = GS_MSG_RELEASE};
    m.u.release.slot = 0;
    m.u.release.grant = grant;
    m.u.release.idle_ns = idle;
    m.u.release.flags = more ? GS_RELEASE_MORE : 0;
    send(w, p, &m);
}

void hostile_start(struct world *w, struct sim_proc *p)
{
    p->conn = server_connect(w, p->id);
    p->welcomed = false;
    if (p->conn < 0) {
        again(w, p, 50 * MS);
        return;
    }
    struct gs_msg hello = {.type = GS_MSG_HELLO};
    send(w, p, &hello);
    for (int i = 0; i < p->ngpus; i++)
        declare(w, p, p->dev[i].slot, p->dev[i].gpu);
    if (p->hostile != H_DEVICE_FLOOD && p->hostile != H_LEASE_STORM)
        slot_msg(w, p, GS_MSG_ACQUIRE, 0);
    p->dev[0].grant = 0;
    again(w, p, rng_range(&w->rng, 100 * US, 2 * MS));
}

/* Its held slice ends (its deadline, or a REVOKE): it gives it back. */
static void give_back(struct world *w, struct sim_proc *p)
{
    struct shim_dev *d = &p->dev[0];
    if (!d->grant)
        return;
    uint64_t held = w->now - p->hold_since;
    p->held_ns += held;
    bool liar = p->hostile == H_LIAR;
    release(w, p, d->grant, liar ? held : 0, true);
    d->last_released = d->grant;
    d->grant = 0;
}

void hostile_act(struct world *w, struct sim_proc *p)
{
    if (!p->started) {
        p->started = true;
        hostile_start(w, p);
        return;
    }
    if (p->conn < 0) {
        hostile_start(w, p);
        return;
    }
    struct shim_dev *d = &p->dev[0];
    switch (p->hostile) {
    case H_LIAR:
    case H_HOLDER:
        if (d->grant && w->now >= d->deadline && p->hostile == H_LIAR)
            give_back(w, p);
        if (d->grant && p->hostile == H_LIAR)
            again(w, p, d->deadline > w->now ? d->deadline - w->now : 0);
        return; /* woken by its messages otherwise */
    case H_STALE: {
        uint64_t r = rng_next(&w->rng) % 5;
        if (r == 0)
            release(w, p, rng_next(&w->rng) % 1000, rng_next(&w->rng), rng_chance(&w->rng, 0.5));
        else if (r == 1)
            release(w, p, 0, 0, true);
        else if (r == 2)
            slot_msg(w, p, GS_MSG_ACQUIRE, 0);
        else if (r == 3 && d->last_released)
            release(w, p, d->last_released, UINT64_MAX, rng_chance(&w->rng, 0.5));
        else if (d->grant)
            give_back(w, p);
        again(w, p, rng_range(&w->rng, 200 * US, 3 * MS));
        return;
    }
    case H_LEASE_STORM: {
        uint64_t r = rng_next(&w->rng) % 6;
        struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
        m.u.lease.slot = 0;
        m.u.lease.id = rng_next(&w->rng) | 1;
        if (r <= 2) {
            m.u.lease.need = rng_range(&w->rng, 1, 64) * MIB << (r * 8);
            m.u.lease.want = m.u.lease.need + rng_range(&w->rng, 0, 1024) * MIB;
            send(w, p, &m);
        } else if (r == 3) {
            m.type = GS_MSG_MEM_FREE;
            m.u.mem.slot = 0;
            m.u.mem.bytes = rng_next(&w->rng);
            send(w, p, &m);
        } else if (r == 4 && rng_chance(&w->rng, 0.1)) {
            m.type = GS_MSG_MEM_DECLARE;
            m.u.mem.slot = 0;
            m.u.mem.bytes = rng_chance(&w->rng, 0.5) ? UINT64_MAX - rng_range(&w->rng, 0, 1000) : rng_range(&w->rng, 0, 1ull << 40);
            send(w, p, &m);
        } else {
            struct gs_msg q = {.type = GS_MSG_MEM_QUERY};
            q.u.mem_query.slot = 0;
            q.u.mem_query.id = 7;
            send(w, p, &q);
        }
        again(w, p, rng_range(&w->rng, 50 * US, 2 * MS));
        return;
    }
    case H_DEVICE_FLOOD:
        for (int k = 0; k < 8; k++)
            declare(w, p, (int)rng_range(&w->rng, 0, GS_MAX_DEVICES - 1), (int)rng_range(&w->rng, 0, (uint64_t)w->ngpus - 1));
        if (rng_chance(&w->rng, 0.01)) { /* a made-up UUID: dropped */
            struct gs_msg m = {.type = GS_MSG_DEVICE};
            m.u.device.slot = 3;
            m.u.device.uuid[0] = 0xee;
            send(w, p, &m);
        }
        again(w, p, rng_range(&w->rng, 100 * US, 2 * MS));
        return;
    case H_FLOOD:
        for (int k = 0; k < 16; k++) {
            if (rng_chance(&w->rng, 0.5))
                slot_msg(w, p, GS_MSG_ACQUIRE, 0);
            else
                release(w, p, d->grant ? d->grant : rng_next(&w->rng) % 50, 0, rng_chance(&w->rng, 0.5));
        }
        if (d->grant && rng_chance(&w->rng, 0.2))
            give_back(w, p);
        again(w, p, rng_range(&w->rng, 50 * US, 500 * US));
        return;
    default:
        return;
    }
}

void hostile_receive(struct world *w, struct sim_proc *p, const struct gs_msg *m)
{
    struct shim_dev *d = &p->dev[0];
    switch (m->type) {
    case GS_MSG_WELCOME:
        p->welcomed = true;
        break;
    case GS_MSG_GRANT:
        if (m->u.grant.slot != 0)
            break;
        if (m->u.grant.grant != d->grant) {
            if (m->u.grant.grant == d->last_released && !(m->u.grant.flags & GS_GRANT_JOIN))
                break;
            if (d->grant) /* a new grant while it held another: the old one was taken */
                p->held_ns += w->now - p->hold_since;
            d->grant = m->u.grant.grant;
            p->hold_since = w->now;
        }
        d->deadline = m->u.grant.deadline_ns;
        if (p->hostile == H_LIAR)
            again(w, p, d->deadline > w->now ? d->deadline - w->now : 0);
        break;
    case GS_MSG_REVOKE:
        if (m->u.grant.grant == d->grant && p->hostile != H_HOLDER)
            give_back(w, p);
        else if (m->u.grant.grant == d->grant) { /* a hung holder: the server takes it back after grace */
            p->held_ns += w->now - p->hold_since + 250 * MS;
            d->last_released = d->grant;
            d->grant = 0;
            again(w, p, 300 * MS); /* then it asks again */
        }
        break;
    case GS_MSG_ERROR:
        if (d->grant) {
            p->held_ns += w->now - p->hold_since;
            d->grant = 0;
        }
        close_from_proc(w, p->conn);
        p->conn = -1;
        again(w, p, 50 * MS);
        break;
    default:
        break;
    }
}
