/*
 * The Prometheus text exposition format (version 0.0.4) of a snapshot,
 * written a piece at a time: a scrape of thousands of series never holds
 * the loop for long, and the connection's buffer stays small.
 *
 * One family after the other (HELP, TYPE, then every series of it), each
 * over the server, the tenants, the GPUs or the (tenant, GPU) pairs. Lines
 * are put together with memcpy and hand-written number formatting rather
 * than printf: a scrape of 100 tenants on 8 GPUs is about 18 000 lines.
 */
#include "metrics_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum domain { SERVER, TENANT, GPU, PAIR, PROC, PROC_GPU };

enum what {
    BUILD_INFO, START_TIME, RELOADS, DROPS, CONNECTIONS,
    T_SHARE, T_LIMIT, T_QUANTUM, T_LATENCY, T_PROCESSES,
    G_HELD, G_SLICES, G_PREEMPTIONS, G_HANDOFFS, G_HANDOFF_HIST, G_HOLDER, G_PROCESSES,
    P_USED, P_WAIT, P_SLICES, P_OVERRUN_HIST, P_TARGET, P_ACHIEVED, P_MEM, P_MEM_CAP, P_MEM_PEAK, P_OOM,
    PROC_INFO, PROC_MEM,
};

struct family {
    const char *name, *type, *help;
    enum domain domain;
    enum what what;
};

static const struct family families[] = {
    {"gpuslice_build_info", "gauge", "Always 1; the version of gpuslice-server and of its wire protocol.", SERVER,
     BUILD_INFO},
    {"gpuslice_start_time_seconds", "gauge", "When gpuslice-server started, in seconds since the Unix epoch.", SERVER,
     START_TIME},
    {"gpuslice_config_reloads_total", "counter",
     "Tenant files read after a change, by result: applied, or rejected with an error (the tenant kept its settings).",
     SERVER, RELOADS},
    {"gpuslice_clients_dropped_total", "counter", "Connections the server closed or refused, by reason.", SERVER,
     DROPS},
    {"gpuslice_connections", "gauge", "Connected processes, all tenants together.", SERVER, CONNECTIONS},
    {"gpuslice_tenant_share", "gauge", "The tenant's weight among the tenants busy on a GPU.", TENANT, T_SHARE},
    {"gpuslice_tenant_limit_ratio", "gauge", "The largest fraction of a GPU the tenant may use.", TENANT, T_LIMIT},
    {"gpuslice_tenant_quantum_seconds", "gauge", "The length of the tenant's time slices.", TENANT, T_QUANTUM},
    {"gpuslice_tenant_latency_class", "gauge",
     "1 for a tenant of class latency (it preempts batch slices within its share), 0 for class batch.", TENANT,
     T_LATENCY},
    {"gpuslice_tenant_processes", "gauge", "The tenant's connected processes.", TENANT, T_PROCESSES},
    {"gpuslice_gpu_held_seconds_total", "counter", "Time some tenant held a slice of the GPU.", GPU, G_HELD},
    {"gpuslice_gpu_slices_total", "counter", "Slices granted on the GPU.", GPU, G_SLICES},
    {"gpuslice_gpu_preemptions_total", "counter", "Batch slices of the GPU cut short for a latency tenant.", GPU,
     G_PREEMPTIONS},
    {"gpuslice_gpu_handoffs_total", "counter", "Times the GPU passed from one tenant to another that was waiting.",
     GPU, G_HANDOFFS},
    {"gpuslice_gpu_handoff_seconds", "histogram",
     "From the end of a slice (its deadline, or its release if earlier) to the next tenant's grant.", GPU,
     G_HANDOFF_HIST},
    {"gpuslice_gpu_holder_info", "gauge", "1 for the tenant holding the GPU's slice now; absent while it is idle.",
     GPU, G_HOLDER},
    {"gpuslice_gpu_processes", "gauge", "Connected processes that declared the GPU.", GPU, G_PROCESSES},
    {"gpuslice_tenant_gpu_seconds_total", "counter",
     "Device time charged to the tenant on the GPU: from each grant to its last release.", PAIR, P_USED},
    {"gpuslice_tenant_gpu_wait_seconds_total", "counter",
     "Time the tenant waited for a slice of the GPU with work pending.", PAIR, P_WAIT},
    {"gpuslice_tenant_gpu_slices_total", "counter", "Slices of the GPU granted to the tenant.", PAIR, P_SLICES},
    {"gpuslice_tenant_gpu_slice_overrun_seconds", "histogram",
     "How long after its deadline each of the tenant's slices was released (0 if before).", PAIR, P_OVERRUN_HIST},
    {"gpuslice_tenant_gpu_target_ratio", "gauge",
     "The fraction of the GPU the tenant should get now: its share among the tenants busy on the GPU, capped by its "
     "limit; 0 while it is not busy.",
     PAIR, P_TARGET},
    {"gpuslice_tenant_gpu_achieved_ratio", "gauge",
     "The fraction of the GPU's time the tenant held over the last 10 s, a sliding window with the slice it holds "
     "counted up to now: the share gpuslicectl status and top show.",
     PAIR, P_ACHIEVED},
    {"gpuslice_tenant_gpu_memory_bytes", "gauge", "Device memory counted for the tenant's processes on the GPU.", PAIR,
     P_MEM},
    {"gpuslice_tenant_gpu_memory_limit_bytes", "gauge",
     "The tenant's device memory cap on the GPU; absent if it has none.", PAIR, P_MEM_CAP},
    {"gpuslice_tenant_gpu_memory_peak_bytes", "gauge", "The most device memory counted for the tenant on the GPU at once: what its processes held plus the headroom "
     "leased to them, so above what they ever allocated.",
     PAIR, P_MEM_PEAK},
    {"gpuslice_tenant_gpu_oom_refusals_total", "counter",
     "Allocations refused because they would have crossed the tenant's memory cap.", PAIR, P_OOM},
    {"gpuslice_process_info", "gauge",
     "1 for each connected process (at most 4096), with who it is: its host PID, container ID and pod UID from its "
     "cgroup, and its namespace, pod and container from the kubelet's log links where they exist.",
     PROC, PROC_INFO},
    {"gpuslice_process_gpu_memory_bytes", "gauge",
     "Device memory counted for the process on the GPU: what it holds plus the headroom leased to it.", PROC_GPU,
     PROC_MEM},
};
#define NFAMILIES (sizeof families / sizeof families[0])
#define LINE_MAX_BYTES 2048 /* a name, a tenant's, a GPU's and a process's labels, and a number */

