/*
 * The NVML wrappers (gs_nvml_entries.h): inside a tenant, what NVML says
 * about a GPU is the tenant's own truth, from gpuslice-server's figures
 * (gs_nvml_usage.c):
 *
 *   memory       total = min(cap, physical total), used = the tenant's
 *                count there, free = min(cap - used, physically free);
 *                v2's `reserved` (the driver's own) is 0
 *   processes    compute: the tenant's processes on the GPU, each with the
 *                memory the server counts for it; graphics, MPS, accounting,
 *                encoder and frame-capture sessions: NVML's own list,
 *                keeping only the tenant's pids (compute memory as counted)
 *   utilization  gpu: the tenant's share of device time over the server's
 *                last second; memory: the device's figure scaled by the
 *                tenant's part of the busy time; per-process samples: the
 *                tenant's processes' own
 *   names        nvmlSystemGetProcessName answers for the tenant's pids only
 *
 * Each wrapper calls the real function first, with the application's own
 * arguments or an equivalent probe, and returns its error unchanged, so
 * that a bad handle, a wrong struct version or an uninitialized library
 * is reported as NVML reports it. No server (not in a tenant): the real
 * answer, unchanged. Lists are read into a buffer of the shim's own and
 * filtered before anything reaches the application, so its counts never
 * tell how many processes other tenants have.
 */
#include "gs_log.h"
#include "gs_nvml.h"

#include <stdlib.h>
#include <string.h>

