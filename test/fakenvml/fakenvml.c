/*
 * fakenvml: a simulated NVML (libnvidia-ml.so.1) that answers from
 * fakecuda's state file (FAKECUDA_STATE): the simulated GPUs' UUIDs and
 * memory, the processes that hold memory or ran kernels on them, and
 * fakecuda's meter of device time. Each function imitates the part of
 * NVIDIA's NVML API Reference that README.md names for it. Test code only.
 *
 * The NVML types are declared here, laid out as the NVML API Reference
 * defines them (the shim declares its own: nothing in test/ is shared with
 * it but behaviour).
 */
#include "fc_state.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24U))

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;
typedef struct {
    unsigned int version, mode, numProcArrayEntries;
    nvmlProcessDetail_v1_t *procArray;
} nvmlProcessDetailList_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/* A device handle is the address of one of these. */
struct nvmlDevice_st {
    int index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static struct nvmlDevice_st handles[FC_MAX_DEVICES];
static struct fc_shared *state;
/* nvmlInit calls not yet matched by nvmlShutdown (NVML counts them). */
static _Atomic int init_count;

static bool parse_bytes(const char *text, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text)
        return false;
    int shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    *out = (uint64_t)v << shift;
    return *end == '\0' || strcmp(end, "iB") == 0 || strcmp(end, "B") == 0;
}

static nvmlReturn_t open_state(void)
{
    if (state)
        return NVML_SUCCESS;
    uint64_t devices = 1, memory = 16ull << 30;
    const char *d = getenv("FAKECUDA_DEVICES"), *m = getenv("FAKECUDA_MEMORY");
    if (d && (!parse_bytes(d, &devices) || devices < 1 || devices > FC_MAX_DEVICES))
        devices = 1;
    if (m && !parse_bytes(m, &memory))
        memory = 16ull << 30;
    char err[256];
    state = fc_state_open(getenv("FAKECUDA_STATE"), (int)devices, memory, err, sizeof err);
    if (!state) {
        fprintf(stderr, "fakenvml: %s\n", err);
        return NVML_ERROR_UNKNOWN;
    }
    for (int i = 0; i < FC_MAX_DEVICES; i++)
        handles[i].index = i;
    return NVML_SUCCESS;
}

static nvmlReturn_t check(nvmlDevice_t dev)
{
    if (atomic_load(&init_count) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!dev || dev < handles || dev >= handles + state->ndevices || dev != &handles[dev->index])
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static uint64_t now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The meter's window: since its last reset (or the state's creation). */
static uint64_t window_ns(void)
{
    uint64_t since = atomic_load(&state->reset_ns);
    if (!since)
        since = state->created_ns;
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    return now > since ? now - since : 1;
}

/* ---- initialization ---------------------------------------------------------- */

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    nvmlReturn_t rc = open_state();
    if (rc == NVML_SUCCESS)
        atomic_fetch_add(&init_count, 1);
    return rc;
}

API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

API nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

