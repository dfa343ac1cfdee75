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
 * shims should follow): wait, open, or uninstalled (gpuslice-server
 * --uninstall took gpuslice off the node: run ungated, like open, and say
 * so). A file that is missing, unreadable or names no policy this shim
 * knows means wait: closed, not open. The file is read when the gate
 * thread starts and again after each failed connection (at most once a
 * second), so that a policy changed for an outage reaches the processes
 * already running.
 *
 * Outside a container (on the host, in the tests) the environment decides,
 * but for an uninstall: the policy file beside the socket the process
 * tries (when there is one, as in RUN_DIR/tenants/NAME) is read after each
 * failed connection too, and its "uninstalled" is followed, so that no
 * process on the host waits for a server that was uninstalled either.
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
 * the last reason the policy file gave for waiting (a message logged once
 * per change), the policy file beside the socket on the host (empty if
 * none), and the policy in force with where it came from; all guarded by
 * the gate lock, under which every caller runs. */
static bool in_tenant;
static char last_complaint[160];
static char host_policy_path[128];
static const char *policy_word = "wait";
static const char *policy_source = "the default";
static bool env_open;                      /* the host's policy: open */
static const char *env_source = "the default";

/* The first word of a policy file this shim knows ("wait", "open",
 * "uninstalled"), NULL if none; a complaint (cannot read it) in complaint,
 * which is left alone for a file that names no word it knows. */
static const char *read_policy_file(const char *path, char *complaint, size_t size)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(complaint, size, "cannot read %s (%s)", path, strerror(errno));
        return NULL;
    }
    char text[256];
    ssize_t n;
    do
        n = read(fd, text, sizeof text - 1);
    while (n < 0 && errno == EINTR);
    int saved = errno;
    close(fd);
    if (n < 0) {
        snprintf(complaint, size, "cannot read %s (%s)", path, strerror(saved));
        return NULL;
    }
    text[n] = '\0';
    static const char *const known[] = {"wait", "open", "uninstalled"};
    char *save = NULL;
    for (char *word = strtok_r(text, " \t\r\n", &save); word; word = strtok_r(NULL, " \t\r\n", &save))
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (strcmp(word, known[i]) == 0)
                return known[i];
    return NULL;
}

/* The policy the tenant's directory gives: true for open (or
 * uninstalled). A reason to wait that is not the file's own word is
 * logged once until it changes. */
static bool tenant_policy_open(void)
{
    char complaint[sizeof last_complaint] = "";
    const char *word = read_policy_file(TENANT_POLICY, complaint, sizeof complaint);
    if (!word && !complaint[0])
        snprintf(complaint, sizeof complaint, "%s names no policy this shim knows", TENANT_POLICY);
    policy_word = word ? word : "wait";
    policy_source = word ? TENANT_POLICY : "the policy file is unusable";
    if (complaint[0] && strcmp(complaint, last_complaint) != 0)
        gs_log(GS_LOG_WARN, "%s: GPU work waits while gpuslice-server is unreachable", complaint);
    memcpy(last_complaint, complaint, sizeof last_complaint);
    return word && word[0] != 'w';
}

/* On the host: whether the policy file beside the socket says the node's
 * gpuslice was uninstalled (the environment decides everything else). */
static bool host_uninstalled(void)
{
    char complaint[160] = "";
    const char *word = host_policy_path[0] ? read_policy_file(host_policy_path, complaint, sizeof complaint) : NULL;
    return word && strcmp(word, "uninstalled") == 0;
}

bool gs_settings_policy_again(bool open_policy)
{
    const char *was = policy_word;
    bool now;
    if (in_tenant) {
        now = tenant_policy_open();
    } else if (host_uninstalled()) {
        now = true;
        policy_word = "uninstalled";
        policy_source = host_policy_path;
    } else {
        now = env_open;
        policy_word = env_open ? "open" : "wait";
        policy_source = env_source;
    }
    if (strcmp(was, policy_word) != 0 && (now != open_policy || strcmp(policy_word, "uninstalled") == 0))
        gs_log(GS_LOG_WARN, "%s now says %s: while gpuslice-server is unreachable, GPU work %s", policy_source,
               policy_word, !now ? "waits" : strcmp(policy_word, "uninstalled") == 0 ? "runs ungated" : "runs unthrottled");
    return now;
}

void gs_settings_policy(const char **word, const char **source)
{
    *word = policy_word;
    *source = policy_source;
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
                   "ignored; the socket is %s and, while it does not answer, GPU work %s (%s says %s)",
                   TENANT_SOCKET, *open_policy ? "runs unthrottled" : "waits", TENANT_POLICY, policy_word);
        return;
    }

    env_open = env_policy && strcmp(env_policy, "open") == 0;
    if (env_policy && !env_open && strcmp(env_policy, "wait") != 0)
        gs_log(GS_LOG_WARN, "GPUSLICE_ON_SERVER_DOWN=%s is not 'wait' or 'open'; using wait", env_policy);
    env_source = env_policy ? "GPUSLICE_ON_SERVER_DOWN" : "the default";
    policy_word = env_open ? "open" : "wait";
    policy_source = env_source;
    *open_policy = env_open;
    const char *path = env_socket ? env_socket : TENANT_SOCKET;
    if (strlen(path) >= size)
        gs_log(GS_LOG_ERROR, "GPUSLICE_SOCKET is longer than %zu bytes", size - 1);
    snprintf(socket_path, size, "%s", path);
    /* The policy file beside the socket, for an uninstall. */
    const char *slash = strrchr(socket_path, '/');
    size_t dir_len = slash ? (size_t)(slash - socket_path) : 0;
    if (slash && dir_len + 1 + sizeof GS_TENANT_POLICY_FILE <= sizeof host_policy_path)
        snprintf(host_policy_path, sizeof host_policy_path, "%.*s/%s", (int)dir_len, socket_path,
                 GS_TENANT_POLICY_FILE);
    if (host_uninstalled()) {
        *open_policy = true;
        policy_word = "uninstalled";
        policy_source = host_policy_path;
    }
}
