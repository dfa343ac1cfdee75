/*
 * gpuslicectl top's model: the status JSON (status.c's layout) as a list
 * of GPUs and a list of rows, one per tenant and GPU it uses (or one for
 * a tenant that uses none yet), and the orders `s` cycles through.
 */
#include "ctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t count(const struct json *array)
{
    size_t n = 0;
    for (const struct json *e = array && array->type == JSON_ARRAY ? array->child : NULL; e; e = e->next)
        n++;
    return n;
}

static void copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

static void read_gpu(struct top_gpu *g, const struct json *d)
{
    copy(g->uuid, sizeof g->uuid, json_string(d, "uuid", "?"));
    copy(g->state, sizeof g->state, json_string(d, "state", "?"));
    copy(g->holder, sizeof g->holder, json_string(d, "holder", ""));
    g->processes = (unsigned)json_number(d, "processes", 0);
    size_t q = 0;
    g->queue[0] = '\0';
    const struct json *queue = json_get(d, "queue");
    for (const struct json *e = queue && queue->type == JSON_ARRAY ? queue->child : NULL; e; e = e->next) {
        if (e->type != JSON_STRING || q + strlen(e->string) + 2 >= sizeof g->queue)
            continue;
        q += (size_t)snprintf(g->queue + q, sizeof g->queue - q, "%s%s", q ? "," : "", e->string);
    }
}

static void read_row(struct top_row *row, const struct json *t, const struct json *d)
{
    copy(row->tenant, sizeof row->tenant, json_string(t, "name", "?"));
    row->share = json_number(t, "share", 0);
    row->limit = json_number(t, "limit", 1);
    row->processes = (unsigned)json_number(t, "clients", 0);
    row->mem_cap = (uint64_t)json_number(t, "memory", 0);
    if (!d)
        return;
    copy(row->uuid, sizeof row->uuid, json_string(d, "uuid", "?"));
    row->achieved = json_number(d, "achieved_share", 0);
    row->target = json_number(d, "target_share", 0);
    row->wait_s = json_number(d, "wait_ms", 0) / 1000.0;
    row->mem_used = (uint64_t)json_number(d, "mem_used", 0);
    row->mem_cap = (uint64_t)json_number(d, "mem_cap", (double)row->mem_cap);
}

bool top_model_read(struct top_model *m, const char *text, size_t len)
{
    memset(m, 0, sizeof *m);
    struct json *root = json_parse(text, len);
    const struct json *gpus = json_get(root, "devices"), *tenants = json_get(root, "tenants");
    if (!root || !gpus || gpus->type != JSON_ARRAY || !tenants || tenants->type != JSON_ARRAY) {
        json_free(root);
        return false;
    }
    size_t nrows = 0;
    for (const struct json *t = tenants->child; t; t = t->next) {
        size_t n = count(json_get(t, "devices"));
        nrows += n ? n : 1;
    }
    m->gpus = calloc(count(gpus) + 1, sizeof *m->gpus);
    m->rows = calloc(nrows + 1, sizeof *m->rows);
    if (!m->gpus || !m->rows) {
        json_free(root);
        top_model_free(m);
        return false;
    }
    for (const struct json *d = gpus->child; d; d = d->next)
        read_gpu(&m->gpus[m->ngpus++], d);
    for (const struct json *t = tenants->child; t; t = t->next) {
        const struct json *ds = json_get(t, "devices");
        m->ntenants++;
        if (count(ds) == 0)
            read_row(&m->rows[m->nrows++], t, NULL);
        for (const struct json *d = count(ds) ? ds->child : NULL; d; d = d->next)
            read_row(&m->rows[m->nrows++], t, d);
    }
    m->connections = (unsigned)json_number(root, "connections", 0);
    json_free(root);
    return true;
}

void top_model_free(struct top_model *m)
{
    free(m->gpus);
    free(m->rows);
    memset(m, 0, sizeof *m);
}

static int by_name(const struct top_row *a, const struct top_row *b)
{
    int c = strcmp(a->tenant, b->tenant);
    return c ? c : strcmp(a->uuid, b->uuid);
}

static int cmp_double_desc(double a, double b)
{
    return a > b ? -1 : a < b ? 1 : 0;
}

static enum top_sort sort_key; /* for the comparison; the caller's thread only */

static int compare(const void *pa, const void *pb)
{
    const struct top_row *a = pa, *b = pb;
    int c = 0;
    switch (sort_key) {
    case SORT_ACHIEVED: c = cmp_double_desc(a->achieved, b->achieved); break;
    case SORT_WAIT: c = cmp_double_desc(a->wait_s, b->wait_s); break;
    case SORT_MEMORY: c = cmp_double_desc((double)a->mem_used, (double)b->mem_used); break;
    default: break;
    }
    return c ? c : by_name(a, b);
}

void top_model_sort(struct top_model *m, enum top_sort key)
{
    sort_key = key;
    qsort(m->rows, m->nrows, sizeof *m->rows, compare);
}

const char *top_sort_name(enum top_sort key)
{
    static const char *const names[SORT_KEYS] = {"name", "achieved", "wait", "memory"};
    return key < SORT_KEYS ? names[key] : "?";
}
