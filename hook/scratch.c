/*
 * Mount points the image lacks, made without writing into the image.
 *
 * Where the container's root is its own writable layer (the root of a
 * writable overlayfs mount: podman, CRI-O and containerd's overlayfs
 * snapshotter mount one for each container, over the image's read-only
 * layers), the missing directories and the empty file are made in it, as
 * the runtime makes the mount points of its own mounts (/etc/hosts,
 * /run/.containerenv): they land in the container's upper layer, never in
 * the image's, and whatever the container writes next to them lands there
 * too, as without the hook.
 *
 * Where the nearest existing directory is a tmpfs the runtime mounted (not
 * the image: podman's /run under --read-only, for instance), they are
 * simply made there. Anywhere else (a root that is a plain directory, which
 * other containers may share, as with podman --rootfs; a volume) the
 * directory is covered by an overlay: lower layer the directory itself,
 * upper layer on a private tmpfs, so the new entries exist only in the
 * container's view and the directory's files are untouched, read-only root
 * or not. What the container writes under such a directory then stays in
 * memory (charged to the container's memory cgroup, which writes it) and
 * goes when it stops. The mounts the runtime had already made below that
 * directory (podman and CRI-O bind /etc/hosts, /etc/resolv.conf, ...) are
 * bound to the side first and bound back on top of the overlay. Where the
 * root is read-only, so is the overlay.
 *
 * The tmpfs is mounted at a staging directory of the host's gpuslice run
 * directory, in the container's mount namespace only, and unmounted when
 * the hook is done: an overlay keeps private references to its layers.
 */
#include "hook.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MAX_OVERLAYS 8
#define MAX_SUBMOUNTS 64

/* The hook's scratch bookkeeping (one thread, one run). */
static char staging[4096];
static bool staging_mounted;
static struct overlay {
    int fd;                  /* O_PATH: its root, for the read-only remount */
    unsigned long flags;     /* MS_NOSUID, MS_NODEV, MS_NOEXEC of what it covers */
    bool readonly;
} overlays[MAX_OVERLAYS];
static size_t noverlays;

void scratch_init(const char *path)
{
    if (strpbrk(path, ",:\\"))
        die("the staging directory %s has a ',', ':' or '\\' in its name (overlay options cannot hold it)", path);
    int n = snprintf(staging, sizeof staging, "%s", path);
    if (n < 0 || (size_t)n >= sizeof staging - 64)
        die("the staging directory %s is too long", path);
}

