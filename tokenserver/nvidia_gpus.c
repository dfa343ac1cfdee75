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
 * GPU that appears later is found; procfs reads do not block.
 */
#include "server.h"

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
    int minor;               /* -1 if the file does not say */
    char model[96];          /* "" if the file does not say */
} gpus[MAX_GPUS];
static int ngpus;
static bool have_gpus_dir;   /* options.nvidia_dir/gpus could be opened */
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

/* The number after "KEY:" in text, or -1. */
static int number_after(const char *text, const char *key)
{
    const char *line = strstr(text, key);
    if (!line)
        return -1;
    line += strlen(key);
    while (*line == ' ' || *line == '\t')
        line++;
    long v = 0;
    if (*line < '0' || *line > '9')
        return -1;
    while (*line >= '0' && *line <= '9' && v < 1000000)
        v = v * 10 + (*line++ - '0');
    return v < 1000000 ? (int)v : -1;
}

/* The rest of the line after "KEY:" in text, blanks trimmed, printable
 * characters only, into out ("" if there is none). */
static void text_after(const char *text, const char *key, char *out, size_t len)
{
    out[0] = '\0';
    const char *line = strstr(text, key);
    if (!line)
        return;
    line += strlen(key);
    while (*line == ' ' || *line == '\t')
        line++;
    size_t n = 0;
    while (line[n] && line[n] != '\n' && n + 1 < len && line[n] >= 0x20 && line[n] < 0x7f)
        n++;
    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
        n--;
    memcpy(out, line, n);
    out[n] = '\0';
}

/* Reads the UUID, the minor number and the model in DIR/information of
 * one GPU. */
static bool read_information(int gpus_fd, const char *bus, uint8_t uuid[16], int *minor, char *model, size_t len)
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
    *minor = number_after(text, "Device Minor:");
    text_after(text, "Model:", model, len);
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
        gpus[i].known = read_information(dirfd(dir), gpus[i].bus, gpus[i].uuid, &gpus[i].minor, gpus[i].model,
                                         sizeof gpus[i].model);
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
        if (gpus[i].known && memcmp(gpus[i].uuid, uuid, 16) == 0)
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
    return i < 0 ? -1 : gpus[i].minor;
}

const char *gpu_model_of(const uint8_t uuid[16], uint64_t now)
{
    reread_if_due(now);
    int i = find(uuid);
    return i < 0 ? "" : gpus[i].model;
}
