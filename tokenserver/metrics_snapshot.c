/*
 * Taking a /metrics snapshot (metrics_snapshot.h): one pass over the
 * tenants and one over the GPUs and their tenant entries, copying numbers
 * only. Work in progress counts up to now (the slice being held, the wait
 * going on), so counters only ever grow between two scrapes.
 */
#include "metrics_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void uuid_text(const uint8_t uuid[16], char out[37])
{
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    for (int i = 0; i < 16; i++) {
        *p++ = hex[uuid[i] >> 4];
        *p++ = hex[uuid[i] & 15];
        if (i == 3 || i == 5 || i == 7 || i == 9)
            *p++ = '-';
    }
    *p = '\0';
}

static void copy_gpu(struct snap_gpu *g, const struct device *d, const long *tenant_of_index, uint64_t now)
{
    char uuid[37];
    uuid_text(d->uuid, uuid);
    int index = gpu_index_of(d->uuid, now);
    int n = index >= 0 ? snprintf(g->labels, sizeof g->labels, "UUID=\"GPU-%s\",gpu=\"%d\"", uuid, index)
                       : snprintf(g->labels, sizeof g->labels, "UUID=\"GPU-%s\"", uuid);
    g->labels_len = n > 0 && (size_t)n < sizeof g->labels ? (size_t)n : 0;
    bool held = d->state != DEV_IDLE && d->holder;
    g->held_ns = d->held_ns + (held ? now - d->charged_until : 0);
    g->slices = d->slices;
    g->handoff = d->handoff_hist;
    g->holder = held ? tenant_of_index[d->holder->tenant->index] : -1;
    g->processes = d->nslots;
}

static void copy_pair(struct snap_pair *p, const struct device *d, const struct device_tenant *dt, uint64_t now)
{
    bool holding = d->state != DEV_IDLE && d->holder == dt;
    p->used_ns = dt->used_ns + (holding ? now - d->charged_until : 0);
    p->wait_ns = dt->wait_ns + (dt->waiting > 0 ? now - dt->waiting_since : 0);
    p->slices = dt->slices;
    p->mem_used = dt->mem_used;
    p->mem_cap = dt->tenant->config.memory;
    p->mem_peak = dt->mem_peak;
    p->oom_refusals = dt->oom_refusals;
    p->target = device_tenant_target_share(d, dt, now);
    p->achieved = status_achieved_share(d, dt, now); /* as status and top show it */
    p->overrun = dt->overrun_hist;
}

struct metrics_snapshot *metrics_snapshot_take(void)
{
    uint64_t now = now_ns();
    size_t npairs = 0, max_index = 0;
    for (const struct device *d = server_sched.devices; d; d = d->next)
        npairs += d->ntenants;
    for (const struct tenant *t = tenants; t; t = t->next)
        if (t->sched.index > max_index)
            max_index = t->sched.index;
    struct metrics_snapshot *s = calloc(1, sizeof *s);
    long *tenant_of_index = calloc(max_index + 1, sizeof *tenant_of_index);
    if (s) {
        s->tenants = calloc(ntenants ? ntenants : 1, sizeof *s->tenants);
        s->gpus = calloc(server_sched.ndevices ? server_sched.ndevices : 1, sizeof *s->gpus);
        s->pairs = calloc(npairs ? npairs : 1, sizeof *s->pairs);
    }
    if (!s || !tenant_of_index || !s->tenants || !s->gpus || !s->pairs) {
        free(tenant_of_index);
        metrics_snapshot_free(s);
        return NULL;
    }
    for (const struct tenant *t = tenants; t && s->ntenants < ntenants; t = t->next) {
        struct snap_tenant *st = &s->tenants[s->ntenants];
        memcpy(st->name, t->name, sizeof st->name);
        st->share = t->sched.config.share;
        st->limit = t->sched.config.limit;
        st->quantum_ns = t->sched.config.quantum_ns;
        st->processes = t->clients;
        tenant_of_index[t->sched.index] = (long)s->ntenants++;
    }
    for (const struct device *d = server_sched.devices; d && s->ngpus < server_sched.ndevices; d = d->next) {
        size_t g = s->ngpus++;
        copy_gpu(&s->gpus[g], d, tenant_of_index, now);
        for (size_t i = 0; i < d->ntenants && s->npairs < npairs; i++) {
            struct snap_pair *p = &s->pairs[s->npairs++];
            p->tenant = (size_t)tenant_of_index[d->tenants[i].tenant->index];
            p->gpu = g;
            copy_pair(p, d, &d->tenants[i], now);
        }
    }
    memcpy(s->reloads, metrics_reloads, sizeof s->reloads);
    memcpy(s->drops, metrics_drops, sizeof s->drops);
    s->start_time = metrics_start_time;
    s->connections = nclients;
    free(tenant_of_index);
    return s;
}

void metrics_snapshot_free(struct metrics_snapshot *s)
{
    if (!s)
        return;
    free(s->tenants);
    free(s->gpus);
    free(s->pairs);
    free(s);
}