API nvmlReturn_t nvmlShutdown(void)
{
    int n = atomic_load(&init_count);
    while (n > 0 && !atomic_compare_exchange_weak(&init_count, &n, n - 1))
        ;
    return n > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

API const char *nvmlErrorString(nvmlReturn_t rc)
{
    switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *text)
{
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (atomic_load(&init_count) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    /* FAKENVML_DRIVER_VERSION stands for a real driver's ("580.95.05"). */
    const char *simulated = getenv("FAKENVML_DRIVER_VERSION");
    return copy_string(version, length, simulated && *simulated ? simulated : "fakecuda");
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return copy_string(version, length, "fakenvml");
}

/* ---- devices -------------------------------------------------------------------- */

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (atomic_load(&init_count) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = state->ndevices;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
    return nvmlDeviceGetCount_v2(count);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev)
{
    if (atomic_load(&init_count) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!dev || index >= state->ndevices)
        return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &handles[index];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *dev)
{
    return nvmlDeviceGetHandleByIndex_v2(index, dev);
}

static void uuid_text(int index, char out[48])
{
    const uint8_t *u = state->dev[index].uuid;
    snprintf(out, 48, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    char text[48];
    uuid_text(dev->index, text);
    return copy_string(uuid, length, text);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev)
{
    if (atomic_load(&init_count) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !dev)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < state->ndevices; i++) {
        char text[48];
        uuid_text((int)i, text);
        if (strcmp(text, uuid) == 0) {
            *dev = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length)
{
    nvmlReturn_t rc = check(dev);
    return rc != NVML_SUCCESS ? rc : copy_string(name, length, "fakecuda GPU");
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)dev->index;
    return NVML_SUCCESS;
}

/* ---- memory ---------------------------------------------------------------------- */

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *memory)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    fc_state_lock(state);
    fc_state_reap_locked(state);
    const struct fc_device_state *d = &state->dev[dev->index];
    memory->total = d->total_mem;
    memory->used = d->used_mem;
    memory->free = d->total_mem - d->used_mem;
    fc_state_unlock(state);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2))
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlMemory_t m;
    nvmlDeviceGetMemoryInfo(dev, &m);
    memory->total = m.total;
    memory->reserved = 0;
    memory->free = m.free;
    memory->used = m.used;
    return NVML_SUCCESS;
}

/* ---- processes --------------------------------------------------------------------- */

struct proc {
    unsigned int pid;
    uint64_t mem, busy_ns;
};

/* The live processes that hold memory on, or ran kernels on, the device;
 * at most FC_MAX_PROCS. */
static unsigned processes(int index, struct proc *out)
{
    unsigned n = 0;
    fc_state_lock(state);
    fc_state_reap_locked(state);
    for (int i = 0; i < FC_MAX_PROCS; i++) {
        const struct fc_proc_slot *p = &state->procs[i];
        if (!p->alive || !fc_slot_alive(state, i))
            continue;
        uint64_t busy = atomic_load(&p->busy_ns[index]);
        if (p->mem_used[index] == 0 && busy == 0)
            continue;
        out[n++] = (struct proc){(unsigned int)p->pid, p->mem_used[index], busy};
    }
    fc_state_unlock(state);
    return n;
}

static nvmlReturn_t list(nvmlDevice_t dev, unsigned int *count, void *infos, int version)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    static struct proc procs[FC_MAX_PROCS];
    unsigned n = version < 0 ? 0 : processes(dev->index, procs); /* graphics, MPS: none */
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < n; i++) {
        if (version == 1) {
            ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){procs[i].pid, procs[i].mem};
        } else {
            ((nvmlProcessInfo_v2_t *)infos)[i] =
                (nvmlProcessInfo_v2_t){procs[i].pid, procs[i].mem, 0xFFFFFFFFu, 0xFFFFFFFFu};
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_v1_t *infos)
{
    return list(dev, count, infos, 1);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int *count,
                                                         nvmlProcessInfo_v2_t *infos)
{
    return list(dev, count, infos, 2);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                         nvmlProcessInfo_v2_t *infos)
{
    return list(dev, count, infos, 3);
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                          nvmlProcessInfo_v2_t *infos)
{
    return list(dev, count, infos, -1);
}

API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                            nvmlProcessInfo_v2_t *infos)
{
    return list(dev, count, infos, -1);
}

API nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t dev, nvmlProcessDetailList_v1_t *plist)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!plist)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (plist->version != NVML_STRUCT_VERSION(sizeof(nvmlProcessDetailList_v1_t), 1))
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (plist->mode > 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    static struct proc procs[FC_MAX_PROCS];
    unsigned n = plist->mode == 1 || plist->mode == 2 ? 0 : processes(dev->index, procs);
    if (plist->numProcArrayEntries < n) {
        plist->numProcArrayEntries = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n && !plist->procArray)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < n; i++)
        plist->procArray[i] = (nvmlProcessDetail_v1_t){procs[i].pid, procs[i].mem, 0xFFFFFFFFu, 0xFFFFFFFFu, 0};
    plist->numProcArrayEntries = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    if (atomic_load(&init_count) <= 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!name || length == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    char path[64], comm[256];
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NVML_ERROR_NOT_FOUND;
    if (!fgets(comm, sizeof comm, f))
        comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    snprintf(name, length, "%s", comm);
    return NVML_SUCCESS;
}

