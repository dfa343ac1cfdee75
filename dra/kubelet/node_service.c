/*
 * The DRA node service (NodePrepareResources, NodeUnprepareResources),
 * under both k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin and
 * k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin (the same messages on the
 * wire). Each claim of a call goes to dra_prepare or dra_unprepare; the
 * answer has one entry per claim, keyed by its UID: its devices, or its
 * error. A claim's failure is its own entry's, never the call's.
 */
#include "services.h"

#include "dra.h"
#include "dra_v1.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim ClaimMessage;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device DeviceMessage;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest PrepareRequest;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry PrepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepareClaimResult;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest UnprepareRequest;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry UnprepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse UnprepareClaimResult;

#define SERVICE_V1 "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
#define SERVICE_V1BETA1 "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"

/* The size of a claim's error in an answer. */
#define CLAIM_ERROR_SIZE 1024

/* One claim's entry of a NodePrepareResources answer, with everything its
 * messages point at. */
struct prepared_claim {
    struct dra_prepared prepared;
    char error[CLAIM_ERROR_SIZE];
    DeviceMessage devices[DRA_MAX_CLAIM_DEVICES];
    DeviceMessage *device_list[DRA_MAX_CLAIM_DEVICES];
    char *request_names[DRA_MAX_CLAIM_DEVICES][1];
    char *cdi_ids[DRA_MAX_CLAIM_DEVICES][DRA_MAX_CDI_IDS];
    PrepareClaimResult result;
    PrepareEntry entry;
};

/* One claim's entry of a NodeUnprepareResources answer. */
struct unprepared_claim {
    char error[CLAIM_ERROR_SIZE];
    UnprepareClaimResult result;
    UnprepareEntry entry;
};

static struct dra_claim_ref claim_ref(const ClaimMessage *claim)
{
    return (struct dra_claim_ref){.uid = claim->uid, .namespace_name = claim->namespace_, .name = claim->name};
}

/* A fixed-size string from dra_prepare, made safe to send: terminated
 * within its array and valid UTF-8. */
static char *sendable(char *text, size_t size)
{
    text[size - 1] = '\0';
    utf8_text_repair(text);
    return text;
}

/* Says why a claim failed, never with an empty error (an empty one means
 * success to the kubelet). */
static void claim_failed(char *error, const char *what, const ClaimMessage *claim)
{
    error[CLAIM_ERROR_SIZE - 1] = '\0';
    if (error[0] == '\0')
        snprintf(error, CLAIM_ERROR_SIZE, "%s claim %s/%s (uid %s) failed for no reason given", what,
                 claim->namespace_, claim->name, claim->uid);
    utf8_text_repair(error);
    fprintf(stderr, "gpuslice-dra: %s\n", error);
}

/* Fills out's messages from a dra_prepare that succeeded; an answer it
 * cannot send becomes the claim's error. */
static void describe_devices(struct prepared_claim *out, const ClaimMessage *claim)
{
    struct dra_prepared *prepared = &out->prepared;
    if (prepared->ndevices < 0 || prepared->ndevices > DRA_MAX_CLAIM_DEVICES) {
        snprintf(out->error, sizeof out->error, "preparing claim %s/%s answered %d devices (%d at most)",
                 claim->namespace_, claim->name, prepared->ndevices, DRA_MAX_CLAIM_DEVICES);
        claim_failed(out->error, "preparing", claim);
        return;
    }
    for (int i = 0; i < prepared->ndevices; i++) {
        struct dra_prepared_device *device = &prepared->devices[i];
        DeviceMessage *message = &out->devices[i];
        if (device->ncdi_ids < 0 || device->ncdi_ids > DRA_MAX_CDI_IDS) {
            snprintf(out->error, sizeof out->error, "preparing claim %s/%s answered %d CDI IDs (%d at most)",
                     claim->namespace_, claim->name, device->ncdi_ids, DRA_MAX_CDI_IDS);
            claim_failed(out->error, "preparing", claim);
            return;
        }
        k8s__io__kubelet__pkg__apis__dra__v1__device__init(message);
        char *request = sendable(device->request, sizeof device->request);
        if (request[0] != '\0') { /* none: the device serves all of the claim's requests */
            out->request_names[i][0] = request;
            message->request_names = out->request_names[i];
            message->n_request_names = 1;
        }
        message->pool_name = sendable(device->pool, sizeof device->pool);
        message->device_name = sendable(device->device, sizeof device->device);
        for (int j = 0; j < device->ncdi_ids; j++)
            out->cdi_ids[i][j] = sendable(device->cdi_ids[j], sizeof device->cdi_ids[j]);
        message->cdi_device_ids = out->cdi_ids[i];
        message->n_cdi_device_ids = (size_t)device->ncdi_ids;
        out->device_list[i] = message;
    }
    out->result.devices = out->device_list;
    out->result.n_devices = (size_t)prepared->ndevices;
}