/* Makes room for one more line; false if out of memory. */
static bool reserve(struct text *o, size_t more)
{
    if (o->failed)
        return false;
    if (o->cap - o->len >= more)
        return true;
    size_t cap = o->cap ? o->cap : 65536;
    while (cap - o->len < more)
        cap *= 2;
    char *grown = realloc(o->data, cap);
    if (!grown) {
        o->failed = true;
        return false;
    }
    o->data = grown;
    o->cap = cap;
    return true;
}

static void put(struct text *o, const char *s, size_t n)
{
    memcpy(o->data + o->len, s, n);
    o->len += n;
}

static void puts_(struct text *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_u64(struct text *o, uint64_t v)
{
    char digits[20];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    while (n > 0)
        o->data[o->len++] = digits[--n];
}

/* ns as seconds, exactly: "12", "0.0005", "3.000000001". */
static void put_seconds(struct text *o, uint64_t ns)
{
    put_u64(o, ns / 1000000000ull);
    uint64_t frac = ns % 1000000000ull;
    if (!frac)
        return;
    char digits[9];
    for (int i = 8; i >= 0; i--, frac /= 10)
        digits[i] = (char)('0' + frac % 10);
    int n = 9;
    while (digits[n - 1] == '0')
        n--;
    o->data[o->len++] = '.';
    put(o, digits, (size_t)n);
}

static void put_double(struct text *o, double v)
{
    int n = snprintf(o->data + o->len, 32, "%.10g", v);
    o->len += n > 0 && n < 32 ? (size_t)n : 0;
}

/* Writes a label value, escaped as the format requires. */
static void put_label_value(struct text *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            o->data[o->len++] = '\\';
        if (*v == '\n') {
            puts_(o, "\\n");
            continue;
        }
        o->data[o->len++] = *v;
    }
}

