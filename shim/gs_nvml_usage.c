/*
 * What NVML reports inside a tenant comes from gpuslice-server: USAGE_QUERY
 * about a GPU, by UUID (tokenserver/usage.c), answered over the gate
 * thread's connection (gs_client.c). Answers are kept CACHE_NS per GPU, so
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
 * USAGE) are guarded by cache_lock; requests waiting for their answer by
 * gs_gate_lock, whose condition variable the arrival broadcasts. Lock
 * order: cache_lock is never held while taking gs_gate_lock.
 */
#include "gs_gate.h"
#include "gs_log.h"
#include "gs_nvml.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE_NS 100000000ull           /* an answer serves this long */
#define CONNECT_WAIT_NS 2000000000ull   /* for a connection under way */
#define ANSWER_WAIT_NS 2000000000ull    /* for the server's answer */
#define LIMITED_RETRY_NS 50000000ull    /* after a LIMITED answer */
#define LIMITED_TRIES 20
#define MAX_GPUS 64
#define MAX_WAITING 16

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    nvmlDevice_t dev;
    uint8_t uuid[16];
} handles[MAX_GPUS];            /* guarded by cache_lock */
static unsigned nhandles;
static struct {
    uint8_t uuid[16];
    struct gs_nvml_usage usage;  /* usage.at == 0: none yet */
} answers[MAX_GPUS];            /* guarded by cache_lock */
static unsigned nanswers;

/* Requests waiting for their USAGE; guarded by gs_gate_lock. */
static struct {
    uint64_t id;                 /* 0: free */
    bool done;
    struct gs_msg_usage usage;
} waiting[MAX_WAITING];
static uint64_t next_id;         /* guarded by gs_gate_lock */

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
    pthread_mutex_lock(&cache_lock);
    for (unsigned i = 0; i < nhandles; i++)
        if (handles[i].dev == dev) {
            memcpy(uuid, handles[i].uuid, 16);
            pthread_mutex_unlock(&cache_lock);
            return true;
        }
    pthread_mutex_unlock(&cache_lock);
    char text[96] = "";
    if (!gs_nvml_real[GS_NVML_IDX_nvmlDeviceGetUUID] ||
        GS_NVML_REAL(nvmlDeviceGetUUID)(dev, text, sizeof text) != NVML_SUCCESS || !parse_uuid(text, uuid))
        return false;
    pthread_mutex_lock(&cache_lock);
    if (nhandles < MAX_GPUS) {
        handles[nhandles].dev = dev;
        memcpy(handles[nhandles].uuid, uuid, 16);
        nhandles++;
    }
    pthread_mutex_unlock(&cache_lock);
    return true;
}

/* The cached answer for uuid (any age); false if none. */
static bool cached(const uint8_t uuid[16], struct gs_nvml_usage *out)
{
    bool found = false;
    pthread_mutex_lock(&cache_lock);
    for (unsigned i = 0; i < nanswers && !found; i++)
        if (memcmp(answers[i].uuid, uuid, 16) == 0 && answers[i].usage.at) {
            *out = answers[i].usage;
            found = true;
        }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

static void remember(const uint8_t uuid[16], const struct gs_nvml_usage *usage)
{
    pthread_mutex_lock(&cache_lock);
    unsigned i = 0;
    while (i < nanswers && memcmp(answers[i].uuid, uuid, 16) != 0)
        i++;
    if (i == nanswers && nanswers < MAX_GPUS)
        memcpy(answers[nanswers++].uuid, uuid, 16);
    if (i < nanswers)
        answers[i].usage = *usage;
    pthread_mutex_unlock(&cache_lock);
}

void gs_nvml_usage_arrived_locked(const struct gs_msg_usage *u)
{
    for (int i = 0; i < MAX_WAITING; i++)
        if (u->id && waiting[i].id == u->id && !waiting[i].done) {
            waiting[i].usage = *u;
            waiting[i].done = true;
            pthread_cond_broadcast(&gs_gate_cv);
        }
}

/* One USAGE_QUERY: 0 answered, -1 no server (or none in time). */
static int ask(const uint8_t uuid[16], struct gs_msg_usage *out)
{
    int rc = -1, slot = -1;
    pthread_mutex_lock(&gs_gate_lock);
    for (;;) { /* MAX_WAITING threads ask at once: wait for a free entry */
        for (int i = 0; i < MAX_WAITING && slot < 0; i++)
            if (waiting[i].id == 0)
                slot = i;
        if (slot >= 0)
            break;
        pthread_mutex_unlock(&gs_gate_lock);
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&gs_gate_lock);
    }
    uint64_t id = ++next_id;
    waiting[slot].id = id;
    waiting[slot].done = false;
    struct gs_msg m = {.type = GS_MSG_USAGE_QUERY};
    m.u.usage_query.id = id;
    memcpy(m.u.usage_query.uuid, uuid, 16);
    if (gs_client_send_connected_locked(&m, CONNECT_WAIT_NS) == 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(ANSWER_WAIT_NS / 1000000000ull);
        while (!waiting[slot].done && gs_client_connected_locked())
            if (pthread_cond_timedwait(&gs_gate_cv, &gs_gate_lock, &until) == ETIMEDOUT)
                break;
        if (waiting[slot].done) {
            *out = waiting[slot].usage;
            rc = 0;
        }
    }
    waiting[slot].id = 0;
    pthread_mutex_unlock(&gs_gate_lock);
    return rc;
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
        if (ask(uuid, &u) != 0)
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
     * which is the child's too; only the locks' state is not. */
    pthread_mutex_init(&cache_lock, NULL);
    memset(waiting, 0, sizeof waiting);
}
