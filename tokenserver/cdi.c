/*
 * The server's side of containers: RUNDIR/cdi/ld.so.preload, the one-line
 * preload list that containers get at /etc/ld.so.preload, and the CDI spec
 * CDI_DIR/gpuslice.json with one device per tenant (--cdi-dir; empty
 * disables it). The spec is rewritten atomically (a temporary file, then
 * rename) whenever the set of tenants changes, so a runtime never reads
 * half of it, and removed when the server stops: a container that asks for
 * a tenant the server does not serve fails to start.
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

/* The text last written to the CDI directory (NULL: none there); owned by
 * the loop's thread. */
static char *written;

static int mkdir_if_missing(const char *path, mode_t mode)
{
    return mkdir(path, mode) != 0 && errno != EEXIST ? -1 : 0;
}

/* mkdir -p */
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
        if (mkdir_if_missing(tmp, mode) != 0)
            return -1;
        *p = '/';
    }
    return mkdir_if_missing(tmp, mode);
}

/* Writes text to DIR/NAME through DIR/.NAME.tmp and a rename. */
static int write_atomic(const char *dir, const char *name, const char *text, mode_t mode)
{
    char tmp[4096], final[4096];
    int n1 = snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    int n2 = snprintf(final, sizeof final, "%s/%s", dir, name);
    if (n1 < 0 || (size_t)n1 >= sizeof tmp || n2 < 0 || (size_t)n2 >= sizeof final) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -1;
    size_t len = strlen(text), done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int saved = errno;
            close(fd);
            unlink(tmp);
            errno = saved;
            return -1;
        }
        done += (size_t)w;
    }
    /* open() applied the umask: the file must be readable by every uid a
     * container runs as. */
    if (fchmod(fd, mode) != 0 || fsync(fd) != 0 || close(fd) != 0 || rename(tmp, final) != 0) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        return -1;
    }
    return 0;
}

int cdi_init(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/cdi", options.run_dir);
    if (make_dirs(dir, 0755) != 0 || chmod(dir, 0755) != 0) {
        slog(LOG_ERR, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    if (write_atomic(dir, "ld.so.preload", GS_CONTAINER_SHIM "\n", 0644) != 0) {
        slog(LOG_ERR, "cannot write %s/ld.so.preload: %s", dir, strerror(errno));
        return -1;
    }
    if (access(options.shim_path, R_OK) != 0)
        slog(LOG_WARN, "the shim %s is not readable (%s): containers get it from there (--shim)",
             options.shim_path, strerror(errno));
    return 0;
}

void cdi_update(void)
{
    if (!options.cdi_dir[0])
        return;
    size_t count = 0;
    for (struct tenant *t = tenants; t; t = t->next)
        count++;
    const char **names = malloc((count ? count : 1) * sizeof *names);
    if (!names) {
        slog(LOG_ERR, "CDI spec: out of memory");
        return;
    }
    count = 0;
    for (struct tenant *t = tenants; t; t = t->next) {
        if (!cdi_valid_device_name(t->name))
            slog(LOG_WARN, "tenant %s: not a valid CDI device name (it must start with a letter or a digit); "
                           "left out of the CDI spec", t->name);
        else
            names[count++] = t->name;
    }
    char *text = count ? cdi_spec_render(names, count, options.run_dir, options.shim_path) : NULL;
    free(names);
    if (count && !text) {
        slog(LOG_ERR, "CDI spec: out of memory");
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
    if (make_dirs(options.cdi_dir, 0755) != 0 ||
        write_atomic(options.cdi_dir, CDI_SPEC_NAME, text, 0644) != 0) {
        slog(LOG_ERR, "cannot write the CDI spec %s/%s: %s", options.cdi_dir, CDI_SPEC_NAME, strerror(errno));
        free(text);
        return;
    }
    slog(LOG_INFO, "CDI spec %s/%s: %zu tenant%s", options.cdi_dir, CDI_SPEC_NAME, count, count == 1 ? "" : "s");
    free(written);
    written = text;
}

void cdi_remove(void)
{
    if (!written)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", options.cdi_dir, CDI_SPEC_NAME);
    if (unlink(path) != 0 && errno != ENOENT)
        slog(LOG_ERR, "cannot remove the CDI spec %s: %s", path, strerror(errno));
    free(written);
    written = NULL;
}
