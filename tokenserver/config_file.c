/*
 * Reading one tenant file for the parser (config.c) without ever blocking
 * the event loop: the file must be a regular file (a symlink to one is
 * followed: Kubernetes ConfigMaps are symlinks into "..data", and the
 * configuration directory belongs to the host), checked before it is
 * opened, opened O_NONBLOCK so that a FIFO swapped in meanwhile cannot
 * block, checked again, and read up to CONFIG_MAX_BYTES.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool regular(const struct stat *st, const char *path, char *err, size_t errlen)
{
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return false;
    }
    if (st->st_size > CONFIG_MAX_BYTES) {
        snprintf(err, errlen, "%s: larger than %d bytes", path, CONFIG_MAX_BYTES);
        return false;
    }
    return true;
}

int config_read_file(int dir_fd, const char *file, const char *path, struct tenant_config *out, char *err,
                     size_t errlen)
{
    struct stat st;
    if (fstatat(dir_fd, file, &st, 0) != 0) {
        if (errno == ENOENT)
            return CONFIG_MISSING;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return CONFIG_BAD;
    }
    if (!regular(&st, path, err, errlen))
        return CONFIG_BAD;
    int fd = openat(dir_fd, file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return CONFIG_MISSING;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return CONFIG_BAD;
    }
    static char text[CONFIG_MAX_BYTES + 1]; /* the loop's thread only: one file at a time */
    size_t len = 0;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        rc = CONFIG_BAD;
    } else if (!regular(&st, path, err, errlen)) {
        rc = CONFIG_BAD;
    }
    while (rc == 0 && len < sizeof text) {
        ssize_t n = read(fd, text + len, sizeof text - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
            rc = CONFIG_BAD;
        }
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    if (close(fd) != 0 && rc == 0) {
        snprintf(err, errlen, "%s: close: %s", path, strerror(errno));
        rc = CONFIG_BAD;
    }
    if (rc == 0 && len > CONFIG_MAX_BYTES) {
        snprintf(err, errlen, "%s: larger than %d bytes", path, CONFIG_MAX_BYTES);
        rc = CONFIG_BAD;
    }
    return rc == 0 ? config_parse_text(text, len, path, out, err, errlen) : rc;
}
