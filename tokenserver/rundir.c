/*
 * The run directory: RUN_DIR/admin.sock, RUN_DIR/tenants/NAME/gpuslice.sock,
 * RUN_DIR/tenants/NAME/on-server-down and RUN_DIR/cdi/ld.so.preload.
 *
 * A tenant's directory is mounted into its containers, so a tenant can put
 * anything there at any moment, symlinks included. So nothing in it is
 * ever reached through a path: RUN_DIR and RUN_DIR/tenants are opened once,
 * a tenant's directory is opened relative to them with O_NOFOLLOW, and a
 * socket is bound by a name relative to its directory (through fchdir,
 * bind() never follows a symlink at the last component), with its mode
 * set by the umask at creation, and a file is written by a name relative
 * to its directory: created afresh (O_EXCL, O_NOFOLLOW) under a temporary
 * name and renamed into place. The server never follows anything inside
 * a tenant's directory, chmods only a file it just made (through its
 * descriptor), and removes only the socket it made (compared by inode) and
 * whatever is at its temporary file's name (a symlink itself, never its
 * target). Directories are never removed.
 * RUN_DIR/cdi (cdi.c), which containers get a file of, is the server's
 * own, beside RUN_DIR/tenants and never inside it. RUN_DIR/server.lock
 * (runlock.c) keeps a second server out of a run directory in use.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* RUN_DIR, RUN_DIR/tenants and RUN_DIR/server.lock (locked), open for
 * the server's life; owned by the loop's thread. */
static int run_fd = -1, tenants_fd = -1, lock_fd = -1;

