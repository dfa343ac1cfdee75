/*
 * Whether a client's process may use a GPU it declares. A UUID in a
 * DEVICE message is a claim: a process must not queue for, hold or count
 * memory on a GPU its container was not given. The server checks what the
 * kernel shows of the process instead:
 *   - the NVIDIA driver lists the UUID (options.nvidia_dir/gpus), with the
 *     minor number N of its device node;
 *   - the process's root has that node: options.device_node_dir/nvidiaN
 *     (by default /dev/nvidiaN), reached from /proc/PID/root one component
 *     at a time without following a symlink (a container's symlink to
 *     "/dev/nvidia1" would otherwise name the host's node), is a character
 *     device of the driver's major number (195) and minor N. Container
 *     runtimes (the NVIDIA container toolkit, CDI specs, device plugins)
 *     create only the nodes of the GPUs a container was allocated.
 * A process on the host sees every node: it may use every GPU.
 *
 * Where the driver's list does not exist (fakecuda, or a server without
 * the host's /proc) nothing can be checked: with --verify-gpus auto (the
 * default) every UUID is accepted, with `on` every one refused.
 * MIG instances have UUIDs the driver's list does not show; a node that
 * uses them needs --verify-gpus off.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define NVIDIA_MAJOR 195 /* the character devices of the NVIDIA driver */

bool gpu_access_checked(uint64_t now)
{
    return options.verify_gpus == VERIFY_GPUS_ON ||
           (options.verify_gpus == VERIFY_GPUS_AUTO && nvidia_gpus_known(now));
}

static void close_quietly(int fd)
{
    if (fd >= 0 && close(fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
}

/* Opens the directory `path` (absolute) below root_fd, component by
 * component, following no symlink; -1 with errno on failure. */
static int open_dir_beneath(int root_fd, const char *path)
{
    int fd = dup(root_fd);
    if (fd < 0)
        return -1;
    char part[256];
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 0)
            break;
        if (n >= sizeof part || (n == 2 && p[0] == '.' && p[1] == '.')) {
            close_quietly(fd);
            errno = EINVAL;
            return -1;
        }
        memcpy(part, p, n);
        part[n] = '\0';
        p += n;
        if (n == 1 && part[0] == '.')
            continue;
        int next = openat(fd, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int saved = errno;
        close_quietly(fd);
        if (next < 0) {
            errno = saved;
            return -1;
        }
        fd = next;
    }
    return fd;
}

bool gpu_access_allowed(uint32_t pid, const uint8_t uuid[16], uint64_t now, char *why, size_t whylen)
{
    if (!gpu_access_checked(now))
        return true;
    int node_minor = gpu_minor_of(uuid, now);
    if (node_minor < 0) {
        snprintf(why, whylen, "declared a GPU this node's NVIDIA driver does not list");
        return false;
    }
    if (pid == 0) {
        snprintf(why, whylen, "declared a GPU, and the server cannot see the process to check it may use it");
        return false;
    }
    char root[64], node[32];
    snprintf(root, sizeof root, "/proc/%u/root", pid);
    snprintf(node, sizeof node, "nvidia%d", node_minor);
    int root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        snprintf(why, whylen, "declared a GPU, and the server cannot see the process's root to check it may use it");
        return false;
    }
    int dir_fd = open_dir_beneath(root_fd, options.device_node_dir);
    close_quietly(root_fd);
    struct stat st;
    bool ok = dir_fd >= 0 && fstatat(dir_fd, node, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode) &&
              major(st.st_rdev) == NVIDIA_MAJOR && minor(st.st_rdev) == (unsigned)node_minor;
    close_quietly(dir_fd);
    if (!ok)
        snprintf(why, whylen, "declared a GPU it was not given (no device node %s/%s in its container)",
                 options.device_node_dir, node);
    return ok;
}
