/*
 * The answers the kubelet's services give (services.h): a protobuf-c
 * message packed for the unary server, or the status for a request that
 * does not decode.
 */
#include "services.h"

#include <stdio.h>
#include <stdlib.h>

void answer_with_message(struct unary_answer *answer, const ProtobufCMessage *message)
{
    size_t size = protobuf_c_message_get_packed_size(message);
    uint8_t *packed = malloc(size > 0 ? size : 1);
    if (packed == NULL) {
        answer->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(answer->message, sizeof answer->message, "out of memory for a %zu-byte %s", size,
                 message->descriptor->name);
        return;
    }
    size_t packed_size = protobuf_c_message_pack(message, packed);
    if (packed_size != size) {
        free(packed);
        answer->status = GRPC_STATUS_INTERNAL;
        snprintf(answer->message, sizeof answer->message, "%s packs to %zu bytes, not the %zu it said",
                 message->descriptor->name, packed_size, size);
        return;
    }
    answer->status = GRPC_STATUS_OK;
    answer->reply = packed;
    answer->reply_length = size;
}

void answer_undecodable(struct unary_answer *answer, const char *method, const ProtobufCMessageDescriptor *type)
{
    answer->status = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(answer->message, sizeof answer->message, "%s: the request is not a %s", method, type->name);
}
