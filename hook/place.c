/*
 * Read-only bind mounts at fixed paths inside the container's root. Paths
 * are resolved inside the root (openat2 RESOLVE_IN_ROOT), so a symlink in
 * the image can never send a mount to the host's files, and mounts are made
 * through /proc/self/fd, on exactly what was resolved. A mount point the
 * image lacks is made by scratch.c, never by writing into the image.
 */
#include "hook.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Before Linux 5.6 (no openat2): a walk that refuses symlinks and "..". */
static int open_walk(const struct root *r, const char *rel, int flags)
{
    char copy[4096];
    int n = snprintf(copy, sizeof copy, "%s", rel);
    if (n < 0 || (size_t)n >= sizeof copy) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int cur = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
    char *save = NULL;
    for (char *part = strtok_r(copy, "/", &save); part && cur >= 0; part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, ".") == 0)
            continue;
        int next = -1;
        struct stat st;
        if (strcmp(part, "..") == 0) {
            errno = EXDEV;
        } else if ((next = openat(cur, part, O_PATH | O_NOFOLLOW | O_CLOEXEC)) >= 0 && fstat(next, &st) == 0 &&
                   S_ISLNK(st.st_mode)) {
            close(next);
            next = -1;
            errno = ELOOP;
        }
        int saved = errno;
        close(cur);
        errno = saved;
        cur = next;
    }
    if (cur < 0 || (flags & ~(O_CLOEXEC | O_NOFOLLOW)) == O_PATH)
        return cur;
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", cur);
    int fd = open(self, flags | O_CLOEXEC);
    int saved = errno;
    close(cur);
    errno = saved;
    return fd;
}

int open_in_root(const struct root *r, const char *rel, int flags)
{
    if (!rel[0])
        rel = ".";
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC),
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    long fd = syscall(SYS_openat2, r->fd, rel, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS)
        return open_walk(r, rel, flags);
    return (int)fd;
}

int open_beneath(const struct root *r, const char *rel, int flags)
{
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    };
    long fd = syscall(SYS_openat2, r->fd, rel, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS)
        return open_walk(r, rel, flags); /* refuses symlinks and ".." too */
    return (int)fd;
}

/* The nearest existing ancestor of rel inside the root, as a relative path
 * ("" for the root itself). */
static void nearest_ancestor(const struct root *r, const char *rel, char *out, size_t cap)
{
    snprintf(out, cap, "%s", rel);
    for (;;) {
        char *slash = strrchr(out, '/');
        if (!slash) {
            out[0] = '\0';
            return;
        }
        *slash = '\0';
        int fd = open_in_root(r, out, O_PATH);
        if (fd >= 0) {
            close(fd);
            return;
        }
        if (errno != ENOENT)
            die("cannot resolve /%s in the container's root %s: %s", out, r->path, strerror(errno));
    }
}

void place_bind(struct root *r, int source, bool dir, const char *target)
{
    const char *rel = target + strspn(target, "/");
    /* The target itself is never followed: an image's link there would
     * send the mount onto whatever it names (the shim's own file, say). */
    int fd = open_in_root(r, rel, O_PATH | O_NOFOLLOW);
    if (fd < 0 && errno != ENOENT)
        die("cannot resolve %s in the container's root %s: %s", target, r->path, strerror(errno));
    if (fd < 0) {
        char ancestor[4096];
        nearest_ancestor(r, rel, ancestor, sizeof ancestor);
        scratch_make(r, ancestor, rel, dir);
        fd = open_in_root(r, rel, O_PATH | O_NOFOLLOW);
        if (fd < 0)
            die("cannot open the new mount point %s: %s", target, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        die("cannot stat %s in the container: %s", target, strerror(errno));
    if (S_ISLNK(st.st_mode))
        die("the image's %s is a symbolic link; gpuslice mounts %s there", target, dir ? "a directory" : "a file");
    if (dir != !!S_ISDIR(st.st_mode))
        die("the image's %s is %sa directory; gpuslice mounts %s there", target, dir ? "not " : "",
            dir ? "a directory" : "a file");

    char from[64], to[64];
    snprintf(from, sizeof from, "/proc/self/fd/%d", source);
    snprintf(to, sizeof to, "/proc/self/fd/%d", fd);
    if (mount(from, to, NULL, MS_BIND, NULL) != 0)
        die("cannot bind-mount onto %s in the container: %s", target, strerror(errno));
    close(fd);

    /* A bind mount takes its flags from the source's mount: make this one
     * read-only, nosuid and nodev, keeping noexec where the source has it. */
    struct statvfs sv;
    if (fstatvfs(source, &sv) != 0)
        die("cannot statvfs the source of %s: %s", target, strerror(errno));
    /* The mount as it is now at the target, never through a symlink, and
     * it must be the source's (a peer may rename the mounted-on file and
     * put a link in its place). */
    fd = open_in_root(r, rel, O_PATH | O_NOFOLLOW);
    if (fd < 0)
        die("cannot reopen %s after mounting it: %s", target, strerror(errno));
    struct stat mounted, src;
    if (fstat(fd, &mounted) != 0 || fstat(source, &src) != 0 || mounted.st_dev != src.st_dev ||
        mounted.st_ino != src.st_ino)
        die("%s is not the mount just made there (it changed meanwhile): not touching it", target);
    snprintf(to, sizeof to, "/proc/self/fd/%d", fd);
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        flags |= MS_NOEXEC;
    if (mount(NULL, to, NULL, flags, NULL) != 0)
        die("cannot make %s read-only in the container: %s", target, strerror(errno));
    close(fd);
}