static void staging_mount(void)
{
    if (staging_mounted)
        return;
    if (mkdir(staging, 0700) != 0 && errno != EEXIST)
        die("cannot create %s: %s", staging, strerror(errno));
    /* No size of its own: the kernel's default (half the memory) bounds it,
     * and a container's writes are charged to its own memory cgroup. */
    if (mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") != 0)
        die("cannot mount a tmpfs at %s: %s", staging, strerror(errno));
    staging_mounted = true;
}

/* Makes each missing component of rest (relative to dirfd) a directory,
 * the last an empty file unless dir. */
static void create_missing(int dirfd, const char *rest, bool dir, const char *where)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", rest);
    int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (cur < 0)
        die("dup: %s", strerror(errno));
    char *save = NULL;
    char *part = strtok_r(copy, "/", &save);
    while (part) {
        char *next = strtok_r(NULL, "/", &save);
        if (next || dir) {
            if (mkdirat(cur, part, 0755) != 0 && errno != EEXIST)
                die("cannot create %s/%s in the container: %s", where, part, strerror(errno));
            int fd = openat(cur, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0)
                die("cannot open %s/%s in the container: %s", where, part, strerror(errno));
            close(cur);
            cur = fd;
        } else {
            int fd = openat(cur, part, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (fd < 0 || close(fd) != 0)
                die("cannot create %s/%s in the container: %s", where, part, strerror(errno));
        }
        part = next;
    }
    close(cur);
}

/* Undoes /proc/self/mountinfo's octal escapes in place. */
static void unescape(char *s)
{
    char *out = s;
    for (char *in = s; *in;) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' && in[3] >= '0' &&
            in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
}

/* Splits a line of /proc/self/mountinfo ("id parent major:minor root
 * mountpoint ...") in place: its mount ID, its parent's, its mount point
 * unescaped and, if root is not NULL, the path of its root within its
 * file system, unescaped. False for a line that is not one. */
static bool mountinfo_line(char *line, int *id, int *parent, char **point, char **root)
{
    char *save = NULL, *fields[5];
    for (int i = 0; i < 5; i++)
        if (!(fields[i] = strtok_r(i ? NULL : line, " ", &save)))
            return false;
    *id = atoi(fields[0]);
    *parent = atoi(fields[1]);
    unescape(fields[4]);
    *point = fields[4];
    if (root) {
        unescape(fields[3]);
        *root = fields[3];
    }
    return true;
}

/* The mount points strictly below dir, outermost only (a recursive bind
 * carries the ones below them), with their mount IDs. Returns how many went
 * into out. */
static size_t submounts(const char *dir, char out[][4096], int ids[], size_t cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        die("cannot read /proc/self/mountinfo: %s", strerror(errno));
    size_t n = 0, dlen = strlen(dir);
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        int id, parent;
        char *field;
        if (!mountinfo_line(line, &id, &parent, &field, NULL))
            continue;
        if (strncmp(field, dir, dlen) != 0 || field[dlen] != '/')
            continue;
        bool covered = false;
        for (size_t i = 0; i < n && !covered; i++) {
            size_t l = strlen(out[i]);
            if (strcmp(out[i], field) == 0) {
                ids[i] = id; /* mounted again on the same path: the later one is on top */
                covered = true;
            } else {
                covered = strncmp(out[i], field, l) == 0 && field[l] == '/';
            }
        }
        if (covered)
            continue;
        /* a later mount may contain earlier ones: drop those */
        size_t flen = strlen(field);
        for (size_t i = 0; i < n;) {
            if (strncmp(out[i], field, flen) == 0 && out[i][flen] == '/') {
                --n;
                memmove(out[i], out[n], sizeof out[i]);
                ids[i] = ids[n];
            } else {
                i++;
            }
        }
        if (n == cap)
            die("more than %zu mounts below %s", cap, dir);
        ids[n] = id;
        snprintf(out[n++], 4096, "%s", field);
    }
    fclose(f);
    return n;
}

/* The mount ID of what fd is open on (/proc/self/fdinfo), or -1. */
static int mount_id_of(int fd)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int id = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "mnt_id: %d", &id) == 1)
            break;
    fclose(f);
    return id;
}

/* The parent mount ID, the mount point and (if root is not NULL) the root
 * within its file system of mount `id`, from /proc/self/mountinfo; false
 * if it is not there. */
static bool mount_entry(int id, int *parent, char *point, size_t cap, char *root, size_t root_cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return false;
    char line[8192];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        int line_id, line_parent;
        char *mount_point, *mount_root;
        if (!mountinfo_line(line, &line_id, &line_parent, &mount_point, &mount_root) || line_id != id)
            continue;
        *parent = line_parent;
        snprintf(point, cap, "%s", mount_point);
        if (root)
            snprintf(root, root_cap, "%s", mount_root);
        found = true;
    }
    fclose(f);
    return found;
}

/* Opens rel below the directory at dirfd without following a symlink or
 * leaving it, and checks that it is the root of mount `id`: a directory on
 * the way that was swapped meanwhile (another container writing to a
 * shared volume or root) fails here instead of redirecting a mount to the
 * host's files. Dies otherwise. */
static int open_mount_below(int dirfd, const char *rel, int id, const char *shown)
{
    struct root below = {.fd = dirfd, .path = shown};
    int fd = open_beneath(&below, rel, O_PATH);
    if (fd < 0)
        die("cannot open the mount %s: %s", shown, strerror(errno));
    if (mount_id_of(fd) != id)
        die("%s is not the mount it was a moment ago (a directory on its path changed): not touching it", shown);
    return fd;
}

/* Covers the directory open at dirfd (absolute path dir) with an overlay
 * whose upper layer is on the staging tmpfs. */
