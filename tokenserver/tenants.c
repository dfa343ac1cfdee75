/*
 * Tenants: the set read from the configuration directory, one listening
 * socket each at RUNDIR/tenants/NAME/gpuslice.sock, and reloads.
 *
 * A client's tenant is the socket it connected to, never anything it says:
 * a container runtime mounts only its tenant's directory into the
 * container. On reload a new file gets a socket, a changed one applies to
 * the next grant, a removed one has its socket removed and its clients
 * disconnected with a reason. A bad file is reported with its line and
 * reason and changes nothing: a new tenant is not created, an existing one
 * keeps its last good settings.
 */
#include "server.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct tenant *tenants;

struct tenant *tenant_find(const char *name)
{
    for (struct tenant *t = tenants; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

static void tenant_readable(void *arg, uint32_t events)
{
    (void)events;
    client_accept(arg);
}

static int mkdir_p(const char *path, mode_t mode)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, mode) != 0 && errno != EEXIST ? -1 : 0;
}

/* Creates the listening socket for t; -1 (logged) on failure. */
static int tenant_listen(struct tenant *t)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tenants/%s", options.run_dir, t->name);
    int n = snprintf(t->socket_path, sizeof t->socket_path, "%s/gpuslice.sock", dir);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (n < 0 || (size_t)n >= sizeof addr.sun_path) {
        slog(LOG_ERR, "tenant %s: socket path %s is longer than %zu bytes", t->name, t->socket_path,
             sizeof addr.sun_path - 1);
        return -1;
    }
    if (mkdir_p(dir, 0755) != 0) {
        slog(LOG_ERR, "tenant %s: cannot create %s: %s", t->name, dir, strerror(errno));
        return -1;
    }
    memcpy(addr.sun_path, t->socket_path, (size_t)n + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        slog(LOG_ERR, "tenant %s: socket: %s", t->name, strerror(errno));
        return -1;
    }
    unlink(t->socket_path); /* a leftover from a previous run */
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || chmod(t->socket_path, 0666) != 0 ||
        listen(fd, 128) != 0) {
        slog(LOG_ERR, "tenant %s: cannot listen on %s: %s", t->name, t->socket_path, strerror(errno));
        close(fd);
        return -1;
    }
    t->listen_fd = fd;
    t->watch = (struct loop_watch){.fd = fd, .fn = tenant_readable, .arg = t};
    if (loop_add(&t->watch, EPOLLIN) != 0) {
        slog(LOG_ERR, "tenant %s: epoll: %s", t->name, strerror(errno));
        close(fd);
        t->listen_fd = -1;
        return -1;
    }
    return 0;
}

/* Closes the tenant's clients and socket. Its directory goes too, unless
 * keep_dir: at shutdown it stays, because running containers have that
 * directory (the inode, not the path) bind-mounted, and the next server
 * must make its socket in the same directory for them to reconnect. */
static void tenant_remove(struct tenant *t, const char *why, bool keep_dir)
{
    char reason[GS_REASON_MAX];
    snprintf(reason, sizeof reason, "tenant %s %s", t->name, why);
    for (struct client *c = clients, *next; c; c = next) {
        next = c->next;
        if (c->tenant == t)
            client_close(c, reason);
    }
    sched_tenant_gone(t);
    if (t->listen_fd >= 0) {
        loop_del(&t->watch);
        close(t->listen_fd);
        unlink(t->socket_path);
        char *slash = strrchr(t->socket_path, '/');
        if (slash && !keep_dir) {
            *slash = '\0';
            rmdir(t->socket_path);
        }
    }
    for (struct tenant **p = &tenants; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    free(t);
}

static void apply_file(const char *name, const char *path)
{
    struct tenant_config config;
    char err[512];
    struct tenant *t = tenant_find(name);
    if (t)
        t->seen = true;
    if (config_parse_file(path, &config, err, sizeof err) != 0) {
        slog(LOG_ERR, "%s; %s", err, t ? "keeping the tenant's previous settings" : "tenant not created");
        return;
    }
    if (t) {
        if (memcmp(&t->config, &config, sizeof config) != 0)
            slog(LOG_INFO, "tenant %s: share %g limit %g quantum %llu ms memory %llu", name, config.share,
                 config.limit, (unsigned long long)(config.quantum_ns / 1000000),
                 (unsigned long long)config.memory);
        t->config = config;
        return;
    }
    t = calloc(1, sizeof *t);
    if (!t) {
        slog(LOG_ERR, "tenant %s: out of memory", name);
        return;
    }
    memcpy(t->name, name, strlen(name) + 1); /* config_valid_name bounds it */
    t->config = config;
    t->listen_fd = -1;
    t->seen = true;
    if (tenant_listen(t) != 0) {
        free(t);
        return;
    }
    t->next = tenants;
    tenants = t;
    slog(LOG_INFO, "tenant %s: share %g limit %g quantum %llu ms, socket %s", name, config.share, config.limit,
         (unsigned long long)(config.quantum_ns / 1000000), t->socket_path);
}

static int scan(void)
{
    DIR *dir = opendir(options.config_dir);
    if (!dir) {
        slog(LOG_ERR, "cannot read the configuration directory %s: %s", options.config_dir, strerror(errno));
        return -1;
    }
    for (struct tenant *t = tenants; t; t = t->next)
        t->seen = false;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".conf") != 0 || e->d_name[0] == '.')
            continue;
        char name[256], path[4096];
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->d_name);
        snprintf(path, sizeof path, "%s/%s", options.config_dir, e->d_name);
        if (!config_valid_name(name)) {
            slog(LOG_ERR, "%s: '%s' is not a valid tenant name (letters, digits, '-', '_', '.', at most %d)",
                 path, name, GS_NAME_MAX - 1);
            continue;
        }
        apply_file(name, path);
    }
    closedir(dir);
    for (struct tenant *t = tenants, *next; t; t = next) {
        next = t->next;
        if (!t->seen) {
            slog(LOG_INFO, "tenant %s: removed", t->name);
            tenant_remove(t, "was removed from the configuration", false);
        }
    }
    cdi_update();
    return 0;
}

int tenants_load(void)
{
    char tdir[4096];
    snprintf(tdir, sizeof tdir, "%s/tenants", options.run_dir);
    if (mkdir_p(tdir, 0755) != 0) {
        slog(LOG_ERR, "cannot create %s: %s", tdir, strerror(errno));
        return -1;
    }
    return scan();
}

void tenants_reload(void)
{
    slog(LOG_INFO, "reloading %s", options.config_dir);
    scan();
}

void tenants_close_all(void)
{
    while (tenants)
        tenant_remove(tenants, "is gone: the server is shutting down", true);
}
