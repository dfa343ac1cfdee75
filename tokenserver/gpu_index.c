/*
 * GPU indexes by UUID, as nvidia-smi, NVML and dcgm-exporter number GPUs
 * (the "gpu" label), so that gpuslice's series join dcgm-exporter's. The
 * shim reports only UUIDs; the index comes from the NVIDIA driver's
 * /proc/driver/nvidia/gpus/BUS_ID/information ("GPU UUID: GPU-..."): NVML
 * numbers GPUs in PCI bus order, which is the order of those directory
 * names. Without the driver (fakecuda, or a container without /proc of
 * the host) every index is unknown and the label is left out.
 *
 * The directory is read again at most every REREAD_NS, when asked, so a
 * GPU that appears later gets its index; procfs reads do not block.
 */
#include "metrics.h"

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
    uint8_t uuid[16];
    bool known;
} gpus[MAX_GPUS];
static int ngpus;
static uint64_t read_at;
static bool ever_read;

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" at text into uuid. */
static bool parse_uuid(const char *text, uint8_t uuid[16])
{
    if (strncmp(text, "GPU-", 4) != 0)
        return false;
    text += 4;
    for (int i = 0; i < 16; i++) {
        if (*text == '-')
            text++;
        int hi = hex_digit(text[0]), lo = hi < 0 ? -1 : hex_digit(text[1]);
        if (lo < 0)
            return false;
        uuid[i] = (uint8_t)(hi << 4 | lo);
        text += 2;
    }
    return true;
}

/* Reads the UUID in DIR/information of one GPU. */
static bool read_information(int gpus_fd, const char *bus, uint8_t uuid[16])
{
    char path[64], text[4096];
    snprintf(path, sizeof path, "%s/information", bus);
    int fd = openat(gpus_fd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, text, sizeof text - 1);
    if (close(fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    if (n <= 0)
        return false;
    text[n] = '\0';
    const char *line = strstr(text, "GPU UUID:");
    if (!line)
        return false;
    line += strlen("GPU UUID:");
    while (*line == ' ' || *line == '\t')
        line++;
    return parse_uuid(line, uuid);
}

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
    if (fd < 0)
        return; /* no NVIDIA driver here: indexes unknown */
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
        gpus[i].known = read_information(dirfd(dir), gpus[i].bus, gpus[i].uuid);
    if (closedir(dir) != 0)
        slog(LOG_WARN, "closedir: %s", strerror(errno));
}

int gpu_index_of(const uint8_t uuid[16], uint64_t now)
{
    if (!ever_read || now - read_at >= REREAD_NS) {
        reread();
        read_at = now;
        ever_read = true;
    }
    for (int i = 0; i < ngpus; i++)
        if (gpus[i].known && memcmp(gpus[i].uuid, uuid, 16) == 0)
            return i;
    return -1;
}
