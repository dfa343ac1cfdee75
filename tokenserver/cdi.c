/*
 * The server's side of containers: RUN_DIR/cdi/ld.so.preload, the one-line
 * preload list that containers get at /etc/ld.so.preload, and the CDI spec
 * CDI_DIR/gpuslice.json with one device per tenant (--cdi-dir; empty
 * disables it). The spec is rewritten atomically (a temporary file, then
 * rename) whenever the set of tenants changes, so a runtime never reads
 * half of it; a container that asks for a tenant the server does not
 * serve fails to start. It stays when the server stops: containers
 * created while it restarts (an upgrade) start, and their processes
 * connect once it is back. Only --uninstall (uninstall.c) takes it away.
 *
 * The spec belongs to the run directory it mounts from. A server writes
 * over one of another run directory only once no server holds that
 * directory's lock, and removes only its own (runlock.c): two servers
 * given one CDI directory never delete each other's.
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

/* The text last written to the CDI directory (NULL: none there), whether
 * it is known to be there (not before the first update: a spec the last
 * server left may be out of date), and whether the last update failed (it
 * is tried again every second); owned by the loop's thread. */
static char *written;
static bool synced;
static bool failed;

/* Why the last update could not write the spec, as last said (empty:
 * none since the last write), when it was said, and the tries since that
 * found the same: a failure retried every second is said when it begins,
 * when it changes, and then every REPEAT_SAID_NS with the count; owned by
 * the loop's thread. */
#define REPEAT_SAID_NS (10 * 60 * 1000000000ull)
static char failure_said[4608]; /* owner paths are up to 4200 bytes */
static uint64_t failure_said_ns;
static unsigned failure_repeats;

/* Says why the spec could not be written (text, a full sentence), unless
 * that was said last, less than REPEAT_SAID_NS ago. */
static void say_failure(const char *text)
{
    uint64_t now = now_ns();
    if (strcmp(text, failure_said) == 0 && now - failure_said_ns < REPEAT_SAID_NS) {
        failure_repeats++;
        return;
    }
    if (strcmp(text, failure_said) == 0)
        slog(LOG_ERR, "%s (still so: %u more tries in the last %llu minutes)", text, failure_repeats,
             (unsigned long long)((now - failure_said_ns) / 60000000000ull));
    else
        slog(LOG_ERR, "%s", text);
    snprintf(failure_said, sizeof failure_said, "%s", text);
    failure_said_ns = now;
    failure_repeats = 0;
}

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

int cdi_init(void)
{
    int dir = rundir_server_dir("cdi", 0755);
    if (dir < 0) {
        slog(LOG_ERR, "cannot create or open %s/cdi (a directory, not a symlink): %s", options.run_dir,
             strerror(errno));
        return -1;
    }
    int rc = rundir_write_file(dir, "ld.so.preload", GS_CONTAINER_SHIM "\n", 0644);
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

static void spec_path(char *path, size_t len)
{
    snprintf(path, len, "%s/%s", options.cdi_dir, CDI_SPEC_NAME);
}

/* The spec now in the CDI directory, read (at most 1 MiB); NULL if none. */
static char *read_spec(void)
{
    char path[4200];
    spec_path(path, sizeof path);
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    size_t cap = 1 << 20, len;
    char *text = malloc(cap + 1);
    if (text) {
        len = fread(text, 1, cap, f);
        text[len] = '\0';
    }
    fclose(f);
    return text;
}

/* Whether the spec in the CDI directory is another run directory's whose
 * server still runs (its pid in *pid); then it is not ours to replace. */
static bool spec_of_another_live_server(char *owner, size_t len, long *pid)
{
    char *text = read_spec();
    bool theirs = text && cdi_spec_run_dir(text, owner, len) && strcmp(owner, options.run_dir) != 0 &&
                  runlock_held_at(owner, pid);
    free(text);
    return theirs;
}

/* Whether the spec in the CDI directory is this run directory's. */
static bool spec_is_ours(void)
{
    char owner[4200];
    char *text = read_spec();
    bool ours = text && cdi_spec_run_dir(text, owner, sizeof owner) && strcmp(owner, options.run_dir) == 0;
    free(text);
    return ours;
}

/* Writes text as the spec; -1 (errno set) on failure. */
static int write_spec(const char *text)
{
    if (make_dirs(options.cdi_dir, 0755) != 0)
        return -1;
    int dir = open(options.cdi_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    int rc = rundir_write_file(dir, CDI_SPEC_NAME, text, 0644);
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
    if (synced && ((!text && !written) || (text && written && strcmp(text, written) == 0))) {
        free(text);
        return;
    }
    if (!text) {
        /* No tenant: a spec without devices is invalid, so there is none. */
        cdi_remove();
        synced = true;
        return;
    }
    char owner[4200];
    long pid = 0;
    if (spec_of_another_live_server(owner, sizeof owner, &pid)) {
        char who[32] = "";
        if (pid > 0)
            snprintf(who, sizeof who, " (pid %ld)", pid);
        char why[sizeof failure_said];
        snprintf(why, sizeof why, "the CDI spec %s/%s is the one of the gpuslice-server%s serving %s, still "
                 "running: not replacing it (give each server its own --cdi-dir); trying again every second, "
                 "said again if this changes, or every 10 minutes while it lasts", options.cdi_dir, CDI_SPEC_NAME,
                 who, owner);
        say_failure(why);
        free(text);
        failed = true;
        return;
    }
    if (write_spec(text) != 0) {
        char why[sizeof failure_said];
        snprintf(why, sizeof why, "cannot write the CDI spec %s/%s: %s; trying again every second, said again if "
                 "this changes, or every 10 minutes while it lasts", options.cdi_dir, CDI_SPEC_NAME, strerror(errno));
        say_failure(why);
        free(text);
        failed = true;
        return;
    }
    if (failure_said[0])
        slog(LOG_INFO, "CDI spec %s/%s: written; the failure said above is over", options.cdi_dir, CDI_SPEC_NAME);
    failure_said[0] = '\0';
    slog(LOG_INFO, "CDI spec %s/%s: %zu tenant%s", options.cdi_dir, CDI_SPEC_NAME, count, count == 1 ? "" : "s");
    free(written);
    written = text;
    synced = true;
}

void cdi_retry(void)
{
    if (failed)
        cdi_update();
}

void cdi_remove(void)
{
    failed = false;
    free(written);
    written = NULL;
    if (!options.cdi_dir[0] || !spec_is_ours())
        return;
    char path[4200];
    spec_path(path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT)
        slog(LOG_ERR, "cannot remove the CDI spec %s: %s", path, strerror(errno));
}

void cdi_close(void)
{
    free(written);
    written = NULL;
}