static void overlay_over(const struct root *r, const char *ancestor_rel, int dirfd, const char *dir, bool readonly,
                         unsigned long flags)
{
    if (noverlays == MAX_OVERLAYS)
        die("too many overlays");
    staging_mount();
    size_t index = noverlays;
    char layer[4128], upper[4160], work[4160];
    snprintf(layer, sizeof layer, "%s/%zu", staging, index);
    snprintf(upper, sizeof upper, "%s/upper", layer);
    snprintf(work, sizeof work, "%s/work", layer);
    struct stat st;
    if (fstat(dirfd, &st) != 0)
        die("cannot stat %s: %s", dir, strerror(errno));
    /* The overlay's root takes the upper directory's owner and mode. */
    if (mkdir(layer, 0700) != 0 || mkdir(upper, 0755) != 0 || mkdir(work, 0700) != 0 ||
        chown(upper, st.st_uid, st.st_gid) != 0 || chmod(upper, st.st_mode & 07777) != 0)
        die("cannot prepare the overlay layers in %s: %s", layer, strerror(errno));

    /* The runtime's mounts below dir, by the paths mountinfo gives; each
     * is opened below dirfd and checked before anything is mounted, and
     * every mount is made through /proc/self/fd on what was opened, never
     * by walking a path again (the host's root is this process's root). */
    static char below[MAX_SUBMOUNTS][4096];
    static int ids[MAX_SUBMOUNTS];
    size_t nbelow = submounts(dir, below, ids, MAX_SUBMOUNTS);
    size_t dlen = strlen(dir);
    for (size_t i = 0; i < nbelow; i++) {
        char aside[4160], from[64];
        snprintf(aside, sizeof aside, "%s/m%zu", layer, i);
        int mfd = open_mount_below(dirfd, below[i] + dlen + 1, ids[i], below[i]);
        struct stat mst;
        if (fstat(mfd, &mst) != 0)
            die("cannot stat the mount %s: %s", below[i], strerror(errno));
        int made;
        if (S_ISDIR(mst.st_mode)) {
            made = mkdir(aside, 0700);
        } else {
            int fd = open(aside, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            made = fd < 0 ? -1 : close(fd);
        }
        snprintf(from, sizeof from, "/proc/self/fd/%d", mfd);
        if (made != 0 || mount(from, aside, NULL, MS_BIND | MS_REC, NULL) != 0)
            die("cannot set the mount %s aside: %s", below[i], strerror(errno));
        close(mfd);
    }

    char options[9000], onto[64];
    snprintf(options, sizeof options, "lowerdir=/proc/self/fd/%d,upperdir=%s,workdir=%s", dirfd, upper, work);
    snprintf(onto, sizeof onto, "/proc/self/fd/%d", dirfd);
    if (mount("overlay", onto, "overlay", flags, options) != 0)
        die("cannot mount an overlay over %s: %s", dir, strerror(errno));
    /* The overlay's root: what the same path inside the root leads to now
     * (dirfd itself names the directory under it). */
    int ofd = open_in_root(r, ancestor_rel, O_PATH | O_DIRECTORY);
    struct statfs osf;
    if (ofd < 0 || fstatfs(ofd, &osf) != 0 || osf.f_type != OVERLAYFS_SUPER_MAGIC)
        die("cannot open the overlay over %s", dir);
    /* ... and it must be this overlay: a mount on the covered directory's
     * mount, at its path (not a directory a peer swapped in meanwhile). */
    int parent = -1;
    char point[4096];
    if (!mount_entry(mount_id_of(ofd), &parent, point, sizeof point, NULL, 0) || parent != mount_id_of(dirfd) ||
        strcmp(point, dir) != 0)
        die("the overlay over %s is not where it was mounted (a directory on its path changed): not touching it",
            dir);
    for (size_t i = 0; i < nbelow; i++) {
        char aside[4160], to[64];
        snprintf(aside, sizeof aside, "%s/m%zu", layer, i);
        struct root over = {.fd = ofd, .path = dir};
        int tfd = open_beneath(&over, below[i] + dlen + 1, O_PATH);
        if (tfd < 0)
            die("cannot open %s in the overlay: %s", below[i], strerror(errno));
        snprintf(to, sizeof to, "/proc/self/fd/%d", tfd);
        if (mount(aside, to, NULL, MS_BIND | MS_REC, NULL) != 0)
            die("cannot bind the mount %s back: %s", below[i], strerror(errno));
        close(tfd);
    }
    overlays[index].fd = ofd;
    overlays[index].flags = flags;
    overlays[index].readonly = readonly;
    noverlays++;
}

bool scratch_is_own_layer(const struct root *r)
{
    struct statfs sf;
    struct statvfs sv;
    if (fstatfs(r->fd, &sf) != 0 || fstatvfs(r->fd, &sv) != 0)
        die("cannot stat the container's root %s: %s", r->path, strerror(errno));
    if (sf.f_type != OVERLAYFS_SUPER_MAGIC || (sv.f_flag & ST_RDONLY))
        return false;
    /* The root of that overlay, mounted at the root's path (runc binds the
     * root onto itself; the bind is of the overlay's root), not a directory
     * somewhere inside an overlay. */
    char self[64], at[4096], point[4096], root[4096];
    snprintf(self, sizeof self, "/proc/self/fd/%d", r->fd);
    ssize_t n = readlink(self, at, sizeof at - 1);
    if (n <= 0 || (size_t)n >= sizeof at - 1)
        return false;
    at[n] = '\0';
    int parent;
    return mount_entry(mount_id_of(r->fd), &parent, point, sizeof point, root, sizeof root) &&
           strcmp(root, "/") == 0 && strcmp(point, at) == 0;
}

void scratch_make(struct root *r, const char *ancestor_rel, const char *rel, bool dir)
{
    const char *rest = rel + strlen(ancestor_rel) + (ancestor_rel[0] ? 1 : 0);
    int afd = open_in_root(r, ancestor_rel, O_PATH | O_DIRECTORY);
    if (afd < 0)
        die("cannot open /%s in the container: %s", ancestor_rel, strerror(errno));
    struct statfs sf;
    struct statvfs sv;
    struct stat ast, rst;
    if (fstatfs(afd, &sf) != 0 || fstatvfs(afd, &sv) != 0 || fstat(afd, &ast) != 0 || fstat(r->fd, &rst) != 0)
        die("cannot stat /%s in the container: %s", ancestor_rel, strerror(errno));
    char where[4200];
    snprintf(where, sizeof where, "/%s", ancestor_rel);
    int ancestor_mount = mount_id_of(afd);
    if ((r->own_layer && ancestor_mount >= 0 && ancestor_mount == mount_id_of(r->fd)) ||
        (sf.f_type == TMPFS_MAGIC && ast.st_dev != rst.st_dev && !(sv.f_flag & ST_RDONLY))) {
        /* the container's own layer, or the runtime's tmpfs: not the image */
        create_missing(afd, rest, dir, where);
        close(afd);
        return;
    }
    if (!ancestor_rel[0])
        die("the image has no /%.*s: gpuslice needs the directory above %s/%s to exist in the image", (int)strcspn(rel, "/"),
            rel, where[1] ? where : "", rest);
    char self[64], dir_path[4096];
    snprintf(self, sizeof self, "/proc/self/fd/%d", afd);
    ssize_t n = readlink(self, dir_path, sizeof dir_path - 1);
    if (n <= 0 || (size_t)n >= sizeof dir_path - 1)
        die("cannot tell where /%s is: %s", ancestor_rel, n < 0 ? strerror(errno) : "path too long");
    dir_path[n] = '\0';
    /* The overlay keeps what the covered mount forbids. */
    unsigned long flags = ((sv.f_flag & ST_NOSUID) ? MS_NOSUID : 0) | ((sv.f_flag & ST_NODEV) ? MS_NODEV : 0) |
                          ((sv.f_flag & ST_NOEXEC) ? MS_NOEXEC : 0);
    overlay_over(r, ancestor_rel, afd, dir_path, r->readonly || (sv.f_flag & ST_RDONLY), flags);
    close(afd);
    afd = open_in_root(r, ancestor_rel, O_PATH | O_DIRECTORY);
    if (afd < 0)
        die("cannot open /%s through the overlay: %s", ancestor_rel, strerror(errno));
    create_missing(afd, rest, dir, where);
    close(afd);
}

void scratch_finish(void)
{
    for (size_t i = 0; i < noverlays; i++) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", overlays[i].fd);
        if (overlays[i].readonly &&
            mount(NULL, self, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | overlays[i].flags, NULL) != 0)
            die("cannot make an overlay read-only: %s", strerror(errno));
        close(overlays[i].fd);
    }
    if (staging_mounted && umount2(staging, MNT_DETACH) != 0)
        die("cannot unmount %s: %s", staging, strerror(errno));
}
