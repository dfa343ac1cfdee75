/*
 * The server's side of containers: RUN_DIR/cdi/ld.so.preload, the one-line
 * preload list that containers get at /etc/ld.so.preload, and the CDI spec
 * CDI_DIR/gpuslice.json with one device per tenant (--cdi-dir; empty
 * disables it). The spec is rewritten atomically (a temporary file, then
 * rename) whenever the set of tenants changes, so a runtime never reads
 * half of it, and removed when the server stops: a container that asks for
 * a tenant the server does not serve fails to start.
 *
 * Both files are written in directories of the server's own, never in a
 * tenant's: RUN_DIR/cdi is opened relative to RUN_DIR without following a
 * symlink (rundir.c), CDI_DIR is the host's choice like RUN_DIR, and each
 * file is written by name relative to its open directory, created afresh
 * (O_EXCL, O_NOFOLLOW) and renamed into place.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdi_spec.h"
#include "gpuslice/containers.h"

#define CDI_SPEC_NAME "gpuslice.json"

/* The text last written to the CDI directory (NULL: none there), and
 * whether the last update failed (it is tried again every second); owned
 * by the loop's thread. */
static char *written;
static bool failed;

/* mkdir -p, for CDI_DIR (an administrator's path, like RUN_DIR). */
static int make_dirs(const char *path, mode_t mode)
{
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s", path);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, mode) != 0 && errno != EEXIST ? -1 : 0;
}

static void close_logged(int fd)
{
    if (close(fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
}

/* Writes text to NAME in dir_fd through .NAME.tmp and a rename. */
static int write_atomic(int dir_fd, const char *name, const char *text, mode_t mode)
{
    char tmp[256];
    int n = snprintf(tmp, sizeof tmp, ".%s.tmp", name);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* A temporary file a killed server left goes first: O_EXCL then makes
     * a new one, with the mode given here. */
    if (unlinkat(dir_fd, tmp, 0) != 0 && errno != ENOENT)
        return -1;
    int fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    size_t len = strlen(text), done = 0;
    int rc = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            rc = -1;
            break;
        }
        done += (size_t)w;
    }
    /* The file must be readable by every uid a container runs as, whatever
     * the umask. */
    if (rc == 0 && (fchmod(fd, mode) != 0 || fsync(fd) != 0))
        rc = -1;
    int saved = errno;
    if (close(fd) != 0 && rc == 0) {
        saved = errno;
        rc = -1;
    }
    if (rc == 0 && renameat(dir_fd, tmp, dir_fd, name) != 0) {
        saved = errno;
        rc = -1;
    }
    if (rc != 0)
        unlinkat(dir_fd, tmp, 0);
    errno = saved;
    return rc;
}

int cdi_init(void)
{
    int dir = rundir_server_dir("cdi", 0755);
    if (dir < 0) {
        slog(LOG_ERR, "cannot create or open %s/cdi (a directory, not a symlink): %s", options.run_dir,
             strerror(errno));
        return -1;
    }
    int rc = write_atomic(dir, "ld.so.preload", GS_CONTAINER_SHIM "\n", 0644);
    if (rc != 0)
        slog(LOG_ERR, "cannot write %s/" GS_PRELOAD_FILE ": %s", options.run_dir, strerror(errno));
    close_logged(dir);
    if (rc != 0)
        return -1;
    if (access(options.shim_path, R_OK) != 0)
        slog(LOG_WARN, "the shim %s is not readable (%s): containers get it from there (--shim)",
             options.shim_path, strerror(errno));
    return 0;
}

/* Writes text as the spec; -1 (errno set) on failure. */
static int write_spec(const char *text)
{
    if (make_dirs(options.cdi_dir, 0755) != 0)
        return -1;
    int dir = open(options.cdi_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    int rc = write_atomic(dir, CDI_SPEC_NAME, text, 0644);
    int saved = errno;
    close_logged(dir);
    errno = saved;
    return rc;
}

void cdi_update(void)
{
    if (!options.cdi_dir[0])
        return;
    failed = false;
    const char **names = malloc((ntenants ? ntenants : 1) * sizeof *names);
    if (!names) {
        slog(LOG_ERR, "CDI spec: out of memory");
        failed = true;
        return;
    }
    size_t count = 0;
    for (struct tenant *t = tenants; t; t = t->next) {
        if (!cdi_valid_device_name(t->name))
            slog_limited(t, LOG_WARN, "tenant %s: not a valid CDI device name (it must start with a letter or a "
                                      "digit); left out of the CDI spec", t->name);
        else
            names[count++] = t->name;
    }
    char *text = count ? cdi_spec_render(names, count, options.run_dir, options.shim_path) : NULL;
    free(names);
    if (count && !text) {
        slog(LOG_ERR, "CDI spec: out of memory");
        failed = true;
        return;
    }
    if ((!text && !written) || (text && written && strcmp(text, written) == 0)) {
        free(text);
        return;
    }
    if (!text) {
        /* No tenant: a spec without devices is invalid, so there is none. */
        cdi_remove();
        return;
    }
    if (write_spec(text) != 0) {
        slog_limited(&written, LOG_ERR, "cannot write the CDI spec %s/%s: %s; trying again every second",
                     options.cdi_dir, CDI_SPEC_NAME, strerror(errno));
        free(text);
        failed = true;
        return;
    }
    slog(LOG_INFO, "CDI spec %s/%s: %zu tenant%s", options.cdi_dir, CDI_SPEC_NAME, count, count == 1 ? "" : "s");
    free(written);
    written = text;
}

void cdi_retry(void)
{
    if (failed)
        cdi_update();
}

void cdi_remove(void)
{
    failed = false;
    if (!written)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", options.cdi_dir, CDI_SPEC_NAME);
    if (unlink(path) != 0 && errno != ENOENT)
        slog(LOG_ERR, "cannot remove the CDI spec %s: %s", path, strerror(errno));
    free(written);
    written = NULL;
}
