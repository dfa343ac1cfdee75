/*
 * gpuslice-server --uninstall: takes gpuslice off a node without
 * stranding anything that runs there.
 *
 * A restart leaves everything in place (the CDI spec, the tenants'
 * directories and policy files) for the next server. An uninstall is the
 * one explicit way out, in this order:
 *
 *   1. The policy file of every tenant directory says "uninstalled open":
 *      a shim that finds no server reads it (at once when it is cut off,
 *      then at every try, at most a second apart) and runs ungated from
 *      then on; one that does not know the word takes "open".
 *   2. A server still serving RUN_DIR is stopped (SIGTERM, to the PID
 *      that holds RUN_DIR/server.lock; up to 30 s for it to exit), which
 *      cuts its clients off. Then this process holds the lock, so no
 *      server starts meanwhile, and writes the policy files again (a
 *      server that was stopping may have rewritten one).
 *   3. The sockets (each tenant's, admin.sock), RUN_DIR/.clients and the
 *      preload list RUN_DIR/cdi/ld.so.preload go. Running containers have
 *      the preload list and the shim bind-mounted (the inodes), so they
 *      keep them.
 *   4. A CDI spec of RUN_DIR becomes one whose devices only set
 *      GPUSLICE_UNINSTALLED=1 (cdi_spec.c), so that containers still
 *      naming a tenant (a pod's annotation, which the kubelet uses again
 *      for every restart of its containers) start, without gpuslice. A
 *      spec of another run directory is left alone.
 *   5. With --install-dir, what the DaemonSet's init container copied
 *      there goes: the shim, the hook and the hooks.d file (without it,
 *      CRI-O and podman run no hook), then the directories if empty.
 *
 * The tenants' directories stay: running containers have them mounted,
 * and the policy file in each is how their shims learn of the uninstall.
 * Nothing in a tenant's directory is followed (rundir.c's rules).
 */
#include "server.h"
#include "cdi_spec.h"
#include "gpuslice/containers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define UNINSTALLED_POLICY "uninstalled open\n"
#define STOP_WAIT_NS 30000000000ull
#define MAX_TENANT_DIRS 4096

static int failures;

static void close_logged(int fd)
{
    if (fd >= 0 && close(fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
}

/* Removes NAME in dir_fd if it is a socket (never following it). */
static void remove_socket(int dir_fd, const char *name, const char *where)
{
    struct stat st;
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode))
        return;
    if (unlinkat(dir_fd, name, 0) != 0 && errno != ENOENT) {
        slog(LOG_ERR, "cannot remove %s/%s: %s", where, name, strerror(errno));
        failures++;
    }
}

static void remove_file(int dir_fd, const char *name, const char *where)
{
    if (unlinkat(dir_fd, name, 0) == 0)
        slog(LOG_INFO, "removed %s/%s", where, name);
    else if (errno != ENOENT) {
        slog(LOG_ERR, "cannot remove %s/%s: %s", where, name, strerror(errno));
        failures++;
    }
}

/* Every tenant directory of RUN_DIR: its policy says uninstalled and,
 * with sockets, its socket goes. Its name joins names (for the inert
 * spec); returns how many. */
