/*
 * The GPUs clients declare (DEVICE: a slot and a UUID), and their limits.
 * A UUID is a claim: where the NVIDIA driver is there, the process must
 * have the GPU's device node (gpu_access.c). Where it is not, a UUID is
 * whatever a client says, so what declarations can make is bounded:
 * GS_MAX_DEVICES slots per client (the protocol's), at most
 * --max-devices-per-tenant GPUs declared by one tenant's clients at once,
 * and --max-devices in all. A GPU that nobody declares any more is freed
 * after --device-linger-ms (so that its statistics stay in the status a
 * while), or at once when the table is full and a new one is declared. A
 * slot declared again gives back what it held on its old GPU first.
 *
 * Each GPU is the scheduler's struct device (sched.h), made and freed by
 * the scheduler's driver with its timer (dispatch.c). This file makes the
 * memory a declaration needs ready (the GPU, the tenant's entry on it, room
 * in its list of slots, room for the step's actions), then hands the
 * scheduler the DECLARE, UNDECLARE and CLIENT_GONE events.
 */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The client slots declared in all (for the size of the step's actions);
 * owned by the loop's thread. */
static size_t declared_slots;

static struct device *device_find(const uint8_t uuid[16])
{
    for (struct device *d = server_sched.devices; d; d = d->next)
        if (memcmp(d->uuid, uuid, 16) == 0)
            return d;
    return NULL;
}

static void device_free(struct device *d)
{
    dispatch_device_free(d);
    removals++;
}

/* Frees the GPU unused for longest; false if every one is in use. */
static bool evict_one(void)
{
    struct device *oldest = NULL;
    for (struct device *d = server_sched.devices; d; d = d->next)
        if (sched_device_unused(d) && (!oldest || d->unused_since < oldest->unused_since))
            oldest = d;
    if (!oldest)
        return false;
    device_free(oldest);
    return true;
}

void device_undeclare(struct client *c, int slot, bool lives_on)
{
    struct sched_slot *s = &c->slots[slot];
    if (!s->device)
        return;
    struct sched_event ev = {.type = SCHED_UNDECLARE, .slot = s, .lives_on = lives_on};
    sched_run(&ev);
    declared_slots--;
}

void devices_client_gone(struct client *c, bool lives_on)
{
    size_t named = 0;
    for (int slot = 0; slot < GS_MAX_DEVICES; slot++)
        named += c->slots[slot].device != NULL;
    if (named == 0)
        return;
    struct sched_event ev = {.type = SCHED_CLIENT_GONE, .slot = c->slots, .nslots = GS_MAX_DEVICES,
                             .lives_on = lives_on};
    sched_run(&ev);
    declared_slots -= named;
}

struct device *device_declare(struct client *c, int slot, const uint8_t uuid[16], int node_fd, const char **why)
{
    static char reason[GS_REASON_MAX]; /* the loop's thread only */
    struct sched_slot *s = &c->slots[slot];
    struct device *d = device_find(uuid);
    if (d && s->device == d)
        return d;
    if (!gpu_access_allowed(node_fd, uuid, now_ns(), reason, sizeof reason)) {
        *why = reason;
        return NULL;
    }
    device_undeclare(c, slot, false); /* it names another GPU now */
    struct tenant *t = c->tenant;
    const struct device_tenant *known = d ? sched_entry_find(d, &t->sched) : NULL;
    if ((!known || known->refs == 0) && t->sched.devices >= options.max_devices_per_tenant) {
        snprintf(reason, sizeof reason, "declared more GPUs than tenant %s may (%u)", t->name,
                 options.max_devices_per_tenant);
        *why = reason;
        return NULL;
    }
    if (!d) {
        if (server_sched.ndevices >= options.max_devices && !evict_one()) {
            snprintf(reason, sizeof reason, "gpuslice-server knows %u GPUs, its limit", options.max_devices);
            *why = reason;
            return NULL;
        }
        d = dispatch_device_new(uuid);
        if (!d) {
            snprintf(reason, sizeof reason, "gpuslice-server cannot track another GPU: %s", strerror(errno));
            *why = reason;
            return NULL;
        }
    }
    if (!sched_entry_get(d, &t->sched) || !sched_slots_reserve(d) ||
        !sched_actions_reserve(&server_sched, declared_slots + 1)) {
        *why = "gpuslice-server is out of memory";
        return NULL;
    }
    struct sched_event ev = {.type = SCHED_DECLARE, .slot = s, .device = d};
    sched_run(&ev);
    declared_slots++;
    return d;
}

void devices_check_ghosts(void)
{
    for (struct device *d = server_sched.devices; d; d = d->next)
        for (size_t i = 0; i < d->ntenants; i++)
            for (int g = 0; g < MEM_GHOSTS; g++) {
                uint32_t pid = d->tenants[i].ghosts[g].pid;
                if (pid && !process_lives((pid_t)pid)) {
                    struct sched_event ev = {.type = SCHED_PROCESS_GONE, .pid = pid};
                    sched_run(&ev);
                }
            }
}

void devices_sweep(void)
{
    uint64_t now = now_ns();
    for (struct device *d = server_sched.devices, *next; d; d = next) {
        next = d->next;
        if (sched_device_unused(d) && now - d->unused_since >= options.device_linger_ns)
            device_free(d);
    }
}

void devices_free_all(void)
{
    while (server_sched.devices)
        device_free(server_sched.devices);
}
