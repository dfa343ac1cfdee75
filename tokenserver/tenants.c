/*
 * Tenants: the set read from the configuration directories, one listening
 * socket each at RUN_DIR/tenants/NAME/gpuslice.sock (made by rundir.c)
 * beside the file that tells the tenant's shims what to do while no server
 * answers (RUN_DIR/tenants/NAME/on-server-down, gpuslice/containers.h),
 * and reloads.
 *
 * A client's tenant is the socket it connected to, never anything it says:
 * a container runtime mounts only its tenant's directory into the
 * container. On reload a new file gets a socket, a changed one applies to
 * the next grant, a removed one has its socket removed and its clients
 * disconnected with a reason; its directory stays (a container's mount of
 * it stays valid, and the tenant gets it back if re-added). So do all the
 * directories when the server stops: running containers have them (the
 * inodes, not the paths) bind-mounted, and the next server makes its
 * sockets in the same directories for them to reconnect. Whenever tenants
 * come or go, the CDI spec is rewritten (cdi.c). A bad file is
 * reported with its line and reason and changes nothing: a new tenant is
 * not created, an existing one keeps its last good settings. A tenant
 * whose socket cannot be made is kept and tried again every second.
 *
 * With several configuration directories (--config-dir given again), a
 * tenant belongs to the directory whose file configures it (tenant.dir),
 * and each directory's changes and scans add, change and remove only its
 * own tenants. A name with a valid file in two directories is the first
 * directory's (in the order given): the other file is reported as ignored
 * once per change (tenant.clash_logged), and a valid file appearing in an
 * earlier directory takes the tenant over. When the file of a tenant's
 * directory goes, the first other directory with a valid file of the name
 * takes it over (its settings apply, its clients stay connected); only
 * when none has one is the tenant removed.
 *
 * A file that is not a tenant file (not NAME.conf, or NAME not a valid
 * name) is said so once, while it exists (not_tenant below); a name
 * beginning with '.' (an editor's or a writer's temporary file) is passed
 * over in silence.
 */
#include "server.h"
#include "metrics/metrics.h"
#include "gpuslice/containers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#define SOCKET_NAME GS_TENANT_SOCKET

/* tenant.clash_logged has a bit per configuration directory. */
_Static_assert(CONFIG_DIRS_MAX <= 32, "a bit per configuration directory in an unsigned");

/* The id the next tenant gets, and whether a tenant was created or removed
 * since the CDI spec was last updated. Owned by the loop's thread; no lock
 * guards them (the server is single-threaded). */
static uint64_t next_tenant_id = 1;
static bool set_changed;

/* The files of each configuration directory said not to be tenant files:
 * each is said once while it exists, and forgotten when a scan of its
 * directory no longer finds it (or an event says it went), so that it is
 * said again if it comes back. Owned by the loop's thread; no lock guards
 * them (the server is single-threaded). */
struct not_tenant {
    struct not_tenant *next;
    bool seen; /* found by the scan under way */
    char name[];
};
static struct not_tenant *not_tenants[CONFIG_DIRS_MAX];

/* Whether file of directory dir is to be said not to be a tenant file
 * now: true the first time (and if memory runs out), false while it is
 * remembered. */
static bool first_time_not_tenant(unsigned dir, const char *file)
{
    for (struct not_tenant *n = not_tenants[dir]; n; n = n->next)
        if (strcmp(n->name, file) == 0) {
            n->seen = true;
            return false;
        }
    size_t len = strlen(file) + 1;
    struct not_tenant *n = malloc(sizeof *n + len);
    if (!n)
        return true;
    memcpy(n->name, file, len);
    n->seen = true;
    n->next = not_tenants[dir];
    not_tenants[dir] = n;
    return true;
}

/* Forgets the files of directory dir not seen since unmark_not_tenants,
 * or (file not NULL) that one file. */
