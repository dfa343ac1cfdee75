/*
 * The kubelet's two services as methods of a unary gRPC server
 * (grpc_unary.h): plugin registration (registration.c) and the DRA node
 * service (node_service.c), the packing of their answers (answer.c) and
 * the UTF-8 repair their strings get before they go out (utf8_text.c).
 */
#ifndef GPUSLICE_DRA_SERVICES_H
#define GPUSLICE_DRA_SERVICES_H

#include "grpc_unary.h"

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* What GetInfo answers. Both strings outlive the server. */
struct registration_info {
    const char *driver_name;
    const char *plugin_socket;
};

/* The DRA node services, by the names the kubelet's registration expects
 * in PluginInfo.supported_versions, most recent first. */
#define DRA_SERVICE_V1 "v1.DRAPlugin"
#define DRA_SERVICE_V1BETA1 "v1beta1.DRAPlugin"

/* Serves pluginregistration.Registration (GetInfo,
 * NotifyRegistrationStatus) on endpoint. 0, or -1 with a message in
 * error. */
int registration_add_methods(struct unary_server *server, int endpoint, const struct registration_info *info,
                             char *error, size_t error_size);

/* Serves NodePrepareResources and NodeUnprepareResources of both
 * k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin and its v1beta1 twin on
 * endpoint. 0, or -1 with a message in error. */
int node_service_add_methods(struct unary_server *server, int endpoint, char *error, size_t error_size);

/* Answers with message packed (status OK), or RESOURCE_EXHAUSTED if
 * there is no memory for it. */
void answer_with_message(struct unary_answer *answer, const ProtobufCMessage *message);

/* Answers INVALID_ARGUMENT: the request is not a message of that type. */
void answer_undecodable(struct unary_answer *answer, const char *method, const ProtobufCMessageDescriptor *type);

/* Makes text valid UTF-8 in place, as proto3 strings must be (the
 * kubelet's decoder refuses a message with one that is not): each byte
 * of an invalid or cut sequence (a message truncated in a character)
 * becomes '?'. */
void utf8_text_repair(char *text);

#endif
