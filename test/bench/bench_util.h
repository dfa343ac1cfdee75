/*
 * Helpers shared by the side-by-side benchmarks: a monotonic clock, the
 * median, symbol lookup that fails loudly, and the machine-readable lines
 * every benchmark prints for its targets (the same format as
 * test/bench/bench_result.py; scripts/benchmarks reads them):
 *
 *   BENCH-TARGET {"target": ..., "what": ..., "bound": ..., "benchmark": ...}
 *       one per target, printed alone when the program is run with
 *       --targets (its declaration: what the table must have a row for);
 *   BENCH-RESULT {"target": ..., "what": ..., "figure": F, "unit": ...,
 *                 "bound": ..., "op": "<=", "limit": L, "verdict": "met",
 *                 "benchmark": ..., "note": ...}
 *       one per target after a run; the verdict is the figure as printed
 *       against the limit, so a reader that checks it agrees.
 */
#ifndef GPUSLICE_BENCH_UTIL_H
#define GPUSLICE_BENCH_UTIL_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int bench_compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bench_compare);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline void *bench_sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "bench: %s: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

/* A target: a figure with a bound, "op limit unit" (op "<=" or ">="). */
struct bench_target {
    const char *target; /* its name, e.g. "shim.gated_launch" */
    const char *what;
    const char *unit;
    const char *op;
    double limit;
};

/* s as a JSON string, quotes included. */
static inline void bench_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

static inline void bench_bound_text(const struct bench_target *t, char *buf, size_t len)
{
    snprintf(buf, len, "%s %g %s", t->op, t->limit, t->unit);
}

/* With --targets among the arguments, prints the declarations of targets
 * (n of them, measured by the meson benchmark named benchmark) and
 * returns 1: the caller exits 0 without measuring anything. */
static inline int bench_declare_if_asked(int argc, char **argv, const char *benchmark,
                                         const struct bench_target *targets, size_t n)
{
    int asked = 0;
    for (int i = 1; i < argc; i++)
        asked |= strcmp(argv[i], "--targets") == 0;
    if (!asked)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char bound[64];
        bench_bound_text(&targets[i], bound, sizeof bound);
        printf("BENCH-TARGET {\"target\": ");
        bench_json_string(targets[i].target);
        printf(", \"what\": ");
        bench_json_string(targets[i].what);
        printf(", \"bound\": ");
        bench_json_string(bound);
        printf(", \"benchmark\": ");
        bench_json_string(benchmark);
        printf("}\n");
    }
    return 1;
}

/* Prints the result line of target t for figure (rounded to 2 decimals,
 * and judged as rounded); returns 1 if the target is met. */
static inline int bench_result(const struct bench_target *t, const char *benchmark, double figure,
                               const char *note)
{
    char text[64], bound[64];
    snprintf(text, sizeof text, "%.2f", figure);
    double shown = strtod(text, NULL);
    int met = strcmp(t->op, ">=") == 0 ? shown >= t->limit : shown <= t->limit;
    bench_bound_text(t, bound, sizeof bound);
    printf("BENCH-RESULT {\"target\": ");
    bench_json_string(t->target);
    printf(", \"what\": ");
    bench_json_string(t->what);
    printf(", \"figure\": %s, \"unit\": ", text);
    bench_json_string(t->unit);
    printf(", \"bound\": ");
    bench_json_string(bound);
    printf(", \"op\": ");
    bench_json_string(t->op);
    printf(", \"limit\": %g, \"verdict\": \"%s\", \"benchmark\": ", t->limit, met ? "met" : "missed");
    bench_json_string(benchmark);
    if (note) {
        printf(", \"note\": ");
        bench_json_string(note);
    }
    printf("}\n");
    fflush(stdout);
    return met;
}

#endif
