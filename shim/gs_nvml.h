/*
 * NVML (libnvidia-ml.so.1) behind libgpuslice.so: the few NVML types the
 * shim needs, the table of the real library's functions, and what the
 * NVML files of the shim share (gs_nvml.c loads and maps, gs_nvml_usage.c
 * asks the server, gs_nvml_wrappers.c answers).
 *
 * The types are declared here, not taken from nvml.h: the CUDA toolkit the
 * shim builds against need not ship nvml.h, and the shim depends on the
 * CUDA headers only. Each is laid out as NVIDIA's NVML API Reference
 * (docs.nvidia.com/deploy/nvml-api, "Device Queries" and "Device
 * Structs") defines it; the comment on each names its struct there. Only
 * the fields the shim reads or writes are named.
 */
#ifndef GPUSLICE_NVML_H
#define GPUSLICE_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gs_driver.h"
#include "gpuslice/protocol.h"

/* nvmlReturn_t: the codes the shim returns itself (NVML API Reference,
 * "Error reporting"); every other code is the real library's. */
typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_LIBRARY_NOT_FOUND 12
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_MEMORY 20

typedef struct nvmlDevice_st *nvmlDevice_t;

/* nvmlMemory_t */
typedef struct {
    unsigned long long total, free, used;
} gs_nvmlMemory_t;

/* nvmlMemory_v2_t */
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} gs_nvmlMemory_v2_t;

/* nvmlUtilization_t */
typedef struct {
    unsigned int gpu, memory;
} gs_nvmlUtilization_t;

/* nvmlProcessInfo_v1_t */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} gs_nvmlProcessInfo_v1_t;

/* nvmlProcessInfo_v2_t, which is also nvmlProcessInfo_t, the struct of
 * the _v3 functions */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} gs_nvmlProcessInfo_v2_t;

/* nvmlProcessDetail_v1_t and nvmlProcessDetailList_v1_t */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} gs_nvmlProcessDetail_v1_t;
typedef struct {
    unsigned int version, mode, numProcArrayEntries;
    gs_nvmlProcessDetail_v1_t *procArray;
} gs_nvmlProcessDetailList_t;
#define GS_NVML_PROCESS_MODE_COMPUTE 0

/* nvmlProcessUtilizationSample_t */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} gs_nvmlProcessUtilizationSample_t;

/* nvmlProcessUtilizationInfo_v1_t and nvmlProcessesUtilizationInfo_v1_t */
typedef struct {
    unsigned long long timeStamp;
    unsigned int pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} gs_nvmlProcessUtilizationInfo_v1_t;
typedef struct {
    unsigned int version, processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    gs_nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} gs_nvmlProcessesUtilizationInfo_t;

/* nvmlAccountingStats_t (the shim only passes it on) and
 * nvmlAccountingStats_v2_t, whose first field is the pid asked about */
typedef struct nvmlAccountingStats_st gs_nvmlAccountingStats_t;
typedef struct {
    unsigned int pid;
} gs_nvmlAccountingStats_v2_head_t;

/* nvmlEncoderSessionInfo_t and nvmlFBCSessionInfo_t: sessionId, then pid */
typedef struct {
    unsigned int sessionId, pid, vgpuInstance, codecType, hResolution, vResolution, averageFps, averageLatency;
} gs_nvmlEncoderSessionInfo_t;
typedef struct {
    unsigned int sessionId, pid, vgpuInstance, displayOrdinal, sessionType, sessionFlags, hMaxResolution,
        vMaxResolution, hResolution, vResolution, averageFPS, averageLatency;
} gs_nvmlFBCSessionInfo_t;

/* The NVML entries, from gs_nvml_entries.h. */
#define GS_NVML_ENTRY(name, params, wrapped) GS_NVML_IDX_##name,
enum gs_nvml_index {
#include "gs_nvml_entries.h"
    GS_NVML_COUNT
};
#define GS_NVML_ENTRY(name, params, wrapped) typedef nvmlReturn_t (*gs_nvml_fn_##name) params;
#include "gs_nvml_entries.h"

/* The real library's functions by GS_NVML_IDX_*, NULL where it lacks one;
 * written once by gs_nvml_init before gs_nvml_state becomes ready
 * (release), read-only after. */
extern gs_entry gs_nvml_real[GS_NVML_COUNT];
#define GS_NVML_REAL(name) ((gs_nvml_fn_##name)gs_nvml_real[GS_NVML_IDX_##name])

/* Loads the real NVML once: the library `hint` (a function the
 * application's own lookup found) lives in, else GPUSLICE_REAL_LIBNVML,
 * else libnvidia-ml.so.1. Returns NVML_SUCCESS or
 * NVML_ERROR_LIBRARY_NOT_FOUND. */
nvmlReturn_t gs_nvml_init(void *hint);

/* The index of an NVML entry's exact name (GS_NVML_IDX_*), or -1. */
int gs_nvml_index(const char *name);

/* ---- gs_nvml_usage.c ------------------------------------------------------- */

/* The tenant's figures for one GPU (a USAGE answer, at most 100 ms old). */
struct gs_nvml_usage {
    struct gs_msg_usage u;
    uint64_t at;             /* when it was received */
};

/* The tenant's figures for the NVML device dev: true when the process is
 * in a tenant (a server answered); false when there is none (or the GPU's
 * UUID cannot be read), and NVML's answer then passes through. *rc is set
 * to an NVML error when the answer should be that error instead. */
bool gs_nvml_usage(nvmlDevice_t dev, struct gs_nvml_usage *out, nvmlReturn_t *rc);
/* Whether pid is one of the tenant's processes on any GPU the process can
 * see (asking the server about each). */
bool gs_nvml_pid_is_tenants(unsigned int pid);
void gs_nvml_after_fork_child(void);

#endif
