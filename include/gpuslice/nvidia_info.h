/*
 * What the NVIDIA driver says of each GPU in its procfs directory,
 * NVIDIA_DIR/gpus/BUS_ID/information (NVIDIA_DIR is /proc/driver/nvidia):
 * "GPU UUID: GPU-...", "Device Minor: N" (its device node is /dev/nvidiaN)
 * and "Model: ...". Read by the server (the GPUs of the node) and by the
 * shim (which device node proves its access to a GPU it declares).
 */
#ifndef GPUSLICE_NVIDIA_INFO_H
#define GPUSLICE_NVIDIA_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GS_NVIDIA_MAJOR 195 /* the character devices of the NVIDIA driver */

struct gs_nvidia_gpu {
    uint8_t uuid[16];
    int minor;      /* -1 if the file does not say */
    char model[96]; /* "" if the file does not say */
};

/* Reads BUS/information below the directory gpus_fd (NVIDIA_DIR/gpus);
 * false if it cannot be read or names no UUID. */
bool gs_nvidia_read_information(int gpus_fd, const char *bus, struct gs_nvidia_gpu *gpu);

/* The minor number of the device node of the GPU uuid, as the driver's
 * directory nvidia_dir lists it; -1 if it does not (or cannot be read). */
int gs_nvidia_minor_of(const char *nvidia_dir, const uint8_t uuid[16]);

#endif
