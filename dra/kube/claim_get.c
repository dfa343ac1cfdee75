/*
 * Fetching a ResourceClaim from the API server (GET
 * /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME), tried again
 * while the API does not answer or answers 429 or 5xx, and handing the
 * answer to dra_claim_parse.
 */
#include "kube_internal.h"

#include <stdio.h>
#include <stdlib.h>

int kube_claim_get(struct kube_api *api, const struct dra_claim_ref *ref, struct dra_claim *out, char *error,
                   size_t error_size)
{
    if (!ref || !ref->namespace_name || !ref->name || !ref->uid) {
        snprintf(error, error_size, "claim ?/?: no claim named (uid, namespace and name)");
        return KUBE_CLAIM_BAD;
    }
    /* The names go into the path: only names the API could hold. */
    if (!kube_is_dns_label(ref->namespace_name) || !kube_is_dns_subdomain(ref->name)) {
        snprintf(error, error_size, "claim %.253s/%.253s: not a Kubernetes namespace and name", ref->namespace_name,
                 ref->name);
        return KUBE_CLAIM_BAD;
    }
    char path[640];
    snprintf(path, sizeof path, KUBE_RESOURCE_API "/namespaces/%s/resourceclaims/%s", ref->namespace_name,
             ref->name);
    char *body = NULL;
    char why[512];
    int status = kube_api_request_retrying(api, "GET", path, NULL, NULL, &body, why, sizeof why);
    if (status < 0) {
        snprintf(error, error_size, "claim %s/%s: the API server did not answer after %d tries: %s",
                 ref->namespace_name, ref->name, KUBE_API_TRIES, why);
        return KUBE_CLAIM_UNREACHABLE;
    }
    if (status == 429 || status >= 500) {
        char message[320];
        kube_api_answer_message(body, message, sizeof message);
        snprintf(error, error_size, "claim %s/%s: the API server is unavailable: HTTP %d after %d tries (%s)",
                 ref->namespace_name, ref->name, status, KUBE_API_TRIES, message);
        free(body);
        return KUBE_CLAIM_UNREACHABLE;
    }
    if (status != 200) {
        char message[320];
        kube_api_answer_message(body, message, sizeof message);
        if (status == 404)
            snprintf(error, error_size, "claim %s/%s: not found (HTTP 404: %s)", ref->namespace_name, ref->name,
                     message);
        else
            snprintf(error, error_size, "claim %s/%s: the API server refused to read it (HTTP %d: %s)",
                     ref->namespace_name, ref->name, status, message);
        free(body);
        return KUBE_CLAIM_BAD;
    }
    int rc = dra_claim_parse(body, ref, out, error, error_size);
    free(body);
    return rc;
}
