/*
 * gpuslice-dra: what its parts share. The kubelet side (dra/kubelet/:
 * plugin registration and the DRA node service over gRPC) calls
 * dra_prepare and dra_unprepare (dra/prepare.c) for each claim the kubelet
 * names; those read the claim from the Kubernetes API (dra/kube/) and
 * keep one tenant file per claim, the checkpoint of what was prepared.
 */
#ifndef GPUSLICE_DRA_H
#define GPUSLICE_DRA_H

#include <stddef.h>

/* The driver's name: in ResourceSlices, DeviceClasses, claims' results and
 * opaque configuration, and the kubelet plugin's name. */
#define DRA_DRIVER_NAME "gpuslice.io"
/* The most devices of this driver one claim is allocated. */
#define DRA_MAX_CLAIM_DEVICES 16
/* The most CDI device IDs answered for one device. */
#define DRA_MAX_CDI_IDS 4

/* A claim as the kubelet names it (NodePrepareResources' Claim). */
struct dra_claim_ref {
    const char *uid;
    const char *namespace_name;
    const char *name;
};

/* One device prepared for a claim, as NodePrepareResources answers it. */
struct dra_prepared_device {
    char request[128]; /* the request's name ("gpu", or "gpu/sub") */
    char pool[256];
    char device[64];
    char cdi_ids[DRA_MAX_CDI_IDS][256];
    int ncdi_ids;
};

struct dra_prepared {
    struct dra_prepared_device devices[DRA_MAX_CLAIM_DEVICES];
    int ndevices;
};

/* Prepares a claim: 0 and *out filled, or -1 and a message in error that
 * names the claim (and the field, where one is wrong); nothing is left
 * created then. Idempotent: preparing a prepared claim answers the same. */
int dra_prepare(const struct dra_claim_ref *claim, struct dra_prepared *out, char *error, size_t error_size);

/* Unprepares a claim (removes its tenant): 0, also for a claim never
 * prepared, or -1 and a message in error. */
int dra_unprepare(const struct dra_claim_ref *claim, char *error, size_t error_size);

#endif
