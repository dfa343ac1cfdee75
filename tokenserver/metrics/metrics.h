/*
 * The Prometheus endpoint of gpuslice-server: what its files share.
 *
 *   metrics_counters.c  server-wide counters (reloads, dropped clients)
 *   metrics_target.c    the share of a GPU a busy tenant should get now
 *   metrics_snapshot.c  a copy of every figure at one instant
 *   metrics_render.c    text exposition format 0.0.4 from a snapshot,
 *                       written a piece at a time
 *   metrics_http.c      the HTTP listener on the event loop
 *   http_request.c      the request parser (http_request.h; fuzzed)
 *   histogram.c         duration histograms (histogram.h)
 *
 * Like the rest of the server, all of it belongs to the loop's thread.
 */
#ifndef GPUSLICE_METRICS_H
#define GPUSLICE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "server.h"

/* ---- metrics_counters.c ------------------------------------------------------ */

enum reload_result { RELOAD_APPLIED, RELOAD_REJECTED, RELOAD_RESULTS };
enum drop_reason {
    DROP_PROTOCOL,         /* a malformed, unexpected or lying message */
    DROP_DEVICE_LIMIT,     /* --max-devices(-per-tenant) */
    DROP_NOT_READING,      /* --client-buffer filled */
    DROP_SILENT,           /* no HELLO in time */
    DROP_SERVER_RESOURCES, /* the server ran out of memory or timers */
    DROP_TENANT_REMOVED,   /* its tenant left the configuration */
    DROP_CONNECTION_LIMIT, /* refused at accept: a connection limit */
    DROP_REASONS
};

extern uint64_t metrics_reloads[RELOAD_RESULTS];
extern uint64_t metrics_drops[DROP_REASONS];
extern double metrics_start_time; /* Unix time, seconds */

void metrics_count_reload(enum reload_result result);
void metrics_count_drop(enum drop_reason reason, unsigned count);
/* A client dropped with client_drop's message `what`. */
void metrics_count_drop_message(const char *what);
const char *drop_reason_name(int reason);
const char *reload_result_name(int result);

/* ---- metrics_target.c ---------------------------------------------------------- */

/* The fraction of the GPU dt's tenant should get now: its share among the
 * tenants busy on d (waiting or holding), capped by its limit, with what
 * capped tenants leave spread over the others; 0 when it is not busy. */
double device_tenant_target_share(const struct device *d, const struct device_tenant *dt, uint64_t now);
/* Whether dt is busy on d: it holds d or waits for it. */
bool device_tenant_busy(const struct device *d, const struct device_tenant *dt);

/* ---- metrics_snapshot.c, metrics_render.c ------------------------------------------ */

struct metrics_snapshot;
/* Every figure /metrics shows, copied at one instant; NULL if out of memory. */
struct metrics_snapshot *metrics_snapshot_take(void);
void metrics_snapshot_free(struct metrics_snapshot *s);

struct metrics_cursor {
    int family;              /* the metric family being written */
    size_t item;             /* the next tenant, GPU or pair in it */
    bool begun;              /* its HELP and TYPE are written */
};
/* Appends the next lines of the exposition until out has grown by at
 * least `budget` bytes or it is complete; true once it is complete. */
bool metrics_render_next(const struct metrics_snapshot *s, struct metrics_cursor *cur, struct text *out, size_t budget);

/* ---- metrics_http.c ------------------------------------------------------------------ */

/* Listens on options.metrics_addr (none if ""); 0, or -1 if the address
 * cannot be parsed. A port that cannot be bound is tried again every 5 s. */
int metrics_open(void);
void metrics_close(void);
/* Parses ADDR:PORT ("127.0.0.1:29400", "[::1]:29400", ":29400" for all
 * addresses); false if it is not one. */
bool metrics_parse_addr(const char *text, struct sockaddr_storage *out, socklen_t *len);

#endif