#define NVML_PROLOGUE(name)                                            \
    nvmlReturn_t gs_rc = gs_nvml_init(NULL);                           \
    if (gs_rc != NVML_SUCCESS)                                         \
        return gs_rc;                                                  \
    if (!gs_nvml_real[GS_NVML_IDX_##name])                             \
        return NVML_ERROR_FUNCTION_NOT_FOUND;                          \
    GS_DEBUG("intercepted %s", #name)

/* The tenant's figures for dev: true in a tenant (then *rc is what to
 * return if not NVML_SUCCESS); false with no server. */
static bool tenant_view(nvmlDevice_t dev, struct gs_nvml_usage *usage, nvmlReturn_t *rc)
{
    return gs_nvml_usage(dev, usage, rc);
}

static const struct gs_usage_proc *find_proc(const struct gs_msg_usage *u, unsigned int pid)
{
    for (uint32_t i = 0; i < u->nprocs; i++)
        if (u->procs[i].pid == pid)
            return &u->procs[i];
    return NULL;
}

/* ---- memory ----------------------------------------------------------------- */

static void tenant_memory(const struct gs_msg_usage *u, unsigned long long *total, unsigned long long *free_bytes,
                          unsigned long long *used)
{
    uint64_t cap = u->cap ? u->cap : UINT64_MAX;
    uint64_t t = cap < *total ? cap : *total;
    uint64_t room = cap > u->used ? cap - u->used : 0;
    *total = t;
    if (room < *free_bytes)
        *free_bytes = room;
    *used = u->used;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, gs_nvmlMemory_t *memory)
{
    NVML_PROLOGUE(nvmlDeviceGetMemoryInfo);
    nvmlReturn_t rc = GS_NVML_REAL(nvmlDeviceGetMemoryInfo)(dev, memory);
    struct gs_nvml_usage usage;
    nvmlReturn_t urc;
    if (rc != NVML_SUCCESS || !tenant_view(dev, &usage, &urc))
        return rc;
    if (urc != NVML_SUCCESS)
        return urc;
    tenant_memory(&usage.u, &memory->total, &memory->free, &memory->used);
    return rc;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, gs_nvmlMemory_v2_t *memory)
{
    NVML_PROLOGUE(nvmlDeviceGetMemoryInfo_v2);
    nvmlReturn_t rc = GS_NVML_REAL(nvmlDeviceGetMemoryInfo_v2)(dev, memory);
    struct gs_nvml_usage usage;
    nvmlReturn_t urc;
    if (rc != NVML_SUCCESS || !tenant_view(dev, &usage, &urc))
        return rc;
    if (urc != NVML_SUCCESS)
        return urc;
    tenant_memory(&usage.u, &memory->total, &memory->free, &memory->used);
    memory->reserved = 0;
    return rc;
}

/* ---- lists --------------------------------------------------------------------- */

/* One of NVML's list calls, with the application's other arguments in ctx:
 * fills up to *count elements of buf (NULL: only counts) and sets *count. */
typedef nvmlReturn_t (*list_fn)(void *ctx, unsigned int *count, void *buf);

struct list_shape {
    size_t elem;             /* bytes per element */
    size_t pid_offset;       /* of its unsigned int pid */
    size_t memory_offset;    /* of its unsigned long long memory; 0: none */
    bool zero_counts;        /* *count == 0 asks for the count (NVML_SUCCESS) */
    nvmlReturn_t none;       /* what an empty list returns */
};

/* Copies the kept elements out with NVML's conventions for counts. */
static nvmlReturn_t hand_out(const struct list_shape *s, const void *kept, unsigned int n, unsigned int *count,
                             void *out)
{
    if (s->zero_counts && *count == 0) {
        *count = n;
        return NVML_SUCCESS;
    }
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n && !out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (n)
        memcpy(out, kept, (size_t)n * s->elem);
    *count = n;
    return n ? NVML_SUCCESS : s->none;
}

/* NVML's list, read into a buffer of the shim's own and cut to the
 * tenant's pids; with no server, the call itself. */
static nvmlReturn_t filtered_list(nvmlDevice_t dev, list_fn fn, void *ctx, const struct list_shape *s,
                                  unsigned int *count, void *out)
{
    if (!count)
        return fn(ctx, count, out);
    unsigned int n = 0;
    nvmlReturn_t rc = fn(ctx, &n, NULL);
    struct gs_nvml_usage usage;
    nvmlReturn_t urc;
    if ((rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) || !tenant_view(dev, &usage, &urc))
        return fn(ctx, count, out);
    if (urc != NVML_SUCCESS)
        return urc;
    unsigned char *buf = NULL;
    unsigned int got = 0;
    for (int tries = 0; n > 0; tries++) {
        free(buf);
        got = n + 8; /* room for a few that start meanwhile */
        if (!(buf = calloc(got, s->elem)))
            return NVML_ERROR_MEMORY;
        rc = fn(ctx, &got, buf);
        if (rc == NVML_ERROR_INSUFFICIENT_SIZE && tries < 3) {
            n = got;
            continue;
        }
        if (rc != NVML_SUCCESS)
            got = 0;
        break;
    }
    unsigned int kept = 0;
    for (unsigned int i = 0; i < got; i++) {
        unsigned char *e = buf + (size_t)i * s->elem;
        unsigned int pid;
        memcpy(&pid, e + s->pid_offset, sizeof pid);
        const struct gs_usage_proc *p = find_proc(&usage.u, pid);
        if (!p)
            continue;
        if (s->memory_offset) {
            unsigned long long bytes = p->bytes;
            memcpy(e + s->memory_offset, &bytes, sizeof bytes);
        }
        memmove(buf + (size_t)kept * s->elem, e, s->elem);
        kept++;
    }
    rc = hand_out(s, buf, kept, count, out);
    free(buf);
    return rc;
}

/* The compute list, made from the server's: the tenant's processes. */
static nvmlReturn_t compute_list(nvmlDevice_t dev, list_fn fn, void *ctx, size_t elem, bool v1, unsigned int *count,
                                 void *out)
{
    if (!count)
        return fn(ctx, count, out);
    unsigned int n = 0;
    nvmlReturn_t rc = fn(ctx, &n, NULL);
    struct gs_nvml_usage usage;
    nvmlReturn_t urc;
    if ((rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) || !tenant_view(dev, &usage, &urc))
        return fn(ctx, count, out);
    if (urc != NVML_SUCCESS)
        return urc;
    gs_nvmlProcessInfo_v2_t made[GS_USAGE_MAX_PROCS];
    gs_nvmlProcessInfo_v1_t made_v1[GS_USAGE_MAX_PROCS];
    memset(made, 0, sizeof made);
    memset(made_v1, 0, sizeof made_v1);
    for (uint32_t i = 0; i < usage.u.nprocs; i++) {
        made[i].pid = made_v1[i].pid = usage.u.procs[i].pid;
        made[i].usedGpuMemory = made_v1[i].usedGpuMemory = usage.u.procs[i].bytes;
        made[i].gpuInstanceId = made[i].computeInstanceId = 0xFFFFFFFFu; /* not MIG */
    }
    struct list_shape s = {.elem = elem, .none = NVML_SUCCESS};
    return hand_out(&s, v1 ? (const void *)made_v1 : (const void *)made, usage.u.nprocs, count, out);
}

#define PROCESS_LIST(name, type, computed)                                                    \
    static nvmlReturn_t call_##name(void *ctx, unsigned int *count, void *buf)                \
    {                                                                                         \
        return GS_NVML_REAL(name)(*(nvmlDevice_t *)ctx, count, buf);                          \
    }                                                                                         \
    GS_EXPORT nvmlReturn_t name(nvmlDevice_t dev, unsigned int *count, type *infos)           \
    {                                                                                         \
        NVML_PROLOGUE(name);                                                                  \
        static const struct list_shape shape = {sizeof(type), offsetof(type, pid),            \
                                                offsetof(type, usedGpuMemory), false, 0};     \
        if (computed)                                                                         \
            return compute_list(dev, call_##name, &dev, sizeof(type),                         \
                                sizeof(type) == sizeof(gs_nvmlProcessInfo_v1_t), count, infos); \
        return filtered_list(dev, call_##name, &dev, &shape, count, infos);                   \
    }

PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, gs_nvmlProcessInfo_v1_t, true)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, gs_nvmlProcessInfo_v2_t, true)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, gs_nvmlProcessInfo_v2_t, true)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, gs_nvmlProcessInfo_v1_t, false)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, gs_nvmlProcessInfo_v2_t, false)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, gs_nvmlProcessInfo_v2_t, false)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, gs_nvmlProcessInfo_v1_t, false)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, gs_nvmlProcessInfo_v2_t, false)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, gs_nvmlProcessInfo_v2_t, false)

