/*
 * The NVML entry points libgpuslice.so wraps (gs_nvml_wrappers.c), each an
 * exact, versioned name of libnvidia-ml.so.1: the one list from which the
 * wrappers' table, the real functions' table and the name map are made.
 * Anything not listed passes through untouched.
 *
 *   GS_NVML(name, (parameters))           wrapped: answers the tenant's truth
 *   GS_NVML_INTERNAL(name, (parameters))  not wrapped: the real function,
 *                                         for the shim's own use
 *
 * An includer defines GS_NVML_ENTRY(name, params, wrapped) or the two
 * category macros; all are undefined at the end.
 */
#ifndef GS_NVML
#define GS_NVML(name, params) GS_NVML_ENTRY(name, params, 1)
#endif
#ifndef GS_NVML_INTERNAL
#define GS_NVML_INTERNAL(name, params) GS_NVML_ENTRY(name, params, 0)
#endif

/* Memory: the tenant's cap as the total, its count as used. */
GS_NVML(nvmlDeviceGetMemoryInfo, (nvmlDevice_t dev, gs_nvmlMemory_t *memory))
GS_NVML(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t dev, gs_nvmlMemory_v2_t *memory))

/* Processes: the tenant's own, with the memory the server counts. */
GS_NVML(nvmlDeviceGetComputeRunningProcesses, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v1_t *infos))
GS_NVML(nvmlDeviceGetComputeRunningProcesses_v2, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v2_t *infos))
GS_NVML(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v2_t *infos))
GS_NVML(nvmlDeviceGetGraphicsRunningProcesses, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v1_t *infos))
GS_NVML(nvmlDeviceGetGraphicsRunningProcesses_v2, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v2_t *infos))
GS_NVML(nvmlDeviceGetGraphicsRunningProcesses_v3, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v2_t *infos))
GS_NVML(nvmlDeviceGetMPSComputeRunningProcesses, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v1_t *infos))
GS_NVML(nvmlDeviceGetMPSComputeRunningProcesses_v2, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v2_t *infos))
GS_NVML(nvmlDeviceGetMPSComputeRunningProcesses_v3, (nvmlDevice_t dev, unsigned int *count, gs_nvmlProcessInfo_v2_t *infos))
GS_NVML(nvmlDeviceGetRunningProcessDetailList, (nvmlDevice_t dev, gs_nvmlProcessDetailList_t *list))
/* Other views of processes: only the tenant's own pids. */
GS_NVML(nvmlSystemGetProcessName, (unsigned int pid, char *name, unsigned int length))
GS_NVML(nvmlDeviceGetAccountingPids, (nvmlDevice_t dev, unsigned int *count, unsigned int *pids))
GS_NVML(nvmlDeviceGetAccountingStats, (nvmlDevice_t dev, unsigned int pid, gs_nvmlAccountingStats_t *stats))
GS_NVML(nvmlDeviceGetAccountingStats_v2, (nvmlDevice_t dev, gs_nvmlAccountingStats_v2_head_t *stats))
GS_NVML(nvmlDeviceGetEncoderSessions, (nvmlDevice_t dev, unsigned int *count, gs_nvmlEncoderSessionInfo_t *infos))
GS_NVML(nvmlDeviceGetFBCSessions, (nvmlDevice_t dev, unsigned int *count, gs_nvmlFBCSessionInfo_t *infos))

/* Utilization: the tenant's share of device time. */
GS_NVML(nvmlDeviceGetUtilizationRates, (nvmlDevice_t dev, gs_nvmlUtilization_t *util))
GS_NVML(nvmlDeviceGetProcessUtilization,
        (nvmlDevice_t dev, gs_nvmlProcessUtilizationSample_t *samples, unsigned int *count,
         unsigned long long last_seen))
GS_NVML(nvmlDeviceGetProcessesUtilizationInfo, (nvmlDevice_t dev, gs_nvmlProcessesUtilizationInfo_t *info))

/* Used by the shim, not wrapped. */
GS_NVML_INTERNAL(nvmlDeviceGetUUID, (nvmlDevice_t dev, char *uuid, unsigned int length))
GS_NVML_INTERNAL(nvmlDeviceGetCount_v2, (unsigned int *count))
GS_NVML_INTERNAL(nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t *dev))

#undef GS_NVML
#undef GS_NVML_INTERNAL
#undef GS_NVML_ENTRY
