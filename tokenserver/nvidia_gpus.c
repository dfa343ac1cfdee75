/*
 * The GPUs the NVIDIA driver knows on this node, by UUID, from its
 * /proc/driver/nvidia/gpus/BUS_ID/information ("GPU UUID: GPU-...",
 * "Device Minor: N"):
 *   - the index, as nvidia-smi, NVML and dcgm-exporter number GPUs (the
 *     "gpu" label), so that gpuslice's series join dcgm-exporter's: NVML
 *     numbers GPUs in PCI bus order, the order of those directory names;
 *   - the minor number of its device node /dev/nvidiaN, by which the
 *     server checks that a process may use a GPU it declares
 *     (gpu_access.c);
 *   - its model ("Model: NVIDIA H100 80GB HBM3"), dcgm-exporter's
 *     "modelName" label.
 * Without the driver (fakecuda, or a container without /proc of the host)
 * every GPU is unknown: the index label is left out, and declarations
 * cannot be checked.
 *
 * The directory is read again at most every REREAD_NS, when asked, so a
 * GPU that appears later is found; each file is parsed by
 * include/gpuslice/nvidia_info.c, as the shim's are.
 */
#include "server.h"
#include "gpuslice/nvidia_info.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_GPUS 64
#define REREAD_NS 10000000000ull

/* The last map read and when; owned by the loop's thread. */
static struct {
    char bus[32];
    bool known;
    struct gs_nvidia_gpu info;
} gpus[MAX_GPUS];
static int ngpus;
static bool have_gpus_dir;   /* options.nvidia_dir/gpus could be opened */
static uint64_t read_at;
static bool ever_read;

static int by_bus(const void *a, const void *b)
{
    return strcmp(a, b); /* bus ids are fixed-width lowercase hex: text order is bus order */
}

static void reread(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/gpus", options.nvidia_dir);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ngpus = 0;
    have_gpus_dir = fd >= 0;
    if (fd < 0)
        return; /* no NVIDIA driver here: GPUs unknown */
    DIR *dir = fdopendir(fd);
    if (!dir) {
        if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) && ngpus < MAX_GPUS)
        if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof gpus[0].bus)
            snprintf(gpus[ngpus++].bus, sizeof gpus[0].bus, "%s", e->d_name);
    qsort(gpus, (size_t)ngpus, sizeof gpus[0], by_bus);
    for (int i = 0; i < ngpus; i++)
        gpus[i].known = gs_nvidia_read_information(dirfd(dir), gpus[i].bus, &gpus[i].info);
    if (closedir(dir) != 0)
        slog(LOG_WARN, "closedir: %s", strerror(errno));
}

static void reread_if_due(uint64_t now)
{
    if (!ever_read || now - read_at >= REREAD_NS) {
        reread();
        read_at = now;
        ever_read = true;
    }
}

static int find(const uint8_t uuid[16])
{
    for (int i = 0; i < ngpus; i++)
        if (gpus[i].known && memcmp(gpus[i].info.uuid, uuid, 16) == 0)
            return i;
    return -1;
}

int gpu_index_of(const uint8_t uuid[16], uint64_t now)
{
    reread_if_due(now);
    return find(uuid);
}

bool nvidia_gpus_known(uint64_t now)
{
    reread_if_due(now);
    return have_gpus_dir;
}

int gpu_minor_of(const uint8_t uuid[16], uint64_t now)
{
    reread_if_due(now);
    int i = find(uuid);
    if (i < 0 && now != read_at) {
        /* perhaps a GPU that appeared since (hot plug, a driver reload) */
        reread();
        read_at = now;
        i = find(uuid);
    }
    return i < 0 ? -1 : gpus[i].info.minor;
}

const char *gpu_model_of(const uint8_t uuid[16], uint64_t now)
{
    reread_if_due(now);
    int i = find(uuid);
    return i < 0 ? "" : gpus[i].info.model;
}
