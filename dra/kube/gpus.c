/*
 * The node's GPUs as NVML lists them: libnvidia-ml.so.1 loaded at run time
 * (dlopen: the plugin starts, and says why it cannot publish, on a node
 * without NVIDIA's driver), each device's index, UUID, name and memory,
 * and the driver's version. Every NVML call's result is checked.
 *
 * NVML's types and the functions used are declared here as NVIDIA's NVML
 * API Reference (docs.nvidia.com/deploy/nvml-api) defines them: its header
 * is not part of the CUDA toolkit this builds with.
 */
#include "kube_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t; /* enum nvmlReturn_enum */
#define NVML_SUCCESS 0
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
/* NVML's buffer sizes ("Constants"). */
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80

/* The entry points used, from one dlopen of the library. */
struct nvml {
    void *library;
    nvmlReturn_t (*init_v2)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*get_count_v2)(unsigned int *);
    nvmlReturn_t (*get_handle_by_index_v2)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*get_index)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*get_uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*get_name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*get_memory_info)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*get_driver_version)(char *, unsigned int);
};

_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym's answer holds a function's address");

/* Looks up one entry point into *entry (a function pointer of any type). */
static bool find(struct nvml *nvml, const char *name, void *entry, size_t entry_size, char *error,
                 size_t error_size)
{
    void *address = dlsym(nvml->library, name);
    if (!address) {
        snprintf(error, error_size, "libnvidia-ml.so.1 has no %s", name);
        return false;
    }
    memcpy(entry, &address, entry_size);
    return true;
}

#define FIND(nvml, field, name) find(nvml, name, &(nvml)->field, sizeof(nvml)->field, error, error_size)

static const char *nvml_error(const struct nvml *nvml, nvmlReturn_t rc, char *buffer, size_t size)
{
    const char *text = nvml->error_string ? nvml->error_string(rc) : NULL;
    snprintf(buffer, size, "%s (%d)", text ? text : "NVML error", rc);
    return buffer;
}

static bool load(struct nvml *nvml, char *error, size_t error_size)
{
    memset(nvml, 0, sizeof *nvml);
    nvml->library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml->library) {
        const char *why = dlerror();
        snprintf(error, error_size, "NVML: cannot load libnvidia-ml.so.1 (is NVIDIA's driver installed?): %s",
                 why ? why : "unknown");
        return false;
    }
    /* nvmlErrorString is only for messages: its absence is no failure. */
    void *error_string = dlsym(nvml->library, "nvmlErrorString");
    if (error_string)
        memcpy(&nvml->error_string, &error_string, sizeof nvml->error_string);
    if (FIND(nvml, init_v2, "nvmlInit_v2") && FIND(nvml, shutdown, "nvmlShutdown") &&
        FIND(nvml, get_count_v2, "nvmlDeviceGetCount_v2") &&
        FIND(nvml, get_handle_by_index_v2, "nvmlDeviceGetHandleByIndex_v2") &&
        FIND(nvml, get_index, "nvmlDeviceGetIndex") && FIND(nvml, get_uuid, "nvmlDeviceGetUUID") &&
        FIND(nvml, get_name, "nvmlDeviceGetName") && FIND(nvml, get_memory_info, "nvmlDeviceGetMemoryInfo") &&
        FIND(nvml, get_driver_version, "nvmlSystemGetDriverVersion"))
        return true;
    /* The missing entry point is what is reported; a failed unload adds
     * nothing to it. */
    (void)dlclose(nvml->library);
    nvml->library = NULL;
    return false;
}

/* Lists the devices into gpus, NVML initialized: their count or -1. */
static int list(const struct nvml *nvml, struct dra_gpu *gpus, int max, char *error, size_t error_size)
{
    char why[128];
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    nvmlReturn_t rc = nvml->get_driver_version(driver_version, sizeof driver_version);
    if (rc != NVML_SUCCESS) {
        snprintf(error, error_size, "NVML: nvmlSystemGetDriverVersion: %s", nvml_error(nvml, rc, why, sizeof why));
        return -1;
    }
    driver_version[sizeof driver_version - 1] = '\0';
    unsigned int count = 0;
    if ((rc = nvml->get_count_v2(&count)) != NVML_SUCCESS) {
        snprintf(error, error_size, "NVML: nvmlDeviceGetCount_v2: %s", nvml_error(nvml, rc, why, sizeof why));
        return -1;
    }
    if (count > (unsigned)max) {
        snprintf(error, error_size, "NVML lists %u GPUs, more than the %d gpuslice-dra publishes", count, max);
        return -1;
    }
    for (unsigned int i = 0; i < count; i++) {
        struct dra_gpu *gpu = &gpus[i];
        memset(gpu, 0, sizeof *gpu);
        nvmlDevice_t device;
        nvmlMemory_t memory;
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "", name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
        const char *call = NULL;
        if ((rc = nvml->get_handle_by_index_v2(i, &device)) != NVML_SUCCESS)
            call = "nvmlDeviceGetHandleByIndex_v2";
        else if ((rc = nvml->get_index(device, &gpu->index)) != NVML_SUCCESS)
            call = "nvmlDeviceGetIndex";
        else if ((rc = nvml->get_uuid(device, uuid, sizeof uuid)) != NVML_SUCCESS)
            call = "nvmlDeviceGetUUID";
        else if ((rc = nvml->get_name(device, name, sizeof name)) != NVML_SUCCESS)
            call = "nvmlDeviceGetName";
        else if ((rc = nvml->get_memory_info(device, &memory)) != NVML_SUCCESS)
            call = "nvmlDeviceGetMemoryInfo";
        if (call) {
            snprintf(error, error_size, "NVML: %s (GPU %u): %s", call, i, nvml_error(nvml, rc, why, sizeof why));
            return -1;
        }
        uuid[sizeof uuid - 1] = '\0';
        name[sizeof name - 1] = '\0';
        snprintf(gpu->uuid, sizeof gpu->uuid, "%s", uuid);
        snprintf(gpu->product, sizeof gpu->product, "%s", name);
        snprintf(gpu->driver_version, sizeof gpu->driver_version, "%s", driver_version);
        gpu->memory_bytes = memory.total;
    }
    return (int)count;
}

int dra_gpus_discover(struct dra_gpu *gpus, int max, char *error, size_t error_size)
{
    if (!gpus || max < 0) {
        snprintf(error, error_size, "dra_gpus_discover: no room for GPUs");
        return -1;
    }
    struct nvml nvml;
    if (!load(&nvml, error, error_size))
        return -1;
    char why[128];
    int count = -1;
    nvmlReturn_t rc = nvml.init_v2();
    if (rc != NVML_SUCCESS) {
        snprintf(error, error_size, "NVML: nvmlInit_v2: %s", nvml_error(&nvml, rc, why, sizeof why));
    } else {
        count = list(&nvml, gpus, max, error, error_size);
        rc = nvml.shutdown();
        if (rc != NVML_SUCCESS && count >= 0) {
            snprintf(error, error_size, "NVML: nvmlShutdown: %s", nvml_error(&nvml, rc, why, sizeof why));
            count = -1;
        }
    }
    if (dlclose(nvml.library) != 0 && count >= 0) {
        const char *reason = dlerror();
        snprintf(error, error_size, "NVML: dlclose: %s", reason ? reason : "failed");
        count = -1;
    }
    return count;
}
