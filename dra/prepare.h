/*
 * What dra_prepare and dra_unprepare (dra.h) work with: set once by main
 * before the kubelet side starts serving, read by the serving thread.
 */
#ifndef GPUSLICE_DRA_PREPARE_H
#define GPUSLICE_DRA_PREPARE_H

#include "kube/kube.h"

struct dra_prepare_settings {
    const char *node_name;   /* a result in another pool is refused */
    const char *claims_dir;  /* one tenant file per claim: claim-UID.conf */
    const char *cdi_dir;     /* where gpuslice-server's spec is; "" or NULL: do not wait for it */
    const char *gpu_cdi_kind; /* answered beside the tenant's device as KIND=INDEX; NULL: none */
    long server_wait_ms;     /* how long a new tenant may take to reach the CDI spec */
    struct kube_api *api;
    const struct dra_slice_policy *policy; /* defaults for a claim that consumes no share or memory */
};

void dra_prepare_configure(const struct dra_prepare_settings *settings);

/* The tenant name of a claim: "claim-" and its UID. Returns false (and a
 * message) if the UID is not one. */
#define DRA_TENANT_PREFIX "claim-"
#endif
