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

/* Appends name="value" (after a comma, unless at the start) to out, the
 * value escaped as the text format requires; pos unchanged if it does
 * not fit. Returns the new length. */
static size_t add_label(char *out, size_t cap, size_t pos, const char *name, const char *value)
{
    size_t p = pos;
    size_t need = strlen(name) + 4 + 2 * strlen(value);
    if (p + need >= cap)
        return pos;
    if (p)
        out[p++] = ',';
    p += (size_t)sprintf(out + p, "%s=\"", name);
    for (const char *v = value; *v; v++) {
        if (*v == '\\' || *v == '"' || *v == '\n') {
            out[p++] = '\\';
            out[p++] = *v == '\n' ? 'n' : *v;
        } else {
            out[p++] = *v;
        }
    }
    out[p++] = '"';
    return p;
}

static void copy_gpu(struct snap_gpu *g, const struct device *d, const long *tenant_of_index, uint64_t now)
{
    char uuid[41] = "GPU-", number[16];
    uuid_text(d->uuid, uuid + 4);
    int index = gpu_index_of(d->uuid, now);
    size_t n = add_label(g->labels, sizeof g->labels, 0, "UUID", uuid);
    if (index >= 0) {
        snprintf(number, sizeof number, "%d", index);
        n = add_label(g->labels, sizeof g->labels, n, "gpu", number);
    }
    const char *model = gpu_model_of(d->uuid, now);
    if (model[0])
        n = add_label(g->labels, sizeof g->labels, n, "modelName", model);
    if (options.hostname[0])
        n = add_label(g->labels, sizeof g->labels, n, "Hostname", options.hostname);
    g->labels_len = n;
    bool held = d->state != DEV_IDLE && d->holder;
    g->held_ns = d->held_ns + (held ? now - d->charged_until : 0);
    g->slices = d->slices;
    g->preemptions = d->preemptions;
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

static int by_pointer(const void *a, const void *b)
{
    const struct device *x = *(const struct device *const *)a, *y = *(const struct device *const *)b;
    return x < y ? -1 : x > y;
}

/* The connected processes (at most SNAP_PROCESSES_MAX) and their GPUs;
 * false if out of memory. Needs s->tenants and s->gpus in list order. */
static bool copy_processes(struct metrics_snapshot *s, uint64_t now)
{
    if (options.hostname[0])
        s->host_label_len = add_label(s->host_label, sizeof s->host_label, 0, "Hostname", options.hostname);
    size_t max = nclients < SNAP_PROCESSES_MAX ? nclients : SNAP_PROCESSES_MAX;
    s->procs = calloc(max ? max : 1, sizeof *s->procs);
    s->proc_gpus = calloc(max ? max * GS_MAX_DEVICES : 1, sizeof *s->proc_gpus);
    const struct device **sorted = calloc(s->ngpus ? s->ngpus : 1, sizeof *sorted);
    size_t *gpu_of = calloc(s->ngpus ? s->ngpus : 1, sizeof *gpu_of);
    if (!s->procs || !s->proc_gpus || !sorted || !gpu_of) {
        free(sorted);
        free(gpu_of);
        return false;
    }
    size_t g = 0;
    for (const struct device *d = server_sched.devices; d && g < s->ngpus; d = d->next)
        sorted[g++] = d;
    qsort(sorted, g, sizeof *sorted, by_pointer);
    g = 0;
    for (const struct device *d = server_sched.devices; d && g < s->ngpus; d = d->next, g++) {
        const struct device **at = bsearch(&d, sorted, s->ngpus, sizeof *sorted, by_pointer);
        gpu_of[at - sorted] = g;
    }
    size_t ti = 0;
    for (const struct tenant *t = tenants; t && ti < s->ntenants; t = t->next, ti++)
        for (const struct client *c = t->members; c && s->nprocs < max; c = c->member_next) {
            struct snap_proc *p = &s->procs[s->nprocs];
            char pid[16];
            snprintf(pid, sizeof pid, "%u", c->pid);
            p->tenant = ti;
            size_t n = add_label(p->labels, sizeof p->labels, 0, "pid", pid);
            if (c->peer.container_id[0])
                n = add_label(p->labels, sizeof p->labels, n, "container_id", c->peer.container_id);
            if (c->peer.pod_uid[0])
                n = add_label(p->labels, sizeof p->labels, n, "pod_uid", c->peer.pod_uid);
            const char *ns, *pod, *container;
            if (pod_names_of(c->peer.container_id, &ns, &pod, &container, now)) {
                n = add_label(p->labels, sizeof p->labels, n, "namespace", ns);
                n = add_label(p->labels, sizeof p->labels, n, "pod", pod);
                n = add_label(p->labels, sizeof p->labels, n, "container", container);
            }
            p->labels_len = n;
            for (int i = 0; i < GS_MAX_DEVICES; i++) {
                const struct device *d = c->slots[i].device;
                const struct device **at = d ? bsearch(&d, sorted, s->ngpus, sizeof *sorted, by_pointer) : NULL;
                if (at)
                    s->proc_gpus[s->nproc_gpus++] =
                        (struct snap_proc_gpu){s->nprocs, gpu_of[at - sorted], c->slots[i].mem_held};
            }
            s->nprocs++;
        }
    free(sorted);
    free(gpu_of);
    return true;
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
        st->latency = t->sched.config.class == CLASS_LATENCY;
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
    if (!copy_processes(s, now)) {
        free(tenant_of_index);
        metrics_snapshot_free(s);
        return NULL;
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
    free(s->procs);
    free(s->proc_gpus);
    free(s);
}
