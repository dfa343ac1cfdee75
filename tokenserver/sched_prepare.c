/*
 * The scheduler's memory, made ready outside its steps (sched.h): a GPU
 * joining or leaving the list, a tenant's entry on a GPU, room for one more
 * client slot and for the actions of a step. The layer that knows such a
 * thing is coming (devices.c) calls these before the event, so that a step
 * only links, unlinks and updates. And the step's list of actions
 * (sched_emit), which sched.c and memory.c both append to: below both.
 */
#include "sched.h"

#include <stdlib.h>
#include <string.h>

void sched_emit(struct sched *s, const struct sched_action *a)
{
    if (s->nactions < s->actions_cap)
        s->actions[s->nactions++] = *a;
    else
        s->actions_lost++;
}

void sched_init(struct sched *s, uint64_t grace_ns)
{
    memset(s, 0, sizeof *s);
    s->grace_ns = grace_ns;
    s->preempt_ns = 2000000ull;
}

void sched_device_add(struct sched *s, struct device *d, uint64_t now)
{
    d->state = DEV_IDLE;
    d->created_ns = d->unused_since = now;
    struct device **tail = &s->devices;
    while (*tail)
        tail = &(*tail)->next;
    *tail = d;
    s->ndevices++;
}

/* A GPU nobody declares may still hold a tenant's memory: a process whose
 * connection closed while it lives on keeps its count there (memory.c's
 * ghosts) until it exits. Freeing the GPU would free that count with it,
 * and the tenant's next process would be leased memory its live one still
 * holds: so the GPU is in use while any entry on it counts memory. */
bool sched_device_unused(const struct device *d)
{
    if (d->nslots != 0 || d->state != DEV_IDLE)
        return false;
    for (size_t i = 0; i < d->ntenants; i++) {
        const struct device_tenant *dt = &d->tenants[i];
        if (dt->mem_used)
            return false;
        for (int g = 0; g < MEM_GHOSTS; g++)
            if (dt->ghosts[g].pid)
                return false;
    }
    return true;
}

void sched_device_remove(struct sched *s, struct device *d)
{
    for (struct device **p = &s->devices; *p; p = &(*p)->next)
        if (*p == d) {
            *p = d->next;
            s->ndevices--;
            break;
        }
    for (size_t i = 0; i < d->ntenants; i++)
        free(d->tenants[i].overruns);
    free(d->tenants);
    free(d->entry_of);
    free(d->slots);
}

struct device_tenant *sched_entry_get(struct device *d, struct sched_tenant *t)
{
    struct device_tenant *dt = sched_entry_find(d, t);
    if (dt)
        return dt;
    if (t->index >= d->nentry_of) {
        size_t n = (size_t)t->index + 16;
        uint32_t *entry_of = realloc(d->entry_of, n * sizeof *entry_of);
        if (!entry_of)
            return NULL;
        memset(entry_of + d->nentry_of, 0, (n - d->nentry_of) * sizeof *entry_of);
        d->entry_of = entry_of;
        d->nentry_of = n;
    }
    uint64_t *overruns = malloc(GS_OVERRUN_SAMPLES * sizeof *overruns);
    if (!overruns)
        return NULL;
    if (d->ntenants == d->tenants_cap) {
        size_t cap = d->tenants_cap ? 2 * d->tenants_cap : 4;
        struct device_tenant *grown = realloc(d->tenants, cap * sizeof *grown);
        if (!grown) {
            free(overruns);
            return NULL;
        }
        /* realloc may move the array: re-point the holder */
        if (d->holder)
            d->holder = grown + (d->holder - d->tenants);
        d->last_holder = NULL;
        d->tenants = grown;
        d->tenants_cap = cap;
    }
    dt = &d->tenants[d->ntenants++];
    memset(dt, 0, sizeof *dt);
    dt->tenant = t;
    dt->tenant_waits = t->waiting > 0;
    dt->cap_limit = t->config.limit;
    dt->overruns = overruns;
    d->entry_of[t->index] = (uint32_t)d->ntenants;
    return dt;
}

bool sched_slots_reserve(struct device *d)
{
    if (d->nslots < d->slots_cap)
        return true;
    size_t cap = d->slots_cap ? 2 * d->slots_cap : 8;
    struct sched_slot **grown = realloc(d->slots, cap * sizeof *grown);
    if (!grown)
        return false;
    d->slots = grown;
    d->slots_cap = cap;
    return true;
}

bool sched_actions_reserve(struct sched *s, size_t slots)
{
    /* A step acts at most a few times per slot (a grant, a revoke, a
     * recall, a drop), and once or twice per GPU (a timer, a late log). */
    size_t need = 4 * slots + 4 * (size_t)s->ndevices + 64;
    if (need <= s->actions_cap)
        return true;
    struct sched_action *grown = realloc(s->actions, need * sizeof *grown);
    if (!grown)
        return false;
    s->actions = grown;
    s->actions_cap = need;
    return true;
}
