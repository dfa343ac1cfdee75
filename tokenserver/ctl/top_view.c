/*
 * One frame of gpuslicectl top as lines of text for a given width: a
 * header, the GPUs with their holder and queue, and one row per tenant
 * and GPU with its achieved share against its target and limit (a bar),
 * its memory against its cap (a bar), wait time and processes. The bars
 * take the width left by the figures: narrower terminals get shorter
 * bars, then no memory bar, then no bars. top.c draws these lines with
 * ncurses, or prints them when the output is not a terminal.
 *
 * Share bar: '#' up to the share achieved over the last 10 s, '|' at the
 * target share, '!' at the limit (if below 1), '.' elsewhere; the bar is
 * the whole GPU. Memory bar: '#' up to the memory counted, of the cap.
 */
#include "ctl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_CAP 1024
#define MIN_SHARE_BAR 5
#define MIN_BOTH_BARS 30

static void add(struct top_lines *l, int width, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void add(struct top_lines *l, int width, const char *fmt, ...)
{
    char **grown = realloc(l->line, (l->count + 1) * sizeof *grown);
    char *line = malloc(LINE_CAP);
    if (!grown || !line) {
        free(line);
        if (grown)
            l->line = grown;
        return; /* out of memory: the frame is short */
    }
    l->line = grown;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, LINE_CAP, fmt, ap);
    va_end(ap);
    if (width > 0 && width < LINE_CAP && strlen(line) > (size_t)width)
        line[width] = '\0';
    l->line[l->count++] = line;
}

void top_lines_free(struct top_lines *l)
{
    for (size_t i = 0; i < l->count; i++)
        free(l->line[i]);
    free(l->line);
    l->line = NULL;
    l->count = 0;
}

/* Bytes for people: "0", "512M", "1.5G". */
static void human(char *out, size_t cap, uint64_t bytes)
{
    static const char units[] = "KMGTP";
    double v = (double)bytes;
    int u = -1;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, cap, "%llu", (unsigned long long)bytes);
    else
        snprintf(out, cap, v < 10 ? "%.1f%c" : "%.0f%c", v, units[u]);
}

static int position(double fraction, int inner)
{
    int p = (int)(fraction * inner + 0.5);
    return p < 0 ? 0 : p > inner ? inner : p;
}

/* "[###..|..!]": inner characters between the brackets. */
static void share_bar(char *out, int inner, const struct top_row *r)
{
    out[0] = '[';
    int filled = position(r->achieved, inner);
    for (int i = 0; i < inner; i++)
        out[1 + i] = i < filled ? '#' : '.';
    if (r->limit < 1.0)
        out[1 + (position(r->limit, inner) < inner ? position(r->limit, inner) : inner - 1)] = '!';
    if (r->target > 0)
        out[1 + (position(r->target, inner) < inner ? position(r->target, inner) : inner - 1)] = '|';
    out[1 + inner] = ']';
    out[2 + inner] = '\0';
}

static void memory_bar(char *out, int inner, const struct top_row *r)
{
    out[0] = '[';
    int filled = r->mem_cap ? position((double)r->mem_used / (double)r->mem_cap, inner) : 0;
    for (int i = 0; i < inner; i++)
        out[1 + i] = r->mem_cap == 0 ? ' ' : i < filled ? '#' : '.';
    out[1 + inner] = ']';
    out[2 + inner] = '\0';
}

/* "GPU-5eed0000-0000-..." -> "5eed0000" */
static const char *short_uuid(const char *uuid, char out[9])
{
    const char *hex = strncmp(uuid, "GPU-", 4) == 0 ? uuid + 4 : uuid;
    size_t n = strnlen(hex, 8);
    memcpy(out, n ? hex : "-", n ? n : 1);
    out[n ? n : 1] = '\0';
    return out;
}

static void gpu_table(const struct top_model *m, int width, struct top_lines *out)
{
    int uuid_w = width >= 100 ? 40 : 12;
    add(out, width, "%-*s  %-8s  %-16s  %5s  %s", uuid_w, "GPU", "STATE", "HOLDER", "PROCS", "QUEUE");
    for (size_t i = 0; i < m->ngpus; i++) {
        const struct top_gpu *g = &m->gpus[i];
        add(out, width, "%-*.*s  %-8s  %-16s  %5u  %s", uuid_w, uuid_w, g->uuid, g->state,
            g->holder[0] ? g->holder : "-", g->processes, g->queue[0] ? g->queue : "-");
    }
    if (m->ngpus == 0)
        add(out, width, "(no GPU in use yet)");
}

