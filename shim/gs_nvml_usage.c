/*
 * What NVML reports inside a tenant comes from gpuslice-server: USAGE_QUERY
 * about a GPU, by UUID (tokenserver/usage.c), answered over the gate
 * thread's connection (gs_rpc.c). Answers are kept CACHE_NS per GPU, so
 * that nvidia-smi's several queries of one GPU, or a monitoring loop that
 * polls NVML as fast as it can, ask the server at most 10 times a second
 * per GPU; the server's own limit (20 a second per connection) is then
 * never reached by an honest process.
 *
 * No server: when the process has no connection and cannot get one at
 * once (the tenant's socket refuses, or none is configured), every answer
 * passes through unchanged, whatever the server-down policy: NVML is how a
 * process outside any tenant sees the GPU. A process whose connection is
 * being made waits for it at most CONNECT_WAIT_NS.
 *
 * The caches (handles: a device handle's UUID; answers: a GPU's last
 * USAGE) are guarded by the usage_cache lock (gs_locks.h), which is never
 * held while another is taken, nor across the round trip.
 */
#include "gs_dev.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_nvml.h"
#include "gs_rpc.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE_NS 100000000ull           /* an answer serves this long */
#define LIMITED_RETRY_NS 50000000ull    /* after a LIMITED answer */
#define LIMITED_TRIES 20
#define MAX_GPUS 64

static struct {
    nvmlDevice_t dev;
    uint8_t uuid[16];
} handles[MAX_GPUS];            /* guarded by the usage_cache lock */
static unsigned nhandles;
static struct {
    uint8_t uuid[16];
    struct gs_nvml_usage usage;  /* usage.at == 0: none yet */
} answers[MAX_GPUS];            /* guarded by the usage_cache lock */
static unsigned nanswers;

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", NVML's form of a GPU's UUID
 * (nvmlDeviceGetUUID), as 16 bytes; false for anything else (a MIG
 * device's "MIG-..." among them). */
static bool parse_uuid(const char *text, uint8_t out[16])
{
    if (strncmp(text, "GPU-", 4) != 0)
        return false;
    int n = 0;
    for (const char *p = text + 4; *p; p++) {
        if (*p == '-')
            continue;
        int hi = hex_value(p[0]), lo = p[1] ? hex_value(p[1]) : -1;
        if (hi < 0 || lo < 0 || n == 16)
            return false;
        out[n++] = (uint8_t)(hi << 4 | lo);
        p++;
    }
    return n == 16;
}

static bool uuid_of(nvmlDevice_t dev, uint8_t uuid[16])
{
    gs_lock(GS_LOCK_USAGE_CACHE);
    for (unsigned i = 0; i < nhandles; i++)
        if (handles[i].dev == dev) {
            memcpy(uuid, handles[i].uuid, 16);
            gs_unlock(GS_LOCK_USAGE_CACHE);
            return true;
        }
    gs_unlock(GS_LOCK_USAGE_CACHE);
    char text[96] = "";
    if (!gs_nvml_real[GS_NVML_IDX_nvmlDeviceGetUUID] ||
        GS_NVML_REAL(nvmlDeviceGetUUID)(dev, text, sizeof text) != NVML_SUCCESS || !parse_uuid(text, uuid))
        return false;
    gs_lock(GS_LOCK_USAGE_CACHE);
    if (nhandles < MAX_GPUS) {
        handles[nhandles].dev = dev;
        memcpy(handles[nhandles].uuid, uuid, 16);
        nhandles++;
    }
    gs_unlock(GS_LOCK_USAGE_CACHE);
    return true;
}

/* The cached answer for uuid (any age); false if none. */
static bool cached(const uint8_t uuid[16], struct gs_nvml_usage *out)
{
    bool found = false;
    gs_lock(GS_LOCK_USAGE_CACHE);
    for (unsigned i = 0; i < nanswers && !found; i++)
        if (memcmp(answers[i].uuid, uuid, 16) == 0 && answers[i].usage.at) {
            *out = answers[i].usage;
            found = true;
        }
    gs_unlock(GS_LOCK_USAGE_CACHE);
    return found;
}

static void remember(const uint8_t uuid[16], const struct gs_nvml_usage *usage)
{
    gs_lock(GS_LOCK_USAGE_CACHE);
    unsigned i = 0;
    while (i < nanswers && memcmp(answers[i].uuid, uuid, 16) != 0)
        i++;
    if (i == nanswers && nanswers < MAX_GPUS)
        memcpy(answers[nanswers++].uuid, uuid, 16);
    if (i < nanswers)
        answers[i].usage = *usage;
    gs_unlock(GS_LOCK_USAGE_CACHE);
}

bool gs_nvml_usage(nvmlDevice_t dev, struct gs_nvml_usage *out, nvmlReturn_t *rc)
{
    *rc = NVML_SUCCESS;
    uint8_t uuid[16];
    if (!uuid_of(dev, uuid))
        return false;
    uint64_t now = gs_now_ns();
    bool have = cached(uuid, out);
    if (have && now - out->at < CACHE_NS)
        return true;
    for (int tries = 0;; tries++) {
        struct gs_msg_usage u;
        if (gs_rpc_usage(uuid, &u) != 0)
            return false;
        if (u.status == GS_USAGE_OK) {
            out->u = u;
            out->at = gs_now_ns();
            remember(uuid, out);
            return true;
        }
        /* LIMITED: an older answer serves; else wait for the server's
         * budget to come back. */
        if (have)
            return true;
        if (tries + 1 >= LIMITED_TRIES) {
            *rc = NVML_ERROR_TIMEOUT;
            return true;
        }
        struct timespec pause = {0, (long)LIMITED_RETRY_NS};
        nanosleep(&pause, NULL);
    }
}

bool gs_nvml_pid_is_tenants(unsigned int pid)
{
    unsigned count = 0;
    if (!gs_nvml_real[GS_NVML_IDX_nvmlDeviceGetCount_v2] || !gs_nvml_real[GS_NVML_IDX_nvmlDeviceGetHandleByIndex_v2] ||
        GS_NVML_REAL(nvmlDeviceGetCount_v2)(&count) != NVML_SUCCESS)
        return true; /* no GPU to ask about: nothing to hide */
    bool in_tenant = false;
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t dev;
        struct gs_nvml_usage usage;
        nvmlReturn_t rc;
        if (GS_NVML_REAL(nvmlDeviceGetHandleByIndex_v2)(i, &dev) != NVML_SUCCESS || !gs_nvml_usage(dev, &usage, &rc))
            continue;
        in_tenant = true;
        for (uint32_t k = 0; rc == NVML_SUCCESS && k < usage.u.nprocs; k++)
            if (usage.u.procs[k].pid == pid)
                return true;
    }
    return !in_tenant;
}

void gs_nvml_after_fork_child(void)
{
    /* The parent's answers are about the parent's connection's tenant,
     * which is the child's too: they are kept. */
}
