/*
 * Reading the NVIDIA driver's procfs description of its GPUs
 * (nvidia_info.h). procfs reads do not block; a file is read whole in one
 * read (the driver's are a few hundred bytes).
 */
#include "nvidia_info.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

bool gs_nvidia_read_information(int gpus_fd, const char *bus, struct gs_nvidia_gpu *gpu)
{
    char path[300], text[4096];
    if (snprintf(path, sizeof path, "%s/information", bus) >= (int)sizeof path)
        return false;
    int fd = openat(gpus_fd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, text, sizeof text - 1);
    if (close(fd) != 0) {
        /* a file only read: nothing to lose */
    }
    if (n <= 0)
        return false;
    text[n] = '\0';
    gpu->minor = number_after(text, "Device Minor:");
    text_after(text, "Model:", gpu->model, sizeof gpu->model);
    const char *line = strstr(text, "GPU UUID:");
    if (!line)
        return false;
    line += strlen("GPU UUID:");
    while (*line == ' ' || *line == '\t')
        line++;
    return parse_uuid(line, gpu->uuid);
}

int gs_nvidia_minor_of(const char *nvidia_dir, const uint8_t uuid[16])
{
    char path[4200];
    if (snprintf(path, sizeof path, "%s/gpus", nvidia_dir) >= (int)sizeof path)
        return -1;
    DIR *dir = opendir(path);
    if (!dir)
        return -1;
    int minor = -1;
    struct dirent *e;
    while (minor < 0 && (e = readdir(dir))) {
        struct gs_nvidia_gpu gpu;
        if (e->d_name[0] != '.' && gs_nvidia_read_information(dirfd(dir), e->d_name, &gpu) &&
            memcmp(gpu.uuid, uuid, 16) == 0)
            minor = gpu.minor;
    }
    if (closedir(dir) != 0) {
        /* a directory only read: nothing to lose */
    }
    return minor;
}
