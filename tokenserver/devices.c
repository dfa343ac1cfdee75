/*
 * The GPUs clients declare (DEVICE: a slot and a UUID), and their limits.
 * A UUID is a claim: where the NVIDIA driver is there, the process must
 * have the GPU's device node (gpu_access.c). Where it is not, a UUID is
 * whatever a client says, so what declarations can make is bounded: GS_MAX_DEVICES slots per client (the protocol's), at most
 * --max-devices-per-tenant GPUs declared by one tenant's clients at once,
 * and --max-devices in all. A device keeps the list of client slots that
 * declare it (the scheduler walks that, so idle connections elsewhere cost
 * a handoff nothing); one that nobody declares any more is freed after
 * --device-linger-ms (so that its statistics stay in the status a while),
 * or at once when the table is full and a new one is declared. A slot
 * declared again gives back what it held on its old device first.
 */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The devices, oldest first, and the next id; owned by the loop's thread. */
struct device *devices;
unsigned ndevices;
static uint64_t next_device_id = 1;

static struct device *device_find(const uint8_t uuid[16])
{
    for (struct device *d = devices; d; d = d->next)
        if (memcmp(d->uuid, uuid, 16) == 0)
            return d;
    return NULL;
}

struct device_tenant *device_tenant_find(const struct device *d, const struct tenant *t)
{
    if (t->index >= d->nentry_of || !d->entry_of[t->index])
        return NULL;
    return &d->tenants[d->entry_of[t->index] - 1];
}

