/*
 * The server's options: their defaults here, set from the command line by
 * main.c before the loop starts, read-only after. At the bottom of the
 * server's files, so that every one of them may read them.
 */
#include "server.h"
#include "gpuslice/nvidia_info.h"

/* Set from the command line before the loop starts; read-only after. */
struct server_options options = {
    .config_dirs = {"/etc/gpuslice/tenants.d"},
    .nconfig_dirs = 1,
    .config_dirs_text = "/etc/gpuslice/tenants.d",
    .run_dir = "/run/gpuslice",
    .cdi_dir = "/var/run/cdi",
    .shim_path = GPUSLICE_SHIM_DEFAULT,
    .grace_ns = 250000000ull,
    .preempt_ns = 2000000ull,
    .max_clients = 65536,
    .max_clients_per_tenant = 256,
    .max_devices = 256,
    .max_devices_per_tenant = 64,
    .device_linger_ns = 10000000000ull,
    .client_buffer = 65536,
    .metrics_addr = "127.0.0.1:29400",
    .nvidia_dir = "/proc/driver/nvidia",
    .nvidia_major = GS_NVIDIA_MAJOR,
    .verify_gpus = VERIFY_GPUS_AUTO,
    .on_server_down = ON_DOWN_WAIT,
    .pod_log_dir = "/var/log/containers",
};
