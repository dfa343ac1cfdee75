/*
 * The kubelet's side of gpuslice-dra: plugin registration (the kubelet's
 * plugin registration API v1, service pluginregistration.Registration, on
 * a socket in its plugins_registry directory) and the DRA node service (v1.DRAPlugin, and
 * v1beta1.DRAPlugin for 1.32-1.33 kubelets, on the plugin's own socket),
 * served with gRPC's C core over protobuf-c messages (dra/proto/). Those
 * are the names registration gives the services; their gRPC paths carry
 * the protos' full packages: /pluginregistration.Registration/GetInfo,
 * /k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources (and
 * v1beta1). Each claim of a NodePrepareResources or
 * NodeUnprepareResources call goes to dra_prepare or dra_unprepare
 * (dra.h), one call at a time, on the serving thread.
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

/* Makes both sockets and serves them until *stop becomes nonzero (a
 * signal handler sets it; it is looked at about once a second), then
 * removes them, the registration socket first. The plugin socket's
 * directories are made (mode 0750); the registration socket's directory
 * is the kubelet's and must exist. A stale socket (nobody listening) is
 * replaced; a socket another process serves, or a file that is not a
 * socket, is left alone and refused. A socket is removed at the end only
 * while it is still this call's. Returns 0, or -1 with a message in error
 * if a socket cannot be made or the server cannot go on. */
int dra_kubelet_serve(const struct dra_kubelet_options *options, volatile sig_atomic_t *stop, char *error,
                      size_t error_size);

#endif
