/*
 * Getting into the container's mount namespace, whichever stage the hook
 * runs at. The runtime creates the container's mounts in a namespace of its
 * own and pivots into the root only after the hooks below, so in every
 * case the root is still at its host path, and mounts made under it are
 * the container's:
 *
 *   createContainer  runc runs the hook from the container's init, in the
 *                    container's namespaces; state.pid is that init's PID
 *                    as the container sees it (1 with a PID namespace), and
 *                    /proc is still the host's, so /proc/PID is not the
 *                    container. The hook is the init's child: getppid()
 *                    equals state.pid, and nothing needs entering.
 *   createRuntime,   the hook runs in the runtime's (host) namespaces and
 *   prestart         state.pid is the container's init as the host sees
 *                    it: setns into /proc/PID/ns/mnt.
 */
#include "hook.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether /proc is of this process's PID namespace: only then does
 * /proc/PID name the process the runtime means. */
static bool proc_is_ours(void)
{
    char self[32];
    ssize_t n = readlink("/proc/self", self, sizeof self - 1);
    if (n <= 0)
        return false;
    self[n] = '\0';
    char mine[32];
    snprintf(mine, sizeof mine, "%d", (int)getpid());
    return strcmp(self, mine) == 0;
}

bool enter_container_mounts(const struct oci_container *c)
{
    if (getppid() == c->pid)
        return false; /* createContainer: already there */
    /* Not the init's child, and /proc is not of our PID namespace (the
     * hook runs inside the container's, through a wrapper): state.pid
     * cannot be found there, and /proc/PID would be another process. */
    if (!proc_is_ours())
        die("container %s: /proc is not of the hook's PID namespace, so its init (pid %d) cannot be found "
            "there; run gpuslice-hook directly from the runtime (not through a wrapper) at createContainer",
            c->id, (int)c->pid);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)c->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die("cannot open %s (container %s): %s", path, c->id, strerror(errno));
    struct stat theirs, ours;
    if (fstat(fd, &theirs) != 0 || stat("/proc/self/ns/mnt", &ours) != 0)
        die("cannot stat the mount namespaces: %s", strerror(errno));
    if (theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev) {
        close(fd);
        return false;
    }
    if (setns(fd, CLONE_NEWNS) != 0)
        die("cannot enter the mount namespace of container %s (pid %d): %s", c->id, (int)c->pid,
            strerror(errno));
    close(fd);
    return true;
}
