/*
 * dra_kubelet_serve (kubelet.h): the plugin's socket (node service) and
 * its registration socket made ready and served, calls handled and the
 * tick called about once a second until *stop is set, then the server shut
 * down and the sockets removed, the registration socket first (the
 * kubelet takes its removal for the plugin's going away).
 */
#include "kubelet.h"

#include "grpc_unary.h"
#include "services.h"
#include "socket_file.h"

#include <grpc/support/time.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TICK_MS 1000

static int options_check(const struct dra_kubelet_options *options, volatile sig_atomic_t *stop, char *error,
                         size_t error_size)
{
    if (options == NULL || stop == NULL) {
        snprintf(error, error_size, "dra_kubelet_serve: no %s", options == NULL ? "options" : "stop flag");
        return -1;
    }
    if (options->driver_name == NULL || options->driver_name[0] == '\0') {
        snprintf(error, error_size, "dra_kubelet_serve: no driver name");
        return -1;
    }
    if (options->registration_socket == NULL || options->plugin_socket == NULL
        || strcmp(options->registration_socket, options->plugin_socket) == 0) {
        snprintf(error, error_size, "dra_kubelet_serve: needs a registration socket and a plugin socket, two paths");
        return -1;
    }
    return 0;
}

/* Makes the server: both sockets listened on, their services on them,
 * started. NULL with a message in error if it cannot be. */
static struct unary_server *server_make(const struct dra_kubelet_options *options,
                                        const struct registration_info *info, char *error, size_t error_size)
{
    struct unary_server *server = unary_server_create(error, error_size);
    if (server == NULL)
        return NULL;
    /* The node service first: the kubelet calls it once registered. */
    int plugin = unary_server_listen(server, options->plugin_socket, error, error_size);
    int registration = -1;
    bool made = plugin >= 0 && node_service_add_methods(server, plugin, error, error_size) == 0
                && (registration = unary_server_listen(server, options->registration_socket, error, error_size)) >= 0
                && registration_add_methods(server, registration, info, error, error_size) == 0
                && unary_server_start(server, error, error_size) == 0;
    if (!made) {
        unary_server_destroy(server);
        return NULL;
    }
    return server;
}

/* Removes a socket left by a server that could not be made: this
 * process's, since socket_file_prepare found none served there. */
static void socket_file_remove_made(const char *path)
{
    struct socket_file_identity made;
    char ignored[256];
    if (socket_file_identify(path, &made, ignored, sizeof ignored) == 0)
        socket_file_remove(path, &made);
}

/* Handles calls and ticks until *stop: 0, or -1 with a message in error
 * if the server cannot go on. */
static int serve_until_stopped(struct unary_server *server, const struct dra_kubelet_options *options,
                               volatile sig_atomic_t *stop, char *error, size_t error_size)
{
    gpr_timespec tick_span = gpr_time_from_millis(TICK_MS, GPR_TIMESPAN);
    gpr_timespec next_tick = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), tick_span);
    while (!*stop) {
        gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
        if (gpr_time_cmp(now, next_tick) >= 0) {
            if (options->tick != NULL)
                options->tick(options->tick_arg);
            next_tick = gpr_time_add(now, tick_span);
            continue;
        }
        int64_t wait_ms = gpr_time_to_millis(gpr_time_sub(next_tick, now)) + 1;
        if (wait_ms > TICK_MS)
            wait_ms = TICK_MS;
        if (unary_server_handle_next(server, (int)wait_ms, error, error_size) < 0)
            return -1;
    }
    return 0;
}

int dra_kubelet_serve(const struct dra_kubelet_options *options, volatile sig_atomic_t *stop, char *error,
                      size_t error_size)
{
    if (options_check(options, stop, error, error_size) != 0)
        return -1;
    if (socket_file_prepare(options->plugin_socket, true, error, error_size) != 0
        || socket_file_prepare(options->registration_socket, false, error, error_size) != 0)
        return -1;

    const struct registration_info info = {.driver_name = options->driver_name,
                                           .plugin_socket = options->plugin_socket};
    struct unary_server *server = server_make(options, &info, error, error_size);
    if (server == NULL) {
        socket_file_remove_made(options->registration_socket);
        socket_file_remove_made(options->plugin_socket);
        return -1;
    }
    struct socket_file_identity plugin_file = {.known = false}, registration_file = {.known = false};
    int result = 0;
    if (socket_file_identify(options->plugin_socket, &plugin_file, error, error_size) != 0
        || socket_file_identify(options->registration_socket, &registration_file, error, error_size) != 0)
        result = -1;
    if (result == 0)
        result = serve_until_stopped(server, options, stop, error, error_size);

    socket_file_remove(options->registration_socket, &registration_file);
    unary_server_destroy(server);
    socket_file_remove(options->plugin_socket, &plugin_file);
    return result;
}
