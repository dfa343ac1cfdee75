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

bool enter_container_mounts(const struct oci_container *c)
{
    if (getppid() == c->pid)
        return false; /* createContainer: already there */
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