static void prepare_claims(void *arg, const uint8_t *request, size_t request_length, struct unary_answer *answer)
{
    const char *method = arg;
    PrepareRequest *asked = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__unpack(
        NULL, request_length, request);
    if (asked == NULL) {
        answer_undecodable(answer, method,
                           &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor);
        return;
    }
    size_t nclaims = asked->n_claims;
    struct prepared_claim *claims = calloc(nclaims > 0 ? nclaims : 1, sizeof *claims);
    PrepareEntry **entries = calloc(nclaims > 0 ? nclaims : 1, sizeof *entries);
    if (claims == NULL || entries == NULL) {
        answer->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(answer->message, sizeof answer->message, "%s: out of memory for %zu claims", method, nclaims);
    } else {
        for (size_t i = 0; i < nclaims; i++) {
            const ClaimMessage *claim = asked->claims[i];
            struct prepared_claim *out = &claims[i];
            struct dra_claim_ref ref = claim_ref(claim);
            k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init(&out->result);
            if (dra_prepare(&ref, &out->prepared, out->error, sizeof out->error) != 0)
                claim_failed(out->error, "preparing", claim);
            else
                describe_devices(out, claim);
            if (out->error[0] != '\0') {
                out->result.error = out->error;
                out->result.devices = NULL; /* the kubelet ignores them then */
                out->result.n_devices = 0;
            }
            k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init(&out->entry);
            out->entry.key = claim->uid;
            out->entry.value = &out->result;
            entries[i] = &out->entry;
        }
        PrepareResponse reply = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
        reply.claims = entries;
        reply.n_claims = nclaims;
        answer_with_message(answer, &reply.base);
    }
    free(entries);
    free(claims);
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked(asked, NULL);
}

static void unprepare_claims(void *arg, const uint8_t *request, size_t request_length, struct unary_answer *answer)
{
    const char *method = arg;
    UnprepareRequest *asked = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__unpack(
        NULL, request_length, request);
    if (asked == NULL) {
        answer_undecodable(answer, method,
                           &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor);
        return;
    }
    size_t nclaims = asked->n_claims;
    struct unprepared_claim *claims = calloc(nclaims > 0 ? nclaims : 1, sizeof *claims);
    UnprepareEntry **entries = calloc(nclaims > 0 ? nclaims : 1, sizeof *entries);
    if (claims == NULL || entries == NULL) {
        answer->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(answer->message, sizeof answer->message, "%s: out of memory for %zu claims", method, nclaims);
    } else {
        for (size_t i = 0; i < nclaims; i++) {
            const ClaimMessage *claim = asked->claims[i];
            struct unprepared_claim *out = &claims[i];
            struct dra_claim_ref ref = claim_ref(claim);
            k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init(&out->result);
            if (dra_unprepare(&ref, out->error, sizeof out->error) != 0) {
                claim_failed(out->error, "unpreparing", claim);
                out->result.error = out->error;
            }
            k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init(&out->entry);
            out->entry.key = claim->uid;
            out->entry.value = &out->result;
            entries[i] = &out->entry;
        }
        UnprepareResponse reply = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
        reply.claims = entries;
        reply.n_claims = nclaims;
        answer_with_message(answer, &reply.base);
    }
    free(entries);
    free(claims);
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked(asked, NULL);
}

int node_service_add_methods(struct unary_server *server, int endpoint, char *error, size_t error_size)
{
    /* Each method's full path is its handler's argument, for messages. */
    static const char *const prepare_methods[] = {SERVICE_V1 "NodePrepareResources",
                                                  SERVICE_V1BETA1 "NodePrepareResources"};
    static const char *const unprepare_methods[] = {SERVICE_V1 "NodeUnprepareResources",
                                                    SERVICE_V1BETA1 "NodeUnprepareResources"};
    for (size_t i = 0; i < sizeof prepare_methods / sizeof prepare_methods[0]; i++) {
        if (unary_server_add_method(server, endpoint, prepare_methods[i], prepare_claims, (void *)prepare_methods[i],
                                    error, error_size) != 0
            || unary_server_add_method(server, endpoint, unprepare_methods[i], unprepare_claims,
                                       (void *)unprepare_methods[i], error, error_size) != 0)
            return -1;
    }
    return 0;
}