/* ---- utilization ------------------------------------------------------------------- */

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *util)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!util)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t busy = atomic_load(&state->dev[dev->index].busy_ns), wall = window_ns();
    uint64_t copy = atomic_load(&state->dev[dev->index].copy_busy_ns);
    util->gpu = (unsigned int)(busy >= wall ? 100 : (200 * busy / wall + 1) / 2);
    util->memory = (unsigned int)(copy >= wall ? 100 : (200 * copy / wall + 1) / 2);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t dev, nvmlProcessUtilizationSample_t *samples,
                                                 unsigned int *count, unsigned long long last_seen)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    static struct proc procs[FC_MAX_PROCS];
    unsigned n = processes(dev->index, procs), kept = 0;
    unsigned long long stamp = now_ns(CLOCK_REALTIME) / 1000;
    uint64_t wall = window_ns();
    for (unsigned i = 0; i < n; i++)
        if (procs[i].busy_ns && stamp > last_seen)
            procs[kept++] = procs[i];
    if (kept == 0)
        return NVML_ERROR_NOT_FOUND;
    if (!samples || *count < kept) {
        *count = kept;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < kept; i++) {
        unsigned int sm = (unsigned int)(procs[i].busy_ns >= wall ? 100 : 100 * procs[i].busy_ns / wall);
        samples[i] = (nvmlProcessUtilizationSample_t){procs[i].pid, stamp, sm, 0, 0, 0};
    }
    *count = kept;
    return NVML_SUCCESS;
}

/* ---- what a GPU without graphics, MPS, accounting or video sessions says ---- */

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_v1_t *infos)
{
    return list(dev, count, infos, -1);
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t dev, unsigned int *count,
                                                          nvmlProcessInfo_v2_t *infos)
{
    return list(dev, count, infos, -1);
}

API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t dev, unsigned int *count,
                                                         nvmlProcessInfo_v1_t *infos)
{
    return list(dev, count, infos, -1);
}

API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int *count,
                                                            nvmlProcessInfo_v2_t *infos)
{
    return list(dev, count, infos, -1);
}

/* Accounting mode is off, as it is by default: NVML_ERROR_NOT_SUPPORTED. */
API nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t dev, unsigned int *count, unsigned int *pids)
{
    (void)pids;
    nvmlReturn_t rc = check(dev);
    return rc != NVML_SUCCESS ? rc : !count ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t dev, unsigned int pid, void *stats)
{
    (void)pid;
    nvmlReturn_t rc = check(dev);
    return rc != NVML_SUCCESS ? rc : !stats ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlDeviceGetAccountingStats_v2(nvmlDevice_t dev, void *stats)
{
    nvmlReturn_t rc = check(dev);
    return rc != NVML_SUCCESS ? rc : !stats ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
}

/* No encoder or frame-capture sessions: *count 0 asks for the count. */
static nvmlReturn_t no_sessions(nvmlDevice_t dev, unsigned int *count)
{
    nvmlReturn_t rc = check(dev);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetEncoderSessions(nvmlDevice_t dev, unsigned int *count, void *infos)
{
    (void)infos;
    return no_sessions(dev, count);
}

API nvmlReturn_t nvmlDeviceGetFBCSessions(nvmlDevice_t dev, unsigned int *count, void *infos)
{
    (void)infos;
    return no_sessions(dev, count);
}

API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t dev, void *info)
{
    nvmlReturn_t rc = check(dev);
    return rc != NVML_SUCCESS ? rc : !info ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
}
