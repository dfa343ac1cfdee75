/*
 * Where the shim's settings come from (gs_settings.c): the environment,
 * read only through gs_getenv, and, inside a tenant's container, the
 * tenant's directory the runtime mounted.
 */
#ifndef GPUSLICE_SETTINGS_H
#define GPUSLICE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

/* The variable's value, or NULL: unset, or the process is in glibc's
 * secure-execution mode (set-uid, set-gid, file capabilities), where the
 * shim reads no environment at all. Every variable the shim reads goes
 * through this. */
const char *gs_getenv(const char *name);

/* Where to connect and what to do while the server is unreachable
 * (*open_policy true: run unthrottled; false: wait). Inside a tenant's
 * container, from its directory at GS_CONTAINER_RUN_DIR, whatever the
 * environment says; elsewhere, from GPUSLICE_SOCKET and
 * GPUSLICE_ON_SERVER_DOWN. Reads files: called once, when the gate thread
 * first starts (the gate lock held). */
void gs_settings_connection(char *socket_path, size_t size, bool *open_policy);

/* The policy now, given the one in force: inside a tenant the policy file
 * is read again (the server may have changed it since); elsewhere the
 * environment has not changed, but the policy file beside the socket may
 * say the node's gpuslice was uninstalled. Reads a file: called after a
 * connection failed, not on any fast path (the gate lock held). */
bool gs_settings_policy_again(bool open_policy);

/* The policy in force, as a word ("wait", "open" or "uninstalled": the
 * last two run GPU work while no server answers, ungated), and where it
 * came from ("the default", "GPUSLICE_ON_SERVER_DOWN", or the policy
 * file's path); static strings, for messages (the gate lock held). */
void gs_settings_policy(const char **word, const char **source);

#endif