/* "NAME{" with the labels of the tenant and/or GPU of item, without "}". */
static void begin_series(struct text *o, const char *name, const char *suffix, const struct metrics_snapshot *s,
                         enum domain domain, size_t item)
{
    puts_(o, name);
    puts_(o, suffix);
    o->data[o->len++] = '{';
    const struct snap_gpu *g = NULL;
    const char *tenant = NULL;
    if (domain == TENANT)
        tenant = s->tenants[item].name;
    if (domain == PAIR) {
        tenant = s->tenants[s->pairs[item].tenant].name;
        g = &s->gpus[s->pairs[item].gpu];
    }
    if (domain == GPU)
        g = &s->gpus[item];
    const struct snap_proc *p = NULL;
    if (domain == PROC)
        p = &s->procs[item];
    if (domain == PROC_GPU) {
        p = &s->procs[s->proc_gpus[item].proc];
        g = &s->gpus[s->proc_gpus[item].gpu];
    }
    if (p)
        tenant = s->tenants[p->tenant].name;
    if (tenant) {
        puts_(o, "tenant=\"");
        put_label_value(o, tenant);
        o->data[o->len++] = '"';
    }
    if (p && p->labels_len) {
        o->data[o->len++] = ',';
        put(o, p->labels, p->labels_len);
    }
    if (g && g->labels_len) {
        if (tenant)
            o->data[o->len++] = ',';
        put(o, g->labels, g->labels_len);
    }
    if (domain == PROC && s->host_label_len) {
        o->data[o->len++] = ',';
        put(o, s->host_label, s->host_label_len);
    }
}

static void end_series_u64(struct text *o, uint64_t v)
{
    puts_(o, "} ");
    put_u64(o, v);
    o->data[o->len++] = '\n';
}

static void end_series_seconds(struct text *o, uint64_t ns)
{
    puts_(o, "} ");
    put_seconds(o, ns);
    o->data[o->len++] = '\n';
}

static void end_series_double(struct text *o, double v)
{
    puts_(o, "} ");
    put_double(o, v);
    o->data[o->len++] = '\n';
}

static bool write_histogram(struct text *o, const struct family *f, const struct metrics_snapshot *s, size_t item,
                            const struct histogram *h)
{
    uint64_t cumulative = 0;
    for (int b = 0; b < HISTOGRAM_BUCKETS; b++) {
        if (!reserve(o, LINE_MAX_BYTES))
            return false;
        cumulative += h->counts[b];
        begin_series(o, f->name, "_bucket", s, f->domain, item);
        puts_(o, f->domain == GPU && s->gpus[item].labels_len == 0 ? "le=\"" : ",le=\"");
        if (b < HISTOGRAM_FINITE)
            put_seconds(o, histogram_bound_ns(b));
        else
            puts_(o, "+Inf");
        o->data[o->len++] = '"';
        end_series_u64(o, cumulative);
    }
    if (!reserve(o, 2 * LINE_MAX_BYTES))
        return false;
    begin_series(o, f->name, "_sum", s, f->domain, item);
    end_series_seconds(o, h->sum_ns);
    begin_series(o, f->name, "_count", s, f->domain, item);
    end_series_u64(o, cumulative);
    return true;
}

static size_t items_of(const struct metrics_snapshot *s, enum domain domain)
{
    switch (domain) {
    case SERVER: return 1;
    case TENANT: return s->ntenants;
    case GPU: return s->ngpus;
    case PROC: return s->nprocs;
    case PROC_GPU: return s->nproc_gpus;
    default: return s->npairs;
    }
}

