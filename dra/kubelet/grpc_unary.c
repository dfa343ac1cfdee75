/*
 * The unary gRPC server (grpc_unary.h) on gRPC's C core: one completion
 * queue for every socket, one grpc_server per socket, and one slot per
 * method (plus one per socket for the methods it does not have), each a
 * call requested from gRPC, answered, then requested again. Handlers run
 * on the thread that calls unary_server_handle_next.
 */
#include "grpc_unary.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long unary_server_destroy waits for gRPC to give back the calls and
 * the requests it holds. */
#define SHUTDOWN_DRAIN_MS 10000

/* What an event's tag points at; the first member of both kinds. */
enum tag_kind { TAG_SLOT, TAG_SHUTDOWN };

struct unary_method {
    char *path;
    unary_handler handler;
    void *arg;
    void *registered; /* grpc_server_register_method's handle */
    int endpoint;
};

enum slot_state {
    SLOT_IDLE,      /* nothing asked of gRPC */
    SLOT_WAITING,   /* a call requested, not come yet */
    SLOT_ANSWERING, /* the answer's batch started, not completed yet */
};

/* One call at a time to one method, or (method NULL) to the methods an
 * endpoint does not have. */
struct unary_slot {
    enum tag_kind kind; /* TAG_SLOT */
    struct unary_server *server;
    int endpoint;
    const struct unary_method *method;
    enum slot_state state;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array request_metadata;
    grpc_byte_buffer *request; /* a registered method's request */
    grpc_call_details details; /* an unknown method's name */
    grpc_byte_buffer *reply;
    int cancelled;
};

struct unary_endpoint {
    enum tag_kind kind; /* TAG_SHUTDOWN: the tag of its server's shutdown */
    grpc_server *server;
    char *socket_path;
    struct unary_slot unknown_methods;
    bool shutdown_done;
};

struct unary_server {
    grpc_completion_queue *queue;
    struct unary_endpoint endpoints[UNARY_MAX_ENDPOINTS];
    int nendpoints;
    struct unary_method methods[UNARY_MAX_METHODS];
    struct unary_slot method_slots[UNARY_MAX_METHODS];
    int nmethods;
    bool started;
    bool stopping;
};

