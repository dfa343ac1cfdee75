/*
 * What the files of dra/kube/ share beside kube.h: the API client's retry
 * and message functions, Kubernetes name checks and the ResourceSlice's name.
 * Not an interface of gpuslice-dra: its tests include it, nothing else.
 */
#ifndef GPUSLICE_DRA_KUBE_INTERNAL_H
#define GPUSLICE_DRA_KUBE_INTERNAL_H

#include "kube.h"

#include <stdbool.h>
#include <stddef.h>

/* The API paths of resource.k8s.io/v1. */
#define KUBE_RESOURCE_API "/apis/resource.k8s.io/v1"

/* The tries kube_api_request_retrying makes, and its first and longest
 * waits between them (doubled after each try). */
#define KUBE_API_TRIES 4
#define KUBE_API_FIRST_WAIT_MS 250
#define KUBE_API_LONGEST_WAIT_MS 2000

/* https://HOST:PORT from KUBERNETES_SERVICE_HOST and
 * KUBERNETES_SERVICE_PORT (an IPv6 host in brackets): 0, or -1 with a
 * message in error. */
int kube_api_server_from_environment(char *out, size_t out_size, char *error, size_t error_size);

/* kube_api_request, tried again (KUBE_API_TRIES in all, waiting between)
 * while no answer comes or the API answers 429 or 5xx. Returns the last
 * status, or -1 with a message if no try got an answer. */
int kube_api_request_retrying(struct kube_api *api, const char *method, const char *path,
                              const char *content_type, const char *body, char **response, char *error,
                              size_t error_size);

/* The message of an error answer, on one line: a Status object's
 * "message", else the start of the body. */
void kube_api_answer_message(const char *body, char *out, size_t out_size);

/* Kubernetes names: an RFC 1123 DNS label (namespaces) and DNS subdomain
 * (most object names). */
bool kube_is_dns_label(const char *name);
bool kube_is_dns_subdomain(const char *name);

/* The node's ResourceSlice's name: "NODE-gpuslice.io" made a DNS
 * subdomain (lower case, other characters as '-'); a node name too long
 * for 253 characters is cut and a hash of it added. out_size >= 254. */
void dra_slice_name(const char *node_name, char *out, size_t out_size);

/* NVIDIA's driver version ("580.95.05") as a semantic version
 * ("580.95.5"): true, or false if it is not one (then published as a
 * string). */
bool dra_driver_semver(const char *driver_version, char *out, size_t out_size);

#endif
