/*
 * Where the shim's settings come from.
 *
 * The environment: every variable is read through gs_getenv, which is
 * secure_getenv. In glibc's secure-execution mode (a set-uid or set-gid
 * program, or one gaining file capabilities) the environment is that of
 * whoever started the program, not of whom it runs as, so none of it is
 * read: GPUSLICE_REAL_LIBCUDA there would name a library to load with the
 * program's privileges, GPUSLICE_SOCKET a socket to talk to with them.
 * Such a process takes every default.
 *
 * The tenant's directory: a container runtime mounts it read-only at
 * GS_CONTAINER_RUN_DIR (include/gpuslice/containers.h). When it is there
 * (that path holds the tenant's socket or the server's policy file; the
 * host's run directory holds neither), the process is inside a tenant,
 * and its socket and what it does while no server answers come from that
 * directory, whatever GPUSLICE_SOCKET and GPUSLICE_ON_SERVER_DOWN say: a
 * process must not be able to turn its own gate off with two variables.
 * The policy file is written by gpuslice-server (tokenserver/tenants.c):
 * words separated by white space, of which the shim follows the first it
 * knows (a newer server can name a new policy and, after it, the one older
 * shims should follow). A file that is missing, unreadable or names no
 * policy this shim knows means wait: closed, not open. The file is read
 * when the gate thread starts and again after each failed connection (at
 * most once a second), so that a policy changed for an outage reaches the
 * processes already running.
 *
 * Outside a container (on the host, in the tests) the environment decides.
 */
#include "gs_settings.h"
#include "gs_log.h"
#include "gpuslice/containers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TENANT_SOCKET GS_CONTAINER_RUN_DIR "/" GS_TENANT_SOCKET
#define TENANT_POLICY GS_CONTAINER_RUN_DIR "/" GS_TENANT_POLICY_FILE

const char *gs_getenv(const char *name)
{
    return secure_getenv(name);
}

/* Whether something is at path. Only "no such file" is absence: any other
 * failure (a directory that cannot be searched) counts as present, so that
 * a tenant's directory is never mistaken for no directory. */
static bool present(const char *path)
{
    return access(path, F_OK) == 0 || (errno != ENOENT && errno != ENOTDIR);
}

/* Whether the shim is inside a tenant (set once by gs_settings_connection),
 * and the last reason the policy file gave for waiting (a message logged
 * once per change); both guarded by gs_gate_lock, under which every caller
 * runs. */
static bool in_tenant;
static char last_complaint[160];

/* The policy the tenant's directory gives: true for open. A reason to wait
 * that is not the file's own word is logged once until it changes. */
static bool tenant_policy_open(void)
{
    char complaint[sizeof last_complaint] = "";
    bool open_policy = false;
    int fd = open(TENANT_POLICY, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(complaint, sizeof complaint, "cannot read %s (%s)", TENANT_POLICY, strerror(errno));
    } else {
        char text[256];
        ssize_t n;
        do
            n = read(fd, text, sizeof text - 1);
        while (n < 0 && errno == EINTR);
        int saved = errno;
        close(fd);
        if (n < 0) {
            snprintf(complaint, sizeof complaint, "cannot read %s (%s)", TENANT_POLICY, strerror(saved));
        } else {
            text[n] = '\0';
            char *save = NULL, *word = strtok_r(text, " \t\r\n", &save);
            while (word && strcmp(word, "wait") != 0 && strcmp(word, "open") != 0)
                word = strtok_r(NULL, " \t\r\n", &save);
            if (word)
                open_policy = word[0] == 'o';
            else
                snprintf(complaint, sizeof complaint, "%s names no policy this shim knows", TENANT_POLICY);
        }
    }
    if (complaint[0] && strcmp(complaint, last_complaint) != 0)
        gs_log(GS_LOG_WARN, "%s: GPU work waits while gpuslice-server is unreachable", complaint);
    memcpy(last_complaint, complaint, sizeof last_complaint);
    return open_policy;
}

bool gs_settings_policy_again(bool open_policy)
{
    if (!in_tenant)
        return open_policy;
    bool now = tenant_policy_open();
    if (now != open_policy)
        gs_log(GS_LOG_WARN, "%s now says %s: while gpuslice-server is unreachable, GPU work %s", TENANT_POLICY,
               now ? "open" : "wait", now ? "runs unthrottled" : "waits");
    return now;
}

void gs_settings_connection(char *socket_path, size_t size, bool *open_policy)
{
    const char *env_socket = gs_getenv("GPUSLICE_SOCKET");
    const char *env_policy = gs_getenv("GPUSLICE_ON_SERVER_DOWN");
    if (env_socket && !*env_socket)
        env_socket = NULL;
    if (env_policy && !*env_policy)
        env_policy = NULL;

    if (present(TENANT_SOCKET) || present(TENANT_POLICY)) {
        in_tenant = true;
        *open_policy = tenant_policy_open();
        snprintf(socket_path, size, "%s", TENANT_SOCKET);
        if ((env_socket && strcmp(env_socket, TENANT_SOCKET) != 0) ||
            (env_policy && strcmp(env_policy, *open_policy ? "open" : "wait") != 0))
            gs_log(GS_LOG_INFO, "inside a tenant's container: GPUSLICE_SOCKET and GPUSLICE_ON_SERVER_DOWN are "
                   "ignored; the socket is %s and, while it does not answer, GPU work %s (%s)", TENANT_SOCKET,
                   *open_policy ? "runs unthrottled" : "waits", TENANT_POLICY);
        return;
    }

    *open_policy = env_policy && strcmp(env_policy, "open") == 0;
    if (env_policy && !*open_policy && strcmp(env_policy, "wait") != 0)
        gs_log(GS_LOG_WARN, "GPUSLICE_ON_SERVER_DOWN=%s is not 'wait' or 'open'; using wait", env_policy);
    const char *path = env_socket ? env_socket : TENANT_SOCKET;
    if (strlen(path) >= size)
        gs_log(GS_LOG_ERROR, "GPUSLICE_SOCKET is longer than %zu bytes", size - 1);
    snprintf(socket_path, size, "%s", path);
}