/* nvmlDeviceGetRunningProcessDetailList: the list struct carries the
 * count, the array and the mode. */
struct detail_ctx {
    nvmlDevice_t dev;
    const gs_nvmlProcessDetailList_t *list;
};

static nvmlReturn_t call_detail(void *arg, unsigned int *count, void *buf)
{
    const struct detail_ctx *ctx = arg;
    gs_nvmlProcessDetailList_t copy = *ctx->list;
    copy.numProcArrayEntries = *count;
    copy.procArray = buf;
    nvmlReturn_t rc = GS_NVML_REAL(nvmlDeviceGetRunningProcessDetailList)(ctx->dev, &copy);
    *count = copy.numProcArrayEntries;
    return rc;
}

static void fill_details(const struct gs_msg_usage *u, gs_nvmlProcessDetail_v1_t *out)
{
    for (uint32_t i = 0; i < u->nprocs; i++)
        out[i] = (gs_nvmlProcessDetail_v1_t){.pid = u->procs[i].pid, .usedGpuMemory = u->procs[i].bytes,
                                              .gpuInstanceId = 0xFFFFFFFFu, .computeInstanceId = 0xFFFFFFFFu};
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t dev, gs_nvmlProcessDetailList_t *list)
{
    NVML_PROLOGUE(nvmlDeviceGetRunningProcessDetailList);
    if (!list)
        return GS_NVML_REAL(nvmlDeviceGetRunningProcessDetailList)(dev, list);
    struct detail_ctx ctx = {dev, list};
    static const struct list_shape shape = {sizeof(gs_nvmlProcessDetail_v1_t),
                                            offsetof(gs_nvmlProcessDetail_v1_t, pid),
                                            offsetof(gs_nvmlProcessDetail_v1_t, usedGpuMemory), false, 0};
    unsigned int count = list->numProcArrayEntries;
    nvmlReturn_t rc;
    if (list->mode == GS_NVML_PROCESS_MODE_COMPUTE) {
        unsigned int n = 0;
        struct gs_nvml_usage usage;
        nvmlReturn_t urc;
        rc = call_detail(&ctx, &n, NULL);
        if ((rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) || !tenant_view(dev, &usage, &urc))
            return GS_NVML_REAL(nvmlDeviceGetRunningProcessDetailList)(dev, list);
        if (urc != NVML_SUCCESS)
            return urc;
        gs_nvmlProcessDetail_v1_t made[GS_USAGE_MAX_PROCS];
        fill_details(&usage.u, made);
        rc = hand_out(&shape, made, usage.u.nprocs, &count, list->procArray);
    } else {
        rc = filtered_list(dev, call_detail, &ctx, &shape, &count, list->procArray);
    }
    list->numProcArrayEntries = count;
    return rc;
}