static gpr_timespec after_ms(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

struct unary_server *unary_server_create(char *error, size_t error_size)
{
    struct unary_server *server = calloc(1, sizeof *server);
    if (server == NULL) {
        snprintf(error, error_size, "out of memory for the gRPC server");
        return NULL;
    }
    grpc_init();
    server->queue = grpc_completion_queue_create_for_next(NULL);
    if (server->queue == NULL) {
        snprintf(error, error_size, "gRPC cannot make a completion queue");
        grpc_shutdown();
        free(server);
        return NULL;
    }
    return server;
}

int unary_server_listen(struct unary_server *server, const char *socket_path, char *error, size_t error_size)
{
    if (server->started || server->nendpoints == UNARY_MAX_ENDPOINTS) {
        snprintf(error, error_size, "%s: %s", socket_path,
                 server->started ? "the gRPC server is already started" : "too many sockets for one gRPC server");
        return -1;
    }
    int number = server->nendpoints;
    struct unary_endpoint *endpoint = &server->endpoints[number];
    *endpoint = (struct unary_endpoint){.kind = TAG_SHUTDOWN};
    endpoint->socket_path = strdup(socket_path);
    if (endpoint->socket_path == NULL) {
        snprintf(error, error_size, "%s: out of memory", socket_path);
        return -1;
    }
    endpoint->server = grpc_server_create(NULL, NULL);
    if (endpoint->server == NULL) {
        snprintf(error, error_size, "%s: gRPC cannot make a server", socket_path);
        free(endpoint->socket_path);
        return -1;
    }
    grpc_server_register_completion_queue(endpoint->server, server->queue, NULL);
    /* Counted from here: unary_server_destroy shuts it down. */
    server->nendpoints++;

    size_t address_size = strlen(socket_path) + sizeof "unix:";
    char *address = malloc(address_size);
    if (address == NULL) {
        snprintf(error, error_size, "%s: out of memory", socket_path);
        return -1;
    }
    snprintf(address, address_size, "unix:%s", socket_path);
    grpc_server_credentials *credentials = grpc_insecure_server_credentials_create();
    if (credentials == NULL) {
        snprintf(error, error_size, "%s: gRPC cannot make insecure credentials", socket_path);
        free(address);
        return -1;
    }
    int bound = grpc_server_add_http2_port(endpoint->server, address, credentials);
    grpc_server_credentials_release(credentials);
    free(address);
    if (bound == 0) {
        /* gRPC says no more than that here; its log has the reason. */
        snprintf(error, error_size, "%s: gRPC cannot listen there (no such directory? not writable?)", socket_path);
        return -1;
    }
    return number;
}

int unary_server_add_method(struct unary_server *server, int endpoint, const char *method, unary_handler handler,
                            void *arg, char *error, size_t error_size)
{
    if (server->started || server->nmethods == UNARY_MAX_METHODS || endpoint < 0 || endpoint >= server->nendpoints) {
        snprintf(error, error_size, "%s: %s", method,
                 server->started ? "the gRPC server is already started"
                 : server->nmethods == UNARY_MAX_METHODS ? "too many methods for one gRPC server"
                                                         : "no such socket");
        return -1;
    }
    struct unary_method *added = &server->methods[server->nmethods];
    *added = (struct unary_method){.handler = handler, .arg = arg, .endpoint = endpoint};
    added->path = strdup(method);
    if (added->path == NULL) {
        snprintf(error, error_size, "%s: out of memory", method);
        return -1;
    }
    added->registered = grpc_server_register_method(server->endpoints[endpoint].server, method, NULL,
                                                    GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    if (added->registered == NULL) {
        snprintf(error, error_size, "%s: gRPC refuses the method (given twice?)", method);
        free(added->path);
        return -1;
    }
    server->nmethods++;
    return 0;
}

/* Asks gRPC for the slot's next call. */
static int slot_arm(struct unary_slot *slot, char *error, size_t error_size)
{
    struct unary_server *server = slot->server;
    grpc_server *grpc = server->endpoints[slot->endpoint].server;
    grpc_call_error requested;

    slot->call = NULL;
    slot->request = NULL;
    slot->reply = NULL;
    slot->cancelled = 0;
    grpc_metadata_array_init(&slot->request_metadata);
    if (slot->method != NULL) {
        requested = grpc_server_request_registered_call(grpc, slot->method->registered, &slot->call, &slot->deadline,
                                                        &slot->request_metadata, &slot->request, server->queue,
                                                        server->queue, slot);
    } else {
        grpc_call_details_init(&slot->details);
        requested = grpc_server_request_call(grpc, &slot->call, &slot->details, &slot->request_metadata, server->queue,
                                             server->queue, slot);
    }
    if (requested != GRPC_CALL_OK) {
        grpc_metadata_array_destroy(&slot->request_metadata);
        if (slot->method == NULL)
            grpc_call_details_destroy(&slot->details);
        snprintf(error, error_size, "%s: gRPC cannot wait for calls to %s (grpc_call_error %d)",
                 server->endpoints[slot->endpoint].socket_path,
                 slot->method != NULL ? slot->method->path : "unknown methods", (int)requested);
        return -1;
    }
    slot->state = SLOT_WAITING;
    return 0;
}

/* Frees what the slot's last call held; the slot is idle then. */
static void slot_release(struct unary_slot *slot)
{
    if (slot->call != NULL)
        grpc_call_unref(slot->call);
    if (slot->request != NULL)
        grpc_byte_buffer_destroy(slot->request);
    if (slot->reply != NULL)
        grpc_byte_buffer_destroy(slot->reply);
    grpc_metadata_array_destroy(&slot->request_metadata);
    if (slot->method == NULL)
        grpc_call_details_destroy(&slot->details);
    slot->call = NULL;
    slot->request = NULL;
    slot->reply = NULL;
    slot->state = SLOT_IDLE;
}

/* Runs the method's handler on the call's request. */
static void slot_run_handler(struct unary_slot *slot, struct unary_answer *answer)
{
    if (slot->method == NULL) {
        answer->status = GRPC_STATUS_UNIMPLEMENTED;
        grpc_slice method = slot->details.method;
        snprintf(answer->message, sizeof answer->message, "unknown method %.*s", (int)GRPC_SLICE_LENGTH(method),
                 (const char *)GRPC_SLICE_START_PTR(method));
        return;
    }
    if (slot->request == NULL) {
        answer->status = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(answer->message, sizeof answer->message, "%s: the call has no request message", slot->method->path);
        return;
    }
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, slot->request)) {
        answer->status = GRPC_STATUS_INTERNAL;
        snprintf(answer->message, sizeof answer->message, "%s: the request cannot be read", slot->method->path);
        return;
    }
    grpc_slice request = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    slot->method->handler(slot->method->arg, GRPC_SLICE_START_PTR(request), GRPC_SLICE_LENGTH(request), answer);
    grpc_slice_unref(request);
    answer->message[sizeof answer->message - 1] = '\0';
}