static size_t each_tenant(int run_fd, bool sockets, char (*names)[GS_NAME_MAX], size_t max)
{
    int fd = openat(run_fd, "tenants", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    DIR *dir = fdopendir(fd);
    if (!dir) {
        close_logged(fd);
        return 0;
    }
    size_t count = 0;
    struct dirent *e;
    char where[4200];
    while ((e = readdir(dir))) {
        if (!config_valid_name(e->d_name))
            continue;
        int tenant = openat(dirfd(dir), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (tenant < 0)
            continue;
        snprintf(where, sizeof where, "%s/tenants/%s", options.run_dir, e->d_name);
        if (rundir_write_file(tenant, GS_TENANT_POLICY_FILE, UNINSTALLED_POLICY, 0644) != 0) {
            slog(LOG_ERR, "cannot write %s/%s: %s", where, GS_TENANT_POLICY_FILE, strerror(errno));
            failures++;
        }
        if (sockets)
            remove_socket(tenant, GS_TENANT_SOCKET, where);
        close_logged(tenant);
        if (count < max)
            memcpy(names[count++], e->d_name, strlen(e->d_name) + 1);
    }
    if (closedir(dir) != 0)
        slog(LOG_WARN, "closedir: %s", strerror(errno));
    return count;
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Takes RUN_DIR's lock, stopping the server that holds it; the lock's
 * descriptor, or -1 (logged). */
static int stop_server(int run_fd)
{
    int lock = runlock_open(run_fd);
    if (lock < 0) {
        slog(LOG_ERR, "cannot open %s/%s: %s", options.run_dir, RUNLOCK_NAME, strerror(errno));
        return -1;
    }
    int rc = runlock_take(lock);
    if (rc == 0)
        return lock;
    long pid = rc > 0 ? runlock_holder(lock) : 0;
    if (rc < 0 || pid <= 0 || kill((pid_t)pid, SIGTERM) != 0) {
        if (rc < 0)
            slog(LOG_ERR, "cannot lock %s/%s: %s", options.run_dir, RUNLOCK_NAME, strerror(errno));
        else
            slog(LOG_ERR, "a gpuslice-server serves %s and cannot be stopped from here (%s): stop it first, then "
                          "run --uninstall again", options.run_dir, pid > 0 ? strerror(errno) : "its PID is unknown");
        close_logged(lock);
        return -1;
    }
    slog(LOG_INFO, "stopping the gpuslice-server of %s (pid %ld)", options.run_dir, pid);
    uint64_t until = monotonic_ns() + STOP_WAIT_NS;
    while ((rc = runlock_take(lock)) == 1 && monotonic_ns() < until) {
        struct timespec pause = {0, 50000000};
        nanosleep(&pause, NULL);
    }
    if (rc != 0) {
        slog(LOG_ERR, "the gpuslice-server of %s (pid %ld) did not exit within %llu s", options.run_dir, pid,
             (unsigned long long)(STOP_WAIT_NS / 1000000000ull));
        close_logged(lock);
        return -1;
    }
    return lock;
}

/* The run directory's part; fills names with its tenants and returns how
 * many, or -1 if a server still serves it (then nothing else is done). */
static long uninstall_run_dir(char (*names)[GS_NAME_MAX], size_t max)
{
    int run_fd = open(options.run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (run_fd < 0) {
        if (errno != ENOENT) {
            slog(LOG_ERR, "cannot open %s: %s", options.run_dir, strerror(errno));
            failures++;
        } else
            slog(LOG_INFO, "%s does not exist: no server ran there since the last boot", options.run_dir);
        return 0;
    }
    /* Processes cut off by the stop read this at once. */
    each_tenant(run_fd, false, names, max);
    int lock = stop_server(run_fd);
    if (lock < 0) {
        close_logged(run_fd);
        return -1;
    }
    size_t count = each_tenant(run_fd, true, names, max);
    slog(LOG_INFO, "%zu tenant director%s of %s now say 'uninstalled': their processes run ungated", count,
         count == 1 ? "y" : "ies", options.run_dir);
    remove_socket(run_fd, "admin.sock", options.run_dir);
    remove_file(run_fd, ".clients", options.run_dir);
    int cdi = openat(run_fd, "cdi", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cdi >= 0) {
        char where[4200];
        snprintf(where, sizeof where, "%s/cdi", options.run_dir);
        remove_file(cdi, "ld.so.preload", where);
        close_logged(cdi);
    }
    close_logged(run_fd);
    close_logged(lock); /* a server may start again from here on */
    return (long)count;
}

static void uninstall_cdi_spec(char (*names)[GS_NAME_MAX], size_t count)
{
    if (!options.cdi_dir[0])
        return;
    char path[4200], owner[4200];
    snprintf(path, sizeof path, "%s/gpuslice.json", options.cdi_dir);
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno != ENOENT) {
            slog(LOG_ERR, "cannot read %s: %s", path, strerror(errno));
            failures++;
        }
        return;
    }
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    if (!cdi_spec_run_dir(text, owner, sizeof owner) || strcmp(owner, options.run_dir) != 0) {
        slog(LOG_INFO, "%s is not the CDI spec of %s: left alone", path, options.run_dir);
        return;
    }
    const char *list[MAX_TENANT_DIRS];
    for (size_t i = 0; i < count; i++)
        list[i] = names[i];
    char *inert = count ? cdi_spec_render_inert(list, count) : NULL;
    int dir = open(options.cdi_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dir < 0 ? -1 : inert ? rundir_write_file(dir, "gpuslice.json", inert, 0644) : unlinkat(dir, "gpuslice.json", 0);
    if (rc != 0) {
        slog(LOG_ERR, "cannot %s %s: %s", inert ? "rewrite" : "remove", path, strerror(errno));
        failures++;
    } else if (inert)
        slog(LOG_INFO, "%s: its devices now only set " CDI_UNINSTALLED_ENV ", so containers that still name a "
                       "tenant start without gpuslice; remove it once none does", path);
    else
        slog(LOG_INFO, "removed %s", path);
    close_logged(dir);
    free(inert);
}

static void uninstall_install_dir(const char *dir)
{
    static const char *const files[][2] = {
        {"lib", "libgpuslice.so"}, {"lib", "libgpuslice.so.new"}, {"bin", "gpuslice-hook"},
        {"bin", "gpuslice-hook.new"}, {"hooks.d", "gpuslice.json"}, {"hooks.d", "gpuslice.json.new"},
    };
    int top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (top < 0) {
        if (errno != ENOENT) {
            slog(LOG_ERR, "cannot open %s: %s", dir, strerror(errno));
            failures++;
        }
        return;
    }
    char where[4200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        int sub = openat(top, files[i][0], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            continue;
        snprintf(where, sizeof where, "%s/%s", dir, files[i][0]);
        remove_file(sub, files[i][1], where);
        close_logged(sub);
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i += 2)
        if (unlinkat(top, files[i][0], AT_REMOVEDIR) != 0 && errno != ENOENT && errno != ENOTEMPTY)
            slog(LOG_WARN, "cannot remove %s/%s: %s", dir, files[i][0], strerror(errno));
    close_logged(top);
    if (rmdir(dir) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EBUSY)
        slog(LOG_WARN, "cannot remove %s: %s", dir, strerror(errno));
}

int uninstall_run(const char *install_dir)
{
    static char names[MAX_TENANT_DIRS][GS_NAME_MAX];
    long count = uninstall_run_dir(names, MAX_TENANT_DIRS);
    if (count < 0) {
        slog(LOG_ERR, "nothing uninstalled: the server of %s still runs", options.run_dir);
        return 2;
    }
    uninstall_cdi_spec(names, (size_t)count);
    if (install_dir)
        uninstall_install_dir(install_dir);
    if (failures) {
        slog(LOG_ERR, "uninstall incomplete: %d step%s failed (above)", failures, failures == 1 ? "" : "s");
        return 2;
    }
    slog(LOG_INFO, "uninstalled from %s", options.run_dir);
    return 0;
}
