/*
 * The Kubernetes API side of gpuslice-dra: an HTTPS client for the API
 * server (libcurl, the pod's service account), the ResourceClaims it
 * reads (what this driver was allocated, and its opaque configuration),
 * the node's GPUs (NVML) and the ResourceSlice that publishes them.
 */
#ifndef GPUSLICE_DRA_KUBE_H
#define GPUSLICE_DRA_KUBE_H

#include "dra.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the API server ------------------------------------------------------ */
struct kube_api_options {
    /* https://HOST:PORT; NULL: from KUBERNETES_SERVICE_HOST and _PORT */
    const char *server;
    /* NULL: /var/run/secrets/kubernetes.io/serviceaccount/token (reread
     * on every request: the kubelet rotates it) and .../ca.crt */
    const char *token_file;
    const char *ca_file;
    long timeout_ms; /* per request; 0: 10000 */
};

/* One client: its connection is kept between requests; requests from
 * several threads take turns on it. */
struct kube_api;

/* A client of options' server (https:// only; the CA file always
 * verifies it): NULL with a message in error if options are unusable. */
struct kube_api *kube_api_open(const struct kube_api_options *options, char *error, size_t error_size);
void kube_api_close(struct kube_api *api);

/* One request. Returns the HTTP status with the body in *response
 * (malloc'd, NUL-terminated; the caller frees it), or -1 with a message in
 * error if no answer came (the API unreachable, or an answer over 4 MiB),
 * or the token file could not be read. */
int kube_api_request(struct kube_api *api, const char *method, const char *path, const char *content_type,
                     const char *body, char **response, char *error, size_t error_size);

/* ---- claims -------------------------------------------------------------- */
/* The opaque configuration (apiVersion gpuslice.io/v1, kind SliceConfig)
 * that applies to this driver's devices of a claim. */
struct dra_claim_config {
    bool has_limit;
    double limit; /* 0.001 to 1 */
    bool has_class;
    char class_name[16]; /* batch or latency */
    bool has_preempt_ms;
    unsigned preempt_ms; /* 1 to 1000 */
};

/* One device this driver was allocated in the claim. */
struct dra_claim_device {
    char request[128];
    char pool[256];
    char device[64];
    double share;          /* consumedCapacity "share" (the device's default if absent) */
    uint64_t memory_bytes; /* consumedCapacity "memory" */
};

struct dra_claim {
    char uid[64];
    char namespace_name[256];
    char name[256];
    struct dra_claim_device devices[DRA_MAX_CLAIM_DEVICES];
    int ndevices;
    struct dra_claim_config config;
};

enum {
    KUBE_CLAIM_BAD = -1,         /* unknown, malformed, not allocated, bad configuration: error says */
    KUBE_CLAIM_UNREACHABLE = -2, /* the API did not answer after retries: error says */
};

/* Parses a ResourceClaim's JSON: checks it is the claim named (uid), that
 * it is allocated, and reads this driver's results and configuration.
 * 0, or KUBE_CLAIM_BAD with a message naming the claim and the field. */
int dra_claim_parse(const char *json, const struct dra_claim_ref *ref, struct dra_claim *out, char *error,
                    size_t error_size);

/* Reads the claim from the API (retrying a few times over a few seconds)
 * and parses it: 0, KUBE_CLAIM_BAD or KUBE_CLAIM_UNREACHABLE. */
int kube_claim_get(struct kube_api *api, const struct dra_claim_ref *ref, struct dra_claim *out, char *error,
                   size_t error_size);

/* ---- the node's GPUs and its ResourceSlice --------------------------------- */
struct dra_gpu {
    unsigned index;
    char uuid[96];
    char product[96];
    uint64_t memory_bytes;
    char driver_version[96];
};

/* The GPUs NVML (libnvidia-ml.so.1, loaded at run time) lists: their
 * count, or -1 with a message in error (also when there are more than
 * max). */
int dra_gpus_discover(struct dra_gpu *gpus, int max, char *error, size_t error_size);

/* What a claim may consume of each device. A field left 0 means: share_total
 * 100, share_default share_total, share_min 1, memory_default the GPU's
 * memory, memory_min 0, memory_step none. The slice moves figures the API
 * would refuse to the nearest it takes (a default below min is min, a
 * range's max the last whole step within the GPU's memory). */
struct dra_slice_policy {
    unsigned share_total;   /* capacity "share": the whole GPU (100) */
    unsigned share_default; /* for a request that names none */
    unsigned share_min;
    uint64_t memory_default; /* bytes, for a request that names none */
    uint64_t memory_min;
    uint64_t memory_step;
};

/* The node's ResourceSlice as JSON (malloc'd; NULL if out of memory): one
 * device per GPU, named gpu-INDEX, allowMultipleAllocations, capacities
 * "share" and "memory" with their request policies; owned by the Node of
 * uid node_uid (the controller of its ownerReferences) unless that is NULL. */
char *dra_slice_body(const char *node_name, const char *node_uid, const struct dra_gpu *gpus, int ngpus,
                     const struct dra_slice_policy *policy);

/* Creates or updates the node's ResourceSlice (named as dra_slice_body
 * names it), owned by the node's Node object (read first: the API server
 * then deletes the slice with the node): created if absent, replaced with
 * the pool's next generation if its devices or owner differ, not written
 * if they do not; read again after a conflict with another writer. 0, or
 * -1 with a message. */
int kube_slice_publish(struct kube_api *api, const char *node_name, const struct dra_gpu *gpus, int ngpus,
                       const struct dra_slice_policy *policy, char *error, size_t error_size);

#endif