/* Answers the call the slot holds: 0 with the answer on its way, -1 if
 * gRPC refused the batch (the call is then the caller's to release). */
static int slot_answer(struct unary_slot *slot)
{
    struct unary_answer answer = {.status = GRPC_STATUS_OK};
    slot_run_handler(slot, &answer);

    if (answer.status == GRPC_STATUS_OK) {
        grpc_slice reply = grpc_empty_slice();
        if (answer.reply != NULL && answer.reply_length > 0)
            reply = grpc_slice_new(answer.reply, answer.reply_length, free); /* frees answer.reply */
        else
            free(answer.reply);
        slot->reply = grpc_raw_byte_buffer_create(&reply, 1);
        grpc_slice_unref(reply);
    } else {
        free(answer.reply);
    }

    grpc_op ops[4];
    size_t nops = 0;
    memset(ops, 0, sizeof ops);
    ops[nops].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[nops++].data.send_initial_metadata.count = 0;
    if (slot->reply != NULL) {
        ops[nops].op = GRPC_OP_SEND_MESSAGE;
        ops[nops++].data.send_message.send_message = slot->reply;
    }
    grpc_slice status_message = grpc_slice_from_copied_string(answer.message);
    ops[nops].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[nops].data.send_status_from_server.trailing_metadata_count = 0;
    ops[nops].data.send_status_from_server.status = answer.status;
    ops[nops++].data.send_status_from_server.status_details = answer.message[0] != '\0' ? &status_message : NULL;
    ops[nops].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[nops++].data.recv_close_on_server.cancelled = &slot->cancelled;

    grpc_call_error started = grpc_call_start_batch(slot->call, ops, nops, slot, NULL);
    grpc_slice_unref(status_message); /* gRPC copies it in grpc_call_start_batch */
    if (started != GRPC_CALL_OK) {
        fprintf(stderr, "gpuslice-dra: %s: gRPC cannot answer a call to %s (grpc_call_error %d)\n",
                slot->server->endpoints[slot->endpoint].socket_path,
                slot->method != NULL ? slot->method->path : "an unknown method", (int)started);
        return -1;
    }
    slot->state = SLOT_ANSWERING;
    return 0;
}

int unary_server_start(struct unary_server *server, char *error, size_t error_size)
{
    if (server->started) {
        snprintf(error, error_size, "the gRPC server is already started");
        return -1;
    }
    for (int i = 0; i < server->nendpoints; i++)
        grpc_server_start(server->endpoints[i].server);
    server->started = true;
    for (int i = 0; i < server->nmethods; i++) {
        struct unary_slot *slot = &server->method_slots[i];
        *slot = (struct unary_slot){.kind = TAG_SLOT, .server = server, .endpoint = server->methods[i].endpoint,
                                    .method = &server->methods[i]};
        if (slot_arm(slot, error, error_size) != 0)
            return -1;
    }
    for (int i = 0; i < server->nendpoints; i++) {
        struct unary_slot *slot = &server->endpoints[i].unknown_methods;
        *slot = (struct unary_slot){.kind = TAG_SLOT, .server = server, .endpoint = i};
        if (slot_arm(slot, error, error_size) != 0)
            return -1;
    }
    return 0;
}

/* One event from the queue: a call came (or a request was given up), an
 * answer went, or a server finished shutting down. */
