/*
 * Whether a client's process may use a GPU it declares. A UUID in a
 * DEVICE message is a claim: a process must not queue for, hold or count
 * memory on a GPU its container was not given. The proof is what the
 * kernel let the process do: with DEVICE it passes an open descriptor of
 * the GPU's device node /dev/nvidiaN (SCM_RIGHTS, transport.h), and the
 * server checks that
 *   - the NVIDIA driver lists the UUID (options.nvidia_dir/gpus), with the
 *     minor number N of its device node;
 *   - the descriptor is of a character device of the driver's major number
 *     (195; --nvidia-major, for tests) and minor N.
 * A container's device cgroup lets it open only the nodes of the GPUs it
 * was given (the NVIDIA container toolkit, CDI specs and device plugins
 * allow those alone): a node it makes itself with mknod for another GPU
 * cannot be opened, whatever its name or numbers. The server needs no
 * capability for this, and no look into the process's root. A process on
 * the host opens every node: it may use every GPU.
 *
 * Where the driver's list does not exist (fakecuda, or a server without
 * the host's /proc) nothing can be checked: with --verify-gpus auto (the
 * default) every UUID is accepted, with `on` every one refused.
 * MIG instances have UUIDs the driver's list does not show; a node that
 * uses them needs --verify-gpus off.
 */
#include "server.h"
#include "gpuslice/nvidia_info.h"

#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

bool gpu_access_checked(uint64_t now)
{
    return options.verify_gpus == VERIFY_GPUS_ON ||
           (options.verify_gpus == VERIFY_GPUS_AUTO && nvidia_gpus_known(now));
}

bool gpu_access_allowed(int node_fd, const uint8_t uuid[16], uint64_t now, char *why, size_t whylen)
{
    if (!gpu_access_checked(now))
        return true;
    int node_minor = gpu_minor_of(uuid, now);
    if (node_minor < 0) {
        snprintf(why, whylen, "declared a GPU this node's NVIDIA driver does not list");
        return false;
    }
    if (node_fd < 0) {
        snprintf(why, whylen, "declared a GPU it was not given (it could not open the device node nvidia%d: no "
                 "proof of access came with the declaration)", node_minor);
        return false;
    }
    struct stat st;
    if (fstat(node_fd, &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != options.nvidia_major ||
        minor(st.st_rdev) != (unsigned)node_minor) {
        snprintf(why, whylen, "declared a GPU it was not given (what it passed is not the device node nvidia%d)",
                 node_minor);
        return false;
    }
    return true;
}
