/*
 * The proof that this process may use a GPU it declares: an open
 * descriptor of the GPU's device node, passed to the server with the
 * DEVICE message (gs_conn.c; the server checks it, tokenserver/
 * gpu_access.c). The node is the one the NVIDIA driver lists for the
 * GPU's UUID ("Device Minor: N" in /proc/driver/nvidia/gpus/BUS/
 * information: /dev/nvidiaN). A container's device cgroup lets it open
 * only the nodes of the GPUs it was given.
 *
 * GPUSLICE_NVIDIA_DIR and GPUSLICE_DEVICE_DIR move the driver's directory
 * and /dev (for tests, which stand directories in for both). Whatever they
 * name, the server accepts only a descriptor of the real node: they cannot
 * widen what the process may use.
 */
#include "gs_node.h"
#include "gs_log.h"
#include "gs_settings.h"
#include "gpuslice/nvidia_info.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

int gs_node_open(const uint8_t uuid[16])
{
    const char *nvidia_dir = gs_getenv("GPUSLICE_NVIDIA_DIR"), *dev_dir = gs_getenv("GPUSLICE_DEVICE_DIR");
    int minor = gs_nvidia_minor_of(nvidia_dir && *nvidia_dir ? nvidia_dir : "/proc/driver/nvidia", uuid);
    if (minor < 0)
        return -1; /* no NVIDIA driver here (or it does not list the GPU): the server checks nothing either */
    char path[4200];
    if (snprintf(path, sizeof path, "%s/nvidia%d", dev_dir && *dev_dir ? dev_dir : "/dev", minor) >= (int)sizeof path)
        return -1;
    int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        gs_log(GS_LOG_DEBUG, "%s: %s: the server will refuse this GPU", path, strerror(errno));
    return fd;
}
