/*
 * Where gpuslice puts things inside a container, whichever way it gets
 * there (the CDI spec gpuslice-server writes, or gpuslice-hook): the
 * tenant's socket directory, the shim, and the preload list that makes
 * every process of the container load the shim even without LD_PRELOAD.
 * The server, the hook and the shim include this, so they agree.
 */
#ifndef GPUSLICE_CONTAINERS_H
#define GPUSLICE_CONTAINERS_H

/* The tenant's directory RUNDIR/tenants/NAME, mounted read-only. */
#define GS_CONTAINER_RUN_DIR "/run/gpuslice"
/* In a tenant's directory: its socket, and the file that says what its
 * shims do while no server answers. The server writes the file (words
 * separated by white space, "wait" or "open"; a shim follows the first
 * word it knows, and waits if it knows none). Where GS_CONTAINER_RUN_DIR
 * holds either, the shim is inside a tenant and takes its socket and that
 * policy from there, never from its environment (shim/gs_settings.c);
 * elsewhere its default GPUSLICE_SOCKET is that directory's socket. */
#define GS_TENANT_SOCKET "gpuslice.sock"
#define GS_TENANT_POLICY_FILE "on-server-down"
/* The shim, mounted read-only from the host's copy. */
#define GS_CONTAINER_SHIM "/usr/lib/gpuslice/libgpuslice.so"
/* A one-line file naming GS_CONTAINER_SHIM, mounted read-only. */
#define GS_CONTAINER_PRELOAD "/etc/ld.so.preload"

/* The file the server writes, RUNDIR/GS_PRELOAD_FILE, that is mounted at
 * GS_CONTAINER_PRELOAD: in a directory of the server's own, never in a
 * tenant's. */
#define GS_PRELOAD_FILE "cdi/ld.so.preload"

/* The CDI device kind (one device per tenant) and the OCI annotation the
 * hook reads the tenant from. */
#define GS_CDI_KIND "gpuslice.io/tenant"
#define GS_TENANT_ANNOTATION "gpuslice.io/tenant"

#endif
