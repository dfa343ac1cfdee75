/*
 * The kubelet's side of gpuslice-dra: plugin registration (the kubelet's
 * pluginregistration.v1 Registration service, on a socket in its
 * plugins_registry directory) and the DRA node service (v1.DRAPlugin, and
 * v1beta1.DRAPlugin for 1.32-1.33 kubelets, on the plugin's own socket),
 * served with gRPC's C core over protobuf-c messages. Each claim of a
 * NodePrepareResources or NodeUnprepareResources call goes to dra_prepare
 * or dra_unprepare (dra.h), one call at a time.
 */
#ifndef GPUSLICE_DRA_KUBELET_H
#define GPUSLICE_DRA_KUBELET_H

#include <signal.h>
#include <stddef.h>

struct dra_kubelet_options {
    const char *driver_name;         /* DRA_DRIVER_NAME */
    const char *registration_socket; /* e.g. /var/lib/kubelet/plugins_registry/gpuslice.io-reg.sock */
    const char *plugin_socket;       /* e.g. /var/lib/kubelet/plugins/gpuslice.io/dra.sock */
    /* Called about once a second from the serving thread, between calls
     * (may be NULL). */
    void (*tick)(void *arg);
    void *tick_arg;
};

/* Makes both sockets (replacing stale ones) and serves them until *stop
 * becomes nonzero (a signal handler sets it); removes them then. Returns 0,
 * or -1 with a message in error if a socket cannot be made. */
int dra_kubelet_serve(const struct dra_kubelet_options *options, volatile sig_atomic_t *stop, char *error,
                      size_t error_size);

#endif