static void forget_not_tenants(unsigned dir, const char *file)
{
    for (struct not_tenant **p = &not_tenants[dir]; *p;) {
        struct not_tenant *n = *p;
        if (file ? strcmp(n->name, file) == 0 : !n->seen) {
            *p = n->next;
            free(n);
        } else
            p = &n->next;
    }
}

static void unmark_not_tenants(unsigned dir)
{
    for (struct not_tenant *n = not_tenants[dir]; n; n = n->next)
        n->seen = false;
}

/* Rewrites the CDI spec if tenants came or went. */
static void cdi_follow(void)
{
    if (set_changed) {
        set_changed = false;
        cdi_update();
    }
}

struct tenant *tenant_find(const char *name)
{
    for (struct tenant *t = tenants; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

/* The smallest index no tenant has (there is one in 0..ntenants). */
static unsigned unused_index(void)
{
    bool *used = calloc((size_t)ntenants + 1, sizeof *used);
    unsigned index = 0;
    if (!used) { /* out of memory: one past the largest, which is free too */
        for (struct tenant *t = tenants; t; t = t->next)
            if (t->sched.index >= index)
                index = t->sched.index + 1;
        return index;
    }
    for (struct tenant *t = tenants; t; t = t->next)
        if (t->sched.index <= ntenants)
            used[t->sched.index] = true;
    while (used[index])
        index++;
    free(used);
    return index;
}

static void tenant_readable(void *arg, uint32_t events)
{
    (void)events;
    accept_tenant(arg);
}

static enum on_server_down policy_of(const struct tenant *t)
{
    return t->sched.config.on_server_down != ON_DOWN_DEFAULT ? t->sched.config.on_server_down : options.on_server_down;
}

/* Writes t's server-down policy into its directory, where the shims of its
 * containers read it (and the socket's path) instead of their environment;
 * tried again every second until it is written. The file stays when the
 * tenant is removed or the server stops, like the directory. */
static void tenant_write_policy(struct tenant *t)
{
    char text[16];
    snprintf(text, sizeof text, "%s\n", config_on_server_down_name(policy_of(t)));
    int dir = rundir_tenant_dir(t->name);
    int rc = dir < 0 ? -1 : rundir_write_file(dir, GS_TENANT_POLICY_FILE, text, 0644);
    int saved = errno;
    if (dir >= 0 && close(dir) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    if (rc != 0)
        slog_limited(t, LOG_ERR, "tenant %s: cannot write %s/tenants/%s/%s: %s; trying again every second", t->name,
                     options.run_dir, t->name, GS_TENANT_POLICY_FILE, strerror(saved));
    else if (!t->policy_written)
        slog(LOG_DEBUG, "tenant %s: %s/tenants/%s/%s says %s", t->name, options.run_dir, t->name,
             GS_TENANT_POLICY_FILE, config_on_server_down_name(policy_of(t)));
    t->policy_written = rc == 0;
}

/* Gives t its listening socket; -1 (logged) on failure. */
static int tenant_listen(struct tenant *t)
{
    int dir = rundir_tenant_dir(t->name);
    if (dir < 0) {
        slog_limited(t, LOG_ERR, "tenant %s: cannot open %s/tenants/%s (a directory, not a symlink): %s", t->name,
                     options.run_dir, t->name, strerror(errno));
        return -1;
    }
    int rc = rundir_listen(dir, SOCKET_NAME, 0666, 128, &t->sock);
    if (rc != 0)
        slog_limited(t, LOG_ERR, "tenant %s: cannot listen on %s/tenants/%s/%s: %s; trying again every second",
                     t->name, options.run_dir, t->name, SOCKET_NAME, strerror(errno));
    if (close(dir) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    if (rc != 0)
        return -1;
    listener_init(&t->listener, t->sock.fd, tenant_readable, t, loop_add, loop_del);
    if (!listener_resume(&t->listener)) {
        slog(LOG_ERR, "tenant %s: epoll: %s", t->name, strerror(errno));
        listener_close(&t->listener);
        rundir_unlisten(-1, SOCKET_NAME, &t->sock);
        return -1;
    }
    return 0;
}

static void tenant_unlisten(struct tenant *t)
{
    if (t->sock.fd < 0)
        return;
    listener_close(&t->listener);
    int dir = rundir_tenant_dir(t->name);
    rundir_unlisten(dir, SOCKET_NAME, &t->sock);
    if (dir >= 0 && close(dir) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
}

static void tenant_remove(struct tenant *t, const char *why)
{
    char reason[GS_REASON_MAX];
    snprintf(reason, sizeof reason, "tenant %s %s", t->name, why);
    for (struct client *c = clients, *next; c; c = next) {
        next = c->next;
        if (c->tenant == t) {
            client_close(c, reason);
            metrics_count_drop(DROP_TENANT_REMOVED, 1);
        }
    }
    struct sched_event gone = {.type = SCHED_TENANT_GONE, .tenant = &t->sched};
    sched_run(&gone);
    tenant_unlisten(t);
    for (struct tenant **p = &tenants; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    ntenants--;
    removals++;
    set_changed = true;
    free(t);
}

static void log_settings(const struct tenant *t, const char *what)
{
    char memory[32] = "none";
    if (t->sched.config.memory)
        snprintf(memory, sizeof memory, "%llu bytes", (unsigned long long)t->sched.config.memory);
    slog(LOG_INFO, "tenant %s: %sshare %g limit %g quantum %llu ms memory %s gang %s class %s on_server_down %s%s",
         t->name, what, t->sched.config.share, t->sched.config.limit,
         (unsigned long long)(t->sched.config.quantum_ns / 1000000), memory,
         config_gang_name(t->sched.config.gang), config_class_name(t->sched.config.class),
         config_on_server_down_name(policy_of(t)),
         t->sock.fd >= 0 ? "" : " (no socket yet)");
}

/* The path of NAME.conf in directory dir, for messages. */
static void file_path(unsigned dir, const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/%s.conf", options.config_dirs[dir], name);
}

/* Reads NAME.conf of directory dir (open at conf_fd); config_read_file's
 * result. */
static int read_file(unsigned dir, int conf_fd, const char *name, struct tenant_config *config, char *err,
                     size_t errlen)
{
    char file[GS_NAME_MAX + 8], path[4200];
    snprintf(file, sizeof file, "%s.conf", name);
    file_path(dir, name, path, sizeof path);
    return config_read_file(conf_fd, file, path, config, err, errlen);
}

static int open_config_dir(unsigned dir)
{
    int fd = open(options.config_dirs[dir], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        slog(LOG_ERR, "cannot read the configuration directory %s: %s", options.config_dirs[dir], strerror(errno));
    return fd;
}

/* Reads NAME.conf of directory dir, opening the directory for it. */
static int read_file_of(unsigned dir, const char *name, struct tenant_config *config, char *err, size_t errlen)
{
    int fd = open_config_dir(dir);
    if (fd < 0) {
        snprintf(err, errlen, "cannot read the configuration directory %s", options.config_dirs[dir]);
        return CONFIG_BAD;
    }
    int rc = read_file(dir, fd, name, config, err, errlen);
    if (close(fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    return rc;
}

/* Reports, once until it changes, that directory dir's file of t's name
 * is ignored: t is an earlier directory's. */
static void report_clash(struct tenant *t, unsigned dir)
{
    if (t->clash_logged & (1u << dir))
        return;
    char ignored[4200], used[4200];
    file_path(dir, t->name, ignored, sizeof ignored);
    file_path(t->dir, t->name, used, sizeof used);
    slog(LOG_ERR, "%s: ignored: tenant %s is configured by %s (the first configuration directory given wins)",
         ignored, t->name, used);
    t->clash_logged |= 1u << dir;
}

/* New settings for t (a changed file, or another file configures it now). */
static void tenant_update(struct tenant *t, const struct tenant_config *config)
{
    bool changed = memcmp(&t->sched.config, config, sizeof *config) != 0;
    enum on_server_down was = policy_of(t);
    t->sched.config = *config;
    if (policy_of(t) != was)
        t->policy_written = false; /* rewritten below */
    if (changed) {
        log_settings(t, "");
        struct sched_event ev = {.type = SCHED_TENANT_CHANGED, .tenant = &t->sched};
        sched_run(&ev);
    }
    if (!t->policy_written)
        tenant_write_policy(t);
}

static void tenant_create(unsigned dir, const char *name, const struct tenant_config *config)
{
    struct tenant *t = calloc(1, sizeof *t);
    if (!t) {
        slog(LOG_ERR, "tenant %s: out of memory", name);
        return;
    }
    memcpy(t->name, name, strlen(name) + 1); /* config_valid_name bounds it */
    t->sched.name = t->name;
    t->sched.config = *config;
    t->id = next_tenant_id++;
    t->sched.index = unused_index();
    t->sock.fd = -1;
    t->dir = dir;
    t->seen = true;
    struct tenant **tail = &tenants;
    while (*tail)
        tail = &(*tail)->next;
    *tail = t;
    ntenants++;
    set_changed = true;
    /* The policy first: wherever a container finds the socket, the policy
     * file is there too. */
    tenant_write_policy(t);
    tenant_listen(t);
    log_settings(t, "");
}

/* Directory dir's valid file (config) configures t from now on, in place
 * of its directory's. */
static void tenant_move(struct tenant *t, unsigned dir, const struct tenant_config *config)
{
    char from[4200], to[4200];
    file_path(t->dir, t->name, from, sizeof from);
    file_path(dir, t->name, to, sizeof to);
    slog(LOG_INFO, "tenant %s: configured by %s now, no longer by %s", t->name, to, from);
    t->dir = dir;
    t->clash_logged = 0;
    tenant_update(t, config);
}

/* The file of t's directory is gone: the first other directory with a
 * valid file of its name takes it over (and the files after that one are
 * reported as ignored), else it is removed. */
static void tenant_file_gone(struct tenant *t)
{
    unsigned gone = t->dir;
    bool moved = false;
    for (unsigned dir = 0; dir < options.nconfig_dirs; dir++) {
        struct tenant_config config;
        char err[600];
        if (dir == gone)
            continue;
        int rc = read_file_of(dir, t->name, &config, err, sizeof err);
        if (rc == CONFIG_MISSING)
            continue;
        if (moved) {
            report_clash(t, dir);
        } else if (rc != 0) {
            slog(LOG_ERR, "%s; not used for tenant %s", err, t->name);
        } else {
            tenant_move(t, dir, &config);
            moved = true;
        }
    }
    if (!moved) {
        slog(LOG_INFO, "tenant %s: removed", t->name);
        tenant_remove(t, "was removed from the configuration");
    }
}

/* Directory dir, earlier than t's, has a valid file (config) of t's
 * name: it configures t from now on, and the file of t's directory is
 * reported as ignored (if it is still there). */
static void take_over(struct tenant *t, unsigned dir, const struct tenant_config *config)
{
    unsigned from = t->dir;
    struct tenant_config old;
    char err[600];
    tenant_move(t, dir, config);
    t->seen = true;
    if (read_file_of(from, t->name, &old, err, sizeof err) != CONFIG_MISSING)
        report_clash(t, from);
}

/* Directory dir's file of t's name, which an earlier directory's file
 * configures (rc: what reading it gave). */
static void clashing_file(struct tenant *t, unsigned dir, int rc, bool changed)
{
    if (rc == CONFIG_MISSING || changed)
        t->clash_logged &= ~(1u << dir);
    if (rc != CONFIG_MISSING)
        report_clash(t, dir);
}

/* A bad file of directory dir (err says why): t, its tenant if any,
 * keeps its settings. */
static void bad_file(struct tenant *t, unsigned dir, const char *err)
{
    if (!t) {
        slog(LOG_ERR, "%s; tenant not created", err);
    } else if (t->dir == dir) {
        t->seen = true;
        slog(LOG_ERR, "%s; keeping the tenant's previous settings", err);
    } else {
        char used[4200];
        file_path(t->dir, t->name, used, sizeof used);
        slog(LOG_ERR, "%s; tenant %s keeps its settings from %s", err, t->name, used);
    }
}

/* Reads NAME.conf of directory dir (open at conf_fd) and creates, updates
 * or (if the file is gone) removes the tenant, as far as the tenant is
 * this directory's (see the top). changed: the file itself changed (an
 * event), so an ignored file is reported again. */
static void apply_file(unsigned dir, int conf_fd, const char *name, bool changed)
{
    struct tenant_config config;
    char err[600];
    struct tenant *t = tenant_find(name);
    int rc = read_file(dir, conf_fd, name, &config, err, sizeof err);
    bool earlier = t && t->dir < dir;
    metrics_count_reload(rc == CONFIG_BAD || (earlier && rc == 0) ? RELOAD_REJECTED : RELOAD_APPLIED);
    if (earlier) {
        clashing_file(t, dir, rc, changed);
    } else if (rc == CONFIG_MISSING) {
        if (t && t->dir == dir)
            tenant_file_gone(t);
    } else if (rc != 0) {
        bad_file(t, dir, err);
    } else if (!t) {
        tenant_create(dir, name, &config);
    } else if (t->dir == dir) {
        tenant_update(t, &config);
        t->seen = true;
    } else {
        take_over(t, dir, &config);
    }
}

static bool conf_suffix(const char *file)
{
    size_t len = strlen(file);
    return len > 5 && strcmp(file + len - 5, ".conf") == 0;
}

/* The tenant name of a file name NAME.conf of directory dir, or false;
 * with say, a file that is not a tenant file, and not a dotfile, is said
 * so once (first_time_not_tenant). */
static bool tenant_name(unsigned dir, const char *file, char name[GS_NAME_MAX], bool say)
{
    size_t len = strlen(file);
    if (file[0] == '.')
        return false;
    if (!conf_suffix(file)) {
        if (say && first_time_not_tenant(dir, file))
            slog(LOG_WARN, "%s/%s: ignored: tenant files are named NAME.conf", options.config_dirs[dir], file);
        return false;
    }
    if (len - 5 >= GS_NAME_MAX) {
        if (say && first_time_not_tenant(dir, file))
            slog(LOG_ERR, "%s/%s: ignored: tenant names have at most %d characters", options.config_dirs[dir], file,
                 GS_NAME_MAX - 1);
        return false;
    }
    memcpy(name, file, len - 5);
    name[len - 5] = '\0';
    if (!config_valid_name(name)) {
        if (say && first_time_not_tenant(dir, file))
            slog(LOG_ERR, "%s/%s: ignored: '%s' is not a valid tenant name (letters, digits, '-', '_', '.', at most "
                 "%d, not beginning with '-')", options.config_dirs[dir], file, name, GS_NAME_MAX - 1);
        return false;
    }
    return true;
}

/* Says once, whenever the server is left without a tenant, that nothing
 * can connect. */
static void warn_if_empty(void)
{
    static bool warned; /* owned by the loop's thread; no lock (single-threaded) */
    if (ntenants == 0 && !warned)
        slog(LOG_WARN, "no tenant: %s%s %s valid tenant file (NAME.conf); no process can connect until one is "
                       "added", options.nconfig_dirs > 1 ? "none of " : "", options.config_dirs_text,
             options.nconfig_dirs > 1 ? "has a" : "has no");
    warned = ntenants == 0;
}

/* Reads every file of directory dir, and removes (or hands to another
 * directory) its tenants whose file is gone. False if it could not be
 * read (then none is removed). */
static bool scan_dir(unsigned d)
{
    int fd = open_config_dir(d);
    if (fd < 0)
        return false;
    DIR *dir = fdopendir(fd);
    if (!dir) {
        slog(LOG_ERR, "cannot read the configuration directory %s: %s", options.config_dirs[d], strerror(errno));
        if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        return false;
    }
    for (struct tenant *t = tenants; t; t = t->next)
        t->seen = false;
    unmark_not_tenants(d);
    struct dirent *e;
    errno = 0;
    while ((e = readdir(dir))) {
        char name[GS_NAME_MAX];
        if (e->d_type == DT_DIR && !conf_suffix(e->d_name))
            continue; /* a directory beside the files: no tenant file, nothing to say */
        if (tenant_name(d, e->d_name, name, true))
            apply_file(d, dirfd(dir), name, false);
        errno = 0;
    }
    int read_error = errno;
    if (closedir(dir) != 0)
        slog(LOG_WARN, "closedir: %s", strerror(errno));
    if (read_error) {
        slog(LOG_ERR, "cannot read the configuration directory %s: %s; no tenant removed", options.config_dirs[d],
             strerror(read_error));
        return false;
    }
    forget_not_tenants(d, NULL);
    for (struct tenant *t = tenants, *next; t; t = next) {
        next = t->next;
        if (t->dir == d && !t->seen)
            tenant_file_gone(t);
    }
    return true;
}

void tenants_scan(void)
{
    bool read = true;
    for (unsigned d = 0; d < options.nconfig_dirs; d++)
        read &= scan_dir(d);
    cdi_follow();
    if (read)
        warn_if_empty();
}

void tenants_scan_dir(unsigned d)
{
    bool read = scan_dir(d);
    cdi_follow();
    if (read)
        warn_if_empty();
}

void tenants_file_changed(unsigned d, const char *file)
{
    char name[GS_NAME_MAX];
    if (file[0] == '.')
        return;
    if (!tenant_name(d, file, name, false)) {
        /* Not a tenant file: said so if it is there, forgotten if it went. */
        int fd = open_config_dir(d);
        if (fd < 0)
            return;
        struct stat st;
        if (fstatat(fd, file, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (!S_ISDIR(st.st_mode) || conf_suffix(file))
                tenant_name(d, file, name, true);
        } else if (errno == ENOENT)
            forget_not_tenants(d, file);
        else
            slog(LOG_WARN, "%s/%s: %s", options.config_dirs[d], file, strerror(errno));
        if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        return;
    }
    int fd = open_config_dir(d);
    if (fd < 0)
        return;
    apply_file(d, fd, name, true);
    if (close(fd) != 0)
        slog(LOG_WARN, "close: %s", strerror(errno));
    cdi_follow();
    warn_if_empty();
}

int tenants_load(void)
{
    for (unsigned d = 0; d < options.nconfig_dirs; d++) {
        int fd = open_config_dir(d);
        if (fd < 0)
            return -1;
        if (close(fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
    }
    tenants_scan();
    return 0;
}

void tenants_retry_listen(void)
{
    for (struct tenant *t = tenants; t; t = t->next)
        if (!t->policy_written)
            tenant_write_policy(t);
    for (struct tenant *t = tenants; t; t = t->next)
        if (t->sock.fd < 0 && tenant_listen(t) == 0)
            slog(LOG_INFO, "tenant %s: listening on %s/tenants/%s/%s", t->name, options.run_dir, t->name,
                 SOCKET_NAME);
}

/* At shutdown: the sockets go, the directories stay (see the top). The
 * CDI spec is main's to remove (cdi_remove), not to rewrite here. */
void tenants_close_all(void)
{
    while (tenants)
        tenant_remove(tenants, "is gone: the server is shutting down");
    set_changed = false;
}