static void tenant_table(const struct top_model *m, int width, struct top_lines *out)
{
    int name_w = 6;
    for (size_t i = 0; i < m->nrows; i++)
        if ((int)strlen(m->rows[i].tenant) > name_w)
            name_w = (int)strlen(m->rows[i].tenant);
    if (name_w > 16)
        name_w = 16;
    /* TENANT GPU SHARE LIMIT PROC WAIT(s) ACHIEVED/TGT MEM/CAP, one space apart */
    int fixed = name_w + 1 + 8 + 1 + 5 + 1 + 4 + 1 + 4 + 1 + 7 + 1 + 13 + 1 + 11;
    int left = width - fixed, share_inner = 0, mem_inner = 0;
    if (left >= MIN_BOTH_BARS) {
        share_inner = (left - 6) * 2 / 3;
        mem_inner = left - 6 - share_inner;
    } else if (left >= MIN_SHARE_BAR + 3) {
        share_inner = left - 3;
    }
    char share_head[LINE_CAP] = "", mem_head[LINE_CAP] = "";
    if (share_inner)
        snprintf(share_head, sizeof share_head, " %-*s", share_inner + 2, share_inner >= 10 ? "SHARE OF GPU" : "SHARE");
    if (mem_inner)
        snprintf(mem_head, sizeof mem_head, " %-*s", mem_inner + 2, "MEMORY");
    add(out, width, "%-*s %-8s %5s %4s %4s %7s %13s%s %11s%s", name_w, "TENANT", "GPU", "SHARE", "LIM", "PROC",
        "WAIT(s)", "ACHIEVED/TGT", share_head, "MEM/CAP", mem_head);
    for (size_t i = 0; i < m->nrows; i++) {
        const struct top_row *r = &m->rows[i];
        char gpu[9], used[16], cap[16], memory[40], shares[40], bar1[LINE_CAP] = "", bar2[LINE_CAP] = "";
        human(used, sizeof used, r->mem_used);
        if (r->mem_cap)
            human(cap, sizeof cap, r->mem_cap);
        else
            snprintf(cap, sizeof cap, "-");
        snprintf(memory, sizeof memory, "%s/%s", used, cap);
        snprintf(shares, sizeof shares, "%5.1f%%/%5.1f%%", 100 * r->achieved, 100 * r->target);
        if (share_inner) {
            bar1[0] = ' ';
            share_bar(bar1 + 1, share_inner, r);
        }
        if (mem_inner) {
            bar2[0] = ' ';
            memory_bar(bar2 + 1, mem_inner, r);
        }
        if (!r->uuid[0]) {
            add(out, width, "%-*.*s %-8s %5g %4.2f %4u  (uses no GPU yet)", name_w, name_w, r->tenant, "-", r->share,
                r->limit, r->processes);
            continue;
        }
        add(out, width, "%-*.*s %-8s %5g %4.2f %4u %7.1f %13s%s %11s%s", name_w, name_w, r->tenant,
            short_uuid(r->uuid, gpu), r->share, r->limit, r->processes, r->wait_s, shares, bar1, memory, bar2);
    }
    if (m->nrows == 0)
        add(out, width, "(no tenant configured)");
    if (share_inner)
        add(out, width, "share bar: # achieved (10 s)  | target  ! limit");
}

void top_view(const struct top_model *m, enum top_sort sort, int width, const char *clock, const char *error,
              struct top_lines *out)
{
    out->line = NULL;
    out->count = 0;
    unsigned processes = m ? m->connections : 0;
    add(out, width, "gpuslice top  %s  GPUs %zu  tenants %u  processes %u  sort %s  [s]ort [q]uit", clock,
        m ? m->ngpus : 0, m ? m->ntenants : 0, processes, top_sort_name(sort));
    add(out, width, "%s", "");
    if (error || !m) {
        add(out, width, "%s", error ? error : "no status");
        return;
    }
    gpu_table(m, width, out);
    add(out, width, "%s", "");
    tenant_table(m, width, out);
}
