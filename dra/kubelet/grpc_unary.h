/*
 * A small unary gRPC server on gRPC's C core: methods named by their full
 * path ("/package.Service/Method") take the request's bytes and answer
 * bytes or a gRPC status. Each listening socket (a unix socket) has its
 * own methods; a method a socket does not have is answered UNIMPLEMENTED.
 * One thread drives it (unary_server_handle_next) and runs the handlers,
 * one call at a time. The messages' encoding is the caller's.
 */
#ifndef GPUSLICE_DRA_GRPC_UNARY_H
#define GPUSLICE_DRA_GRPC_UNARY_H

#include <grpc/status.h>
#include <stddef.h>
#include <stdint.h>

/* The most sockets and methods one server has. */
#define UNARY_MAX_ENDPOINTS 4
#define UNARY_MAX_METHODS 16

/* What a handler answers: status GRPC_STATUS_OK and the reply (NULL for
 * an empty one), or another status and a message for the client. */
struct unary_answer {
    grpc_status_code status;
    char message[512];
    uint8_t *reply;      /* malloc'd, handed over to the server */
    size_t reply_length;
};

/* Handles one call. answer arrives zeroed (status OK, no reply). */
typedef void (*unary_handler)(void *arg, const uint8_t *request, size_t request_length, struct unary_answer *answer);

struct unary_server;

/* A server with no socket yet (calls grpc_init): NULL, with a message in
 * error, if it cannot be made. */
struct unary_server *unary_server_create(char *error, size_t error_size);

/* Listens on the unix socket at socket_path (gRPC replaces a file found
 * there: check it first). Returns the endpoint's number, or -1 with a
 * message in error. Before unary_server_start only. */
int unary_server_listen(struct unary_server *server, const char *socket_path, char *error, size_t error_size);

/* Serves method (its full path) on endpoint with handler. Before
 * unary_server_start only. 0, or -1 with a message in error. */
int unary_server_add_method(struct unary_server *server, int endpoint, const char *method, unary_handler handler,
                            void *arg, char *error, size_t error_size);

/* Starts serving every endpoint. 0, or -1 with a message in error. */
int unary_server_start(struct unary_server *server, char *error, size_t error_size);

/* Waits up to timeout_ms for one event (a call, or a reply sent) and
 * handles it. 1: handled, 0: none came, -1: the server cannot go on
 * (message in error). */
int unary_server_handle_next(struct unary_server *server, int timeout_ms, char *error, size_t error_size);

/* Shuts the server down (calls in progress are cancelled), frees it and
 * calls grpc_shutdown. Its socket files stay: removing them is the
 * caller's. NULL is allowed. */
void unary_server_destroy(struct unary_server *server);

#endif
