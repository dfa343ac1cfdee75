/*
 * Server-wide counters for /metrics: configuration reloads by result and
 * clients dropped by reason, and the server's start time. The files that
 * reload or drop call in here; nothing else reads these but the snapshot.
 */
#include "metrics.h"

#include <string.h>

/* The counters; owned by the loop's thread. */
uint64_t metrics_reloads[RELOAD_RESULTS];
uint64_t metrics_drops[DROP_REASONS];
double metrics_start_time;

static const char *const drop_names[DROP_REASONS] = {
    "protocol", "device_limit", "not_reading", "silent", "server_resources", "tenant_removed", "connection_limit",
};
static const char *const reload_names[RELOAD_RESULTS] = {"applied", "rejected"};

const char *drop_reason_name(int reason)
{
    return reason >= 0 && reason < DROP_REASONS ? drop_names[reason] : "?";
}

const char *reload_result_name(int result)
{
    return result >= 0 && result < RELOAD_RESULTS ? reload_names[result] : "?";
}

void metrics_count_reload(enum reload_result result)
{
    metrics_reloads[result]++;
}

void metrics_count_drop(enum drop_reason reason, unsigned count)
{
    metrics_drops[reason] += count;
}

/* client_drop's messages that are not protocol violations, by the start
 * of the message (devices.c and clients.c write them); every other
 * message is about what the client sent. */
static const struct {
    const char *prefix;
    enum drop_reason reason;
} not_protocol[] = {
    {"declared more GPUs than tenant", DROP_DEVICE_LIMIT},
    {"gpuslice-server knows", DROP_DEVICE_LIMIT},
    {"gpuslice-server cannot track", DROP_SERVER_RESOURCES},
    {"gpuslice-server is out of memory", DROP_SERVER_RESOURCES},
    {"said nothing", DROP_SILENT},
};

void metrics_count_drop_message(const char *what)
{
    enum drop_reason reason = DROP_PROTOCOL;
    for (size_t i = 0; i < sizeof not_protocol / sizeof not_protocol[0]; i++)
        if (strncmp(what, not_protocol[i].prefix, strlen(not_protocol[i].prefix)) == 0)
            reason = not_protocol[i].reason;
    metrics_count_drop(reason, 1);
}