/* ---- other views of processes ------------------------------------------------- */

static nvmlReturn_t call_accounting_pids(void *ctx, unsigned int *count, void *buf)
{
    return GS_NVML_REAL(nvmlDeviceGetAccountingPids)(*(nvmlDevice_t *)ctx, count, buf);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t dev, unsigned int *count, unsigned int *pids)
{
    NVML_PROLOGUE(nvmlDeviceGetAccountingPids);
    static const struct list_shape shape = {sizeof(unsigned int), 0, 0, false, 0};
    return filtered_list(dev, call_accounting_pids, &dev, &shape, count, pids);
}

/* Whether pid may be asked about on dev: in a tenant, only its own. */
static nvmlReturn_t own_pid(nvmlDevice_t dev, unsigned int pid)
{
    struct gs_nvml_usage usage;
    nvmlReturn_t urc;
    if (!tenant_view(dev, &usage, &urc))
        return NVML_SUCCESS;
    if (urc != NVML_SUCCESS)
        return urc;
    return find_proc(&usage.u, pid) ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t dev, unsigned int pid, gs_nvmlAccountingStats_t *stats)
{
    NVML_PROLOGUE(nvmlDeviceGetAccountingStats);
    nvmlReturn_t rc = GS_NVML_REAL(nvmlDeviceGetAccountingStats)(dev, pid, stats);
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_FOUND)
        return rc;
    nvmlReturn_t own = own_pid(dev, pid);
    return own != NVML_SUCCESS ? own : rc;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetAccountingStats_v2(nvmlDevice_t dev, gs_nvmlAccountingStats_v2_head_t *stats)
{
    NVML_PROLOGUE(nvmlDeviceGetAccountingStats_v2);
    unsigned int pid = stats ? stats->pid : 0;
    nvmlReturn_t rc = GS_NVML_REAL(nvmlDeviceGetAccountingStats_v2)(dev, stats);
    if (!stats || (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_FOUND))
        return rc;
    nvmlReturn_t own = own_pid(dev, pid);
    return own != NVML_SUCCESS ? own : rc;
}