static int mkdir_p(const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Opens NAME in dir_fd as a directory, creating it first if missing. */
static int open_subdir(int dir_fd, const char *name)
{
    if (mkdirat(dir_fd, name, 0755) != 0 && errno != EEXIST)
        return -1;
    return openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int rundir_open(void)
{
    /* RUN_DIR itself is the host's (root's) choice: created if missing, and
     * followed like any path an administrator gives. */
    if (mkdir_p(options.run_dir) != 0 ||
        (run_fd = open(options.run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        slog(LOG_ERR, "cannot create or open %s: %s", options.run_dir, strerror(errno));
        return -1;
    }
    tenants_fd = open_subdir(run_fd, "tenants");
    if (tenants_fd < 0) {
        slog(LOG_ERR, "cannot create or open %s/tenants (a directory, not a symlink): %s", options.run_dir,
             strerror(errno));
        return -1;
    }
    return 0;
}

int rundir_lock(void)
{
    int fd = runlock_open(run_fd);
    if (fd < 0) {
        slog(LOG_ERR, "cannot open %s/%s: %s", options.run_dir, RUNLOCK_NAME, strerror(errno));
        return -1;
    }
    int rc = runlock_take(fd);
    if (rc != 0) {
        long pid = rc > 0 ? runlock_holder(fd) : 0;
        char who[48] = "";
        if (pid > 0)
            snprintf(who, sizeof who, " (pid %ld)", pid);
        if (rc > 0)
            slog(LOG_ERR, "another gpuslice-server%s serves %s (it holds %s/%s): not starting a second one on the "
                          "same run directory; stop that one first, or give this one another --run-dir",
                 who, options.run_dir, options.run_dir, RUNLOCK_NAME);
        else
            slog(LOG_ERR, "cannot lock %s/%s: %s", options.run_dir, RUNLOCK_NAME, strerror(errno));
        if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        return -1;
    }
    runlock_mark(fd);
    lock_fd = fd;
    return 0;
}

#define CLIENTS_MARK ".clients"

bool rundir_clients_marked(void)
{
    struct stat st;
    return run_fd >= 0 && fstatat(run_fd, CLIENTS_MARK, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

void rundir_mark_clients(bool mark)
{
    if (run_fd < 0)
        return;
    if (mark) {
        int fd = openat(run_fd, CLIENTS_MARK, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            slog(LOG_WARN, "cannot create %s/%s: %s", options.run_dir, CLIENTS_MARK, strerror(errno));
        else if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
    } else if (unlinkat(run_fd, CLIENTS_MARK, 0) != 0 && errno != ENOENT) {
        slog(LOG_WARN, "cannot remove %s/%s: %s", options.run_dir, CLIENTS_MARK, strerror(errno));
    }
}

void rundir_close(void)
{
    if (tenants_fd >= 0 && close(tenants_fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    if (run_fd >= 0 && close(run_fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    /* The lock goes last, with the process's other descriptors at exit. */
    if (lock_fd >= 0 && close(lock_fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    tenants_fd = run_fd = lock_fd = -1;
}

int rundir_tenant_dir(const char *name)
{
    if (tenants_fd < 0) {
        errno = EBADF;
        return -1;
    }
    return open_subdir(tenants_fd, name);
}

int rundir_admin_dir(void)
{
    return run_fd;
}

int rundir_server_dir(const char *name, mode_t mode)
{
    if (run_fd < 0) {
        errno = EBADF;
        return -1;
    }
    if (mkdirat(run_fd, name, mode) != 0 && errno != EEXIST)
        return -1;
    return openat(run_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int rundir_write_file(int dir_fd, const char *name, const char *text, mode_t mode)
{
    char tmp[256];
    int n = snprintf(tmp, sizeof tmp, ".%s.tmp", name);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* A temporary file a killed server left (or anything a tenant put
     * there, a symlink itself and not its target) goes first: O_EXCL then
     * makes a new one, with the mode given here. */
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
     * the umask: the mode is set on the descriptor of the file just made. */
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

/* bind() to NAME inside dir_fd: chdir there for the call, then back to /. */
static int bind_at(int fd, int dir_fd, const char *name)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    if (len >= sizeof addr.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(addr.sun_path, name, len + 1);
    if (fchdir(dir_fd) != 0)
        return -1;
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    int saved = errno;
    if (chdir("/") != 0)
        slog(LOG_ERR, "chdir /: %s", strerror(errno));
    errno = saved;
    return rc;
}

int rundir_listen(int dir_fd, const char *name, mode_t mode, int backlog, struct bound_socket *out)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc = -1;
    /* Whatever is at NAME is replaced: unlinkat removes a symlink itself,
     * never its target. Someone racing to put something back makes bind
     * fail with EADDRINUSE; try again a few times. */
    for (int attempt = 0; attempt < 8 && rc != 0; attempt++) {
        if (unlinkat(dir_fd, name, 0) != 0 && errno != ENOENT)
            break;
        mode_t old = umask(0777 & ~mode);
        rc = bind_at(fd, dir_fd, name);
        int saved = errno;
        umask(old);
        errno = saved;
        if (rc != 0 && errno != EADDRINUSE)
            break;
    }
    struct stat st;
    if (rc != 0 || fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || listen(fd, backlog) != 0) {
        int saved = errno;
        if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        errno = saved;
        return -1;
    }
    /* st is what was at NAME just after bind: our socket, unless someone
     * already swapped it, in which case we will never remove theirs. */
    out->fd = fd;
    out->dev = S_ISSOCK(st.st_mode) ? st.st_dev : 0;
    out->ino = S_ISSOCK(st.st_mode) ? st.st_ino : 0;
    return 0;
}

void rundir_unlisten(int dir_fd, const char *name, struct bound_socket *s)
{
    if (s->fd < 0)
        return;
    if (close(s->fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    s->fd = -1;
    struct stat st;
    if (dir_fd >= 0 && s->ino && fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) &&
        st.st_dev == s->dev && st.st_ino == s->ino && unlinkat(dir_fd, name, 0) != 0 && errno != ENOENT)
        slog(LOG_WARN, "cannot remove %s: %s", name, strerror(errno));
}