static int handle_event(struct unary_server *server, const grpc_event *event, char *error, size_t error_size)
{
    if (*(const enum tag_kind *)event->tag == TAG_SHUTDOWN) {
        ((struct unary_endpoint *)event->tag)->shutdown_done = true;
        return 0;
    }
    struct unary_slot *slot = event->tag;
    if (slot->state == SLOT_ANSWERING) {
        /* The call is over, answered or not (a client gone is its own
         * business). */
        slot_release(slot);
        return server->stopping ? 0 : slot_arm(slot, error, error_size);
    }
    if (server->stopping) {
        if (event->success && slot->call != NULL) {
            grpc_call_error cancelled =
                grpc_call_cancel_with_status(slot->call, GRPC_STATUS_UNAVAILABLE, "the plugin is stopping", NULL);
            if (cancelled != GRPC_CALL_OK)
                fprintf(stderr, "gpuslice-dra: gRPC cannot cancel a call (grpc_call_error %d)\n", (int)cancelled);
        }
        slot_release(slot);
        return 0;
    }
    if (!event->success) {
        /* gRPC gives a request up only when shutting down. */
        slot_release(slot);
        snprintf(error, error_size, "%s: gRPC stopped taking calls", server->endpoints[slot->endpoint].socket_path);
        return -1;
    }
    if (slot_answer(slot) != 0) {
        slot_release(slot);
        return slot_arm(slot, error, error_size);
    }
    return 0;
}

int unary_server_handle_next(struct unary_server *server, int timeout_ms, char *error, size_t error_size)
{
    if (!server->started) {
        snprintf(error, error_size, "the gRPC server is not started");
        return -1;
    }
    grpc_event event = grpc_completion_queue_next(server->queue, after_ms(timeout_ms), NULL);
    switch (event.type) {
    case GRPC_QUEUE_TIMEOUT:
        return 0;
    case GRPC_OP_COMPLETE:
        return handle_event(server, &event, error, error_size) == 0 ? 1 : -1;
    case GRPC_QUEUE_SHUTDOWN:
    default:
        snprintf(error, error_size, "the gRPC completion queue shut down");
        return -1;
    }
}

/* Whether gRPC still holds a tag of this server's. */
static bool server_busy(const struct unary_server *server)
{
    for (int i = 0; i < server->nendpoints; i++) {
        const struct unary_endpoint *endpoint = &server->endpoints[i];
        if (!endpoint->shutdown_done || endpoint->unknown_methods.state != SLOT_IDLE)
            return true;
    }
    for (int i = 0; i < server->nmethods; i++) {
        if (server->method_slots[i].state != SLOT_IDLE)
            return true;
    }
    return false;
}

void unary_server_destroy(struct unary_server *server)
{
    if (server == NULL)
        return;
    server->stopping = true;
    for (int i = 0; i < server->nendpoints; i++)
        grpc_server_shutdown_and_notify(server->endpoints[i].server, server->queue, &server->endpoints[i]);
    for (int i = 0; i < server->nendpoints; i++)
        grpc_server_cancel_all_calls(server->endpoints[i].server);

    gpr_timespec give_up = after_ms(SHUTDOWN_DRAIN_MS);
    while (server_busy(server)) {
        grpc_event event = grpc_completion_queue_next(server->queue, give_up, NULL);
        if (event.type != GRPC_OP_COMPLETE) {
            /* Destroying what gRPC still holds would be worse than
             * leaving it: the process is about to exit. */
            fprintf(stderr, "gpuslice-dra: the gRPC server did not shut down in %d ms; left as it is\n",
                    SHUTDOWN_DRAIN_MS);
            return;
        }
        char ignored[256];
        (void)handle_event(server, &event, ignored, sizeof ignored);
    }
    for (int i = 0; i < server->nendpoints; i++) {
        grpc_server_destroy(server->endpoints[i].server);
        free(server->endpoints[i].socket_path);
    }
    grpc_completion_queue_shutdown(server->queue);
    for (;;) {
        grpc_event event = grpc_completion_queue_next(server->queue, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (event.type == GRPC_QUEUE_SHUTDOWN)
            break;
    }
    grpc_completion_queue_destroy(server->queue);
    for (int i = 0; i < server->nmethods; i++)
        free(server->methods[i].path);
    free(server);
    grpc_shutdown();
}