/* The tenant's entry on a device, created if missing; NULL if out of memory. */
static struct device_tenant *device_tenant_get(struct device *d, struct tenant *t)
{
    struct device_tenant *dt = device_tenant_find(d, t);
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
    struct device_tenant *grown = realloc(d->tenants, (d->ntenants + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    /* realloc may move the array: re-point the holder */
    if (d->holder)
        d->holder = grown + (d->holder - d->tenants);
    d->tenants = grown;
    dt = &d->tenants[d->ntenants++];
    memset(dt, 0, sizeof *dt);
    dt->tenant = t;
    dt->tenant_waits = t->waiting > 0;
    d->entry_of[t->index] = (uint32_t)d->ntenants;
    return dt;
}

/* Removes entry i of d (its tenant's clients are gone). */
static void remove_entry(struct device *d, size_t i)
{
    struct device_tenant *holder = d->holder;
    if (holder == &d->tenants[i]) {
        /* its clients are already closed; this ends the slice */
        if (d->state == DEV_RUNNING || d->state == DEV_REVOKING)
            d->held_ns += now_ns() - d->charged_until;
        d->state = DEV_IDLE;
        holder = d->holder = NULL;
        d->holders = 0;
    }
    d->entry_of[d->tenants[i].tenant->index] = 0;
    free(d->tenants[i].overruns);
    memmove(&d->tenants[i], &d->tenants[i + 1], (d->ntenants - i - 1) * sizeof d->tenants[0]);
    d->ntenants--;
    for (size_t j = i; j < d->ntenants; j++)
        d->entry_of[d->tenants[j].tenant->index] = (uint32_t)j + 1;
    if (holder && holder > &d->tenants[i])
        d->holder = holder - 1;
}

void devices_forget_tenant(const struct tenant *t)
{
    for (struct device *d = devices; d; d = d->next) {
        struct device_tenant *dt = device_tenant_find(d, t);
        if (dt)
            remove_entry(d, (size_t)(dt - d->tenants));
    }
}

static void device_free(struct device *d)
{
    for (struct device **p = &devices; *p; p = &(*p)->next)
        if (*p == d) {
            *p = d->next;
            break;
        }
    timer_close(&d->timer);
    for (size_t i = 0; i < d->ntenants; i++)
        free(d->tenants[i].overruns);
    free(d->tenants);
    free(d->entry_of);
    free(d->users);
    free(d);
    ndevices--;
    removals++;
}

static bool unused(const struct device *d)
{
    return d->nusers == 0 && d->state == DEV_IDLE;
}

/* Frees the device unused for longest; false if every one is in use. */
static bool evict_one(void)
{
    struct device *oldest = NULL;
    for (struct device *d = devices; d; d = d->next)
        if (unused(d) && (!oldest || d->unused_since < oldest->unused_since))
            oldest = d;
    if (!oldest)
        return false;
    device_free(oldest);
    return true;
}

static struct device *device_new(const uint8_t uuid[16])
{
    struct device *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    memcpy(d->uuid, uuid, 16);
    d->id = next_device_id++;
    d->state = DEV_IDLE;
    d->created_ns = d->unused_since = now_ns();
    if (sched_device_init(d) != 0) {
        free(d);
        return NULL;
    }
    struct device **tail = &devices;
    while (*tail)
        tail = &(*tail)->next;
    *tail = d;
    ndevices++;
    return d;
}

static bool add_user(struct device *d, struct client *c, int slot)
{
    if (d->nusers == d->users_cap) {
        size_t cap = d->users_cap ? 2 * d->users_cap : 8;
        struct device_user *grown = realloc(d->users, cap * sizeof *grown);
        if (!grown)
            return false;
        d->users = grown;
        d->users_cap = cap;
    }
    c->user_index[slot] = d->nusers;
    d->users[d->nusers++] = (struct device_user){.client = c, .slot = slot};
    return true;
}

void device_undeclare(struct client *c, int slot)
{
    struct device *d = c->devices[slot];
    if (!d)
        return;
    mem_slot_gone(c, slot);
    sched_slot_gone(c, slot);
    struct device_tenant *dt = device_tenant_find(d, c->tenant);
    if (dt && dt->refs > 0 && --dt->refs == 0) {
        c->tenant->devices--;
        sched_gang_changed(c->tenant);
    }
    c->devices[slot] = NULL;
    /* O(1): the last user takes the slot's place in the list. */
    size_t i = c->user_index[slot];
    if (i < d->nusers && d->users[i].client == c && d->users[i].slot == slot) {
        d->users[i] = d->users[--d->nusers];
        if (i < d->nusers)
            d->users[i].client->user_index[d->users[i].slot] = i;
    }
    if (d->nusers == 0)
        d->unused_since = now_ns();
}

struct device *device_declare(struct client *c, int slot, const uint8_t uuid[16], const char **why)
{
    static char reason[GS_REASON_MAX]; /* the loop's thread only */
    struct device *d = device_find(uuid);
    if (d && c->devices[slot] == d)
        return d;
    if (!gpu_access_allowed(c->peer.pid, uuid, now_ns(), reason, sizeof reason)) {
        *why = reason;
        return NULL;
    }
    device_undeclare(c, slot);
    struct tenant *t = c->tenant;
    const struct device_tenant *known = d ? device_tenant_find(d, t) : NULL;
    if ((!known || known->refs == 0) && t->devices >= options.max_devices_per_tenant) {
        snprintf(reason, sizeof reason, "declared more GPUs than tenant %s may (%u)", t->name,
                 options.max_devices_per_tenant);
        *why = reason;
        return NULL;
    }
    if (!d) {
        if (ndevices >= options.max_devices && !evict_one()) {
            snprintf(reason, sizeof reason, "gpuslice-server knows %u GPUs, its limit", options.max_devices);
            *why = reason;
            return NULL;
        }
        d = device_new(uuid);
        if (!d) {
            snprintf(reason, sizeof reason, "gpuslice-server cannot track another GPU: %s", strerror(errno));
            *why = reason;
            return NULL;
        }
    }
    struct device_tenant *dt = device_tenant_get(d, t);
    if (!dt || !add_user(d, c, slot)) {
        *why = "gpuslice-server is out of memory";
        return NULL;
    }
    c->devices[slot] = d;
    if (dt->refs++ == 0) {
        t->devices++;
        sched_gang_changed(t);
    }
    return d;
}

void devices_sweep(void)
{
    uint64_t now = now_ns();
    for (struct device *d = devices, *next; d; d = next) {
        next = d->next;
        if (unused(d) && now - d->unused_since >= options.device_linger_ns)
            device_free(d);
    }
}

void devices_free_all(void)
{
    while (devices)
        device_free(devices);
}