/* The server-wide series of f. */
static bool write_server(struct text *o, const struct family *f, const struct metrics_snapshot *s)
{
    if (!reserve(o, (DROP_REASONS + 1) * LINE_MAX_BYTES))
        return false;
    char line[LINE_MAX_BYTES];
    int n = 0;
    switch (f->what) {
    case BUILD_INFO:
        n = snprintf(line, sizeof line, "%s{version=\"%s\",protocol=\"%d\"} 1\n", f->name, GPUSLICE_VERSION,
                     GS_PROTOCOL_VERSION);
        break;
    case START_TIME: n = snprintf(line, sizeof line, "%s %.3f\n", f->name, s->start_time); break;
    case CONNECTIONS: n = snprintf(line, sizeof line, "%s %u\n", f->name, s->connections); break;
    case RELOADS:
        for (int r = 0; r < RELOAD_RESULTS; r++) {
            n = snprintf(line, sizeof line, "%s{result=\"%s\"} %llu\n", f->name, reload_result_name(r),
                         (unsigned long long)s->reloads[r]);
            put(o, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
        }
        return true;
    case DROPS:
        for (int r = 0; r < DROP_REASONS; r++) {
            n = snprintf(line, sizeof line, "%s{reason=\"%s\"} %llu\n", f->name, drop_reason_name(r),
                         (unsigned long long)s->drops[r]);
            put(o, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
        }
        return true;
    default: break;
    }
    put(o, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
    return true;
}

/* The series of f for one tenant, GPU or pair. */
static bool write_item(struct text *o, const struct family *f, const struct metrics_snapshot *s, size_t i)
{
    if (f->domain == SERVER)
        return write_server(o, f, s);
    if (f->what == G_HANDOFF_HIST)
        return write_histogram(o, f, s, i, &s->gpus[i].handoff);
    if (f->what == P_OVERRUN_HIST)
        return write_histogram(o, f, s, i, &s->pairs[i].overrun);
    if (!reserve(o, LINE_MAX_BYTES))
        return false;
    const struct snap_tenant *t = f->domain == TENANT ? &s->tenants[i] : NULL;
    const struct snap_gpu *g = f->domain == GPU ? &s->gpus[i] : NULL;
    const struct snap_pair *p = f->domain == PAIR ? &s->pairs[i] : NULL;
    if ((f->what == G_HOLDER && g->holder < 0) || (f->what == P_MEM_CAP && p->mem_cap == 0))
        return true; /* absent */
    begin_series(o, f->name, "", s, f->domain, i);
    switch (f->what) {
    case T_SHARE: end_series_double(o, t->share); break;
    case T_LIMIT: end_series_double(o, t->limit); break;
    case T_QUANTUM: end_series_seconds(o, t->quantum_ns); break;
    case T_LATENCY: end_series_u64(o, t->latency ? 1 : 0); break;
    case T_PROCESSES: end_series_u64(o, t->processes); break;
    case G_HELD: end_series_seconds(o, g->held_ns); break;
    case G_SLICES: end_series_u64(o, g->slices); break;
    case G_PREEMPTIONS: end_series_u64(o, g->preemptions); break;
    case G_HANDOFFS: {
        uint64_t count = 0;
        for (int b = 0; b < HISTOGRAM_BUCKETS; b++)
            count += g->handoff.counts[b];
        end_series_u64(o, count);
        break;
    }
    case G_HOLDER:
        puts_(o, g->labels_len ? ",tenant=\"" : "tenant=\"");
        put_label_value(o, s->tenants[g->holder].name);
        o->data[o->len++] = '"';
        end_series_u64(o, 1);
        break;
    case G_PROCESSES: end_series_u64(o, g->processes); break;
    case P_USED: end_series_seconds(o, p->used_ns); break;
    case P_WAIT: end_series_seconds(o, p->wait_ns); break;
    case P_SLICES: end_series_u64(o, p->slices); break;
    case P_TARGET: end_series_double(o, p->target); break;
    case P_ACHIEVED: end_series_double(o, p->achieved); break;
    case P_MEM: end_series_u64(o, p->mem_used); break;
    case P_MEM_CAP: end_series_u64(o, p->mem_cap); break;
    case P_MEM_PEAK: end_series_u64(o, p->mem_peak); break;
    case P_OOM: end_series_u64(o, p->oom_refusals); break;
    case PROC_INFO: end_series_u64(o, 1); break;
    case PROC_MEM: end_series_u64(o, s->proc_gpus[i].bytes); break;
    default: end_series_u64(o, 0); break;
    }
    return true;
}

bool metrics_render_next(const struct metrics_snapshot *s, struct metrics_cursor *cur, struct text *out, size_t budget)
{
    size_t start = out->len;
    while ((size_t)cur->family < NFAMILIES && out->len - start < budget) {
        const struct family *f = &families[cur->family];
        if (!cur->begun) {
            if (!reserve(out, 2 * LINE_MAX_BYTES))
                return false;
            cur->begun = true;
            int n = snprintf(out->data + out->len, 2 * LINE_MAX_BYTES, "# HELP %s %s\n# TYPE %s %s\n", f->name,
                             f->help, f->name, f->type);
            out->len += n > 0 && n < 2 * LINE_MAX_BYTES ? (size_t)n : 0;
        }
        size_t items = items_of(s, f->domain);
        while (cur->item < items && out->len - start < budget)
            if (!write_item(out, f, s, cur->item++))
                return false;
        if (cur->item >= items) {
            cur->family++;
            cur->item = 0;
            cur->begun = false;
        }
    }
    return (size_t)cur->family >= NFAMILIES;
}