GS_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    NVML_PROLOGUE(nvmlSystemGetProcessName);
    nvmlReturn_t rc = GS_NVML_REAL(nvmlSystemGetProcessName)(pid, name, length);
    if (rc != NVML_SUCCESS || gs_nvml_pid_is_tenants(pid))
        return rc;
    if (name && length)
        name[0] = '\0';
    return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t call_encoder(void *ctx, unsigned int *count, void *buf)
{
    return GS_NVML_REAL(nvmlDeviceGetEncoderSessions)(*(nvmlDevice_t *)ctx, count, buf);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetEncoderSessions(nvmlDevice_t dev, unsigned int *count,
                                                    gs_nvmlEncoderSessionInfo_t *infos)
{
    NVML_PROLOGUE(nvmlDeviceGetEncoderSessions);
    static const struct list_shape shape = {sizeof(gs_nvmlEncoderSessionInfo_t),
                                            offsetof(gs_nvmlEncoderSessionInfo_t, pid), 0, true, 0};
    return filtered_list(dev, call_encoder, &dev, &shape, count, infos);
}

static nvmlReturn_t call_fbc(void *ctx, unsigned int *count, void *buf)
{
    return GS_NVML_REAL(nvmlDeviceGetFBCSessions)(*(nvmlDevice_t *)ctx, count, buf);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetFBCSessions(nvmlDevice_t dev, unsigned int *count, gs_nvmlFBCSessionInfo_t *infos)
{
    NVML_PROLOGUE(nvmlDeviceGetFBCSessions);
    static const struct list_shape shape = {sizeof(gs_nvmlFBCSessionInfo_t), offsetof(gs_nvmlFBCSessionInfo_t, pid), 0,
                                            true, 0};
    return filtered_list(dev, call_fbc, &dev, &shape, count, infos);
}

/* ---- utilization ----------------------------------------------------------------- */

GS_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, gs_nvmlUtilization_t *util)
{
    NVML_PROLOGUE(nvmlDeviceGetUtilizationRates);
    nvmlReturn_t rc = GS_NVML_REAL(nvmlDeviceGetUtilizationRates)(dev, util);
    struct gs_nvml_usage usage;
    nvmlReturn_t urc;
    if (rc != NVML_SUCCESS || !tenant_view(dev, &usage, &urc))
        return rc;
    if (urc != NVML_SUCCESS)
        return urc;
    const struct gs_msg_usage *u = &usage.u;
    unsigned int gpu = u->window_ns ? (unsigned int)((200 * u->busy_ns / u->window_ns + 1) / 2) : 0;
    if (gpu > 100)
        gpu = 100;
    /* Memory traffic is the device's: the tenant's part of it is taken to be
     * its part of the time the device was busy. */
    unsigned int memory = 0;
    if (util->gpu > 0) {
        unsigned long long scaled = ((unsigned long long)util->memory * gpu + util->gpu / 2) / util->gpu;
        memory = scaled < util->memory ? (unsigned int)scaled : util->memory;
    }
    util->gpu = gpu;
    util->memory = memory;
    return rc;
}

struct samples_ctx {
    nvmlDevice_t dev;
    unsigned long long last_seen;
};

static nvmlReturn_t call_samples(void *arg, unsigned int *count, void *buf)
{
    const struct samples_ctx *ctx = arg;
    return GS_NVML_REAL(nvmlDeviceGetProcessUtilization)(ctx->dev, buf, count, ctx->last_seen);
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t dev, gs_nvmlProcessUtilizationSample_t *samples,
                                                       unsigned int *count, unsigned long long last_seen)
{
    NVML_PROLOGUE(nvmlDeviceGetProcessUtilization);
    struct samples_ctx ctx = {dev, last_seen};
    static const struct list_shape shape = {sizeof(gs_nvmlProcessUtilizationSample_t),
                                            offsetof(gs_nvmlProcessUtilizationSample_t, pid), 0, false,
                                            NVML_ERROR_NOT_FOUND};
    return filtered_list(dev, call_samples, &ctx, &shape, count, samples);
}

struct infos_ctx {
    nvmlDevice_t dev;
    const gs_nvmlProcessesUtilizationInfo_t *info;
};

static nvmlReturn_t call_infos(void *arg, unsigned int *count, void *buf)
{
    const struct infos_ctx *ctx = arg;
    gs_nvmlProcessesUtilizationInfo_t copy = *ctx->info;
    copy.processSamplesCount = *count;
    copy.procUtilArray = buf;
    nvmlReturn_t rc = GS_NVML_REAL(nvmlDeviceGetProcessesUtilizationInfo)(ctx->dev, &copy);
    *count = copy.processSamplesCount;
    return rc;
}

GS_EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t dev, gs_nvmlProcessesUtilizationInfo_t *info)
{
    NVML_PROLOGUE(nvmlDeviceGetProcessesUtilizationInfo);
    if (!info)
        return GS_NVML_REAL(nvmlDeviceGetProcessesUtilizationInfo)(dev, info);
    struct infos_ctx ctx = {dev, info};
    static const struct list_shape shape = {sizeof(gs_nvmlProcessUtilizationInfo_v1_t),
                                            offsetof(gs_nvmlProcessUtilizationInfo_v1_t, pid), 0, false,
                                            NVML_ERROR_NOT_FOUND};
    unsigned int count = info->processSamplesCount;
    nvmlReturn_t rc = filtered_list(dev, call_infos, &ctx, &shape, &count, info->procUtilArray);
    info->processSamplesCount = count;
    return rc;
}
