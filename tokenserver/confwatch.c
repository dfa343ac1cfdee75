/*
 * Watching the configuration directories with inotify: one inotify
 * descriptor, one watch per directory.
 *
 * A tenant file is read once it is complete: when it is closed after
 * writing (IN_CLOSE_WRITE) or renamed into place (IN_MOVED_TO), never at
 * IN_CREATE, when it may still be empty; only a symlink appearing
 * (IN_CREATE of a symlink: ConfigMap keys, ln -s) is complete at once. A
 * file that goes (IN_DELETE, IN_MOVED_FROM) removes its tenant. Each event
 * applies to its own file only, so a file being written is never read
 * because another one changed. Kubernetes swaps a ConfigMap by renaming
 * "..data": any change to a name starting with ".." rereads everything in
 * that directory, and a lost event (IN_Q_OVERFLOW) every directory.
 *
 * A watch is on the directory a path leads to. If the path is, or is
 * under, a symlink that is swapped, the old directory is still watched;
 * so every second (and on SIGHUP) each path is resolved again, and if it
 * now leads to another directory, that one is watched and read. Two paths
 * that lead to one directory share its watch (inotify gives one watch per
 * inode), which is removed only once neither has it.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define WATCH_MASK                                                                                              \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF |     \
     IN_ONLYDIR)

/* One configuration directory's watch (wd -1: none), the directory it is
 * on (0/0: none), whether a failure to watch it was logged, and whether
 * it was ever watched. */
struct dir_watch {
    int wd;
    dev_t dev;
    ino_t ino;
    bool warned, ever_watched;
};

/* The inotify descriptor, and the watch of each of options.config_dirs by
 * index. Owned by the loop's thread; no lock guards them (the server is
 * single-threaded). */
static struct loop_watch inotify_watch = {.fd = -1};
static struct dir_watch watches[CONFIG_DIRS_MAX];

/* Whether a directory other than `but` (CONFIG_DIRS_MAX: any) has watch
 * wd (two paths that lead to one directory share its watch). */
static bool wd_held(int wd, unsigned but)
{
    for (unsigned j = 0; j < options.nconfig_dirs; j++)
        if (j != but && watches[j].wd == wd)
            return true;
    return false;
}

/* Directory i has no watch any more (its own was removed, or is shared). */
static void forget(unsigned i)
{
    watches[i].wd = -1;
    watches[i].dev = 0;
    watches[i].ino = 0;
}

/* (Re)places the watch of directory i on the directory its path leads to
 * now. Returns true if that is another directory than before. */
static bool rewatch(unsigned i)
{
    struct dir_watch *w = &watches[i];
    const char *path = options.config_dirs[i];
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (!w->warned)
            slog(LOG_WARN, "cannot watch %s (%s): changes apply once it is back, or on SIGHUP", path,
                 errno ? strerror(errno) : "not a directory");
        w->warned = true;
        return false;
    }
    if (w->wd >= 0 && st.st_dev == w->dev && st.st_ino == w->ino)
        return false;
    bool moved = w->ever_watched;
    if (w->wd >= 0 && !wd_held(w->wd, i) && inotify_rm_watch(inotify_watch.fd, w->wd) != 0 && errno != EINVAL)
        slog(LOG_WARN, "inotify_rm_watch: %s", strerror(errno));
    forget(i);
    w->wd = inotify_add_watch(inotify_watch.fd, path, WATCH_MASK);
    if (w->wd < 0) {
        if (!w->warned)
            slog(LOG_WARN, "cannot watch %s (%s): reload with SIGHUP", path, strerror(errno));
        w->warned = true;
        return false;
    }
    w->warned = false;
    w->ever_watched = true;
    /* The directory watched may have been swapped between stat and the
     * watch; the next check sees that. */
    w->dev = st.st_dev;
    w->ino = st.st_ino;
    if (moved)
        slog(LOG_INFO, "%s now leads to another directory: watching and reading that one", path);
    return moved;
}

/* What an event about a name in directory i asks for: its own file is
 * applied here; true asks for a rescan of the directory. */
static bool file_event(unsigned i, const struct inotify_event *ev)
{
    if (!ev->len)
        return false;
    const char *name = ev->name;
    if (name[0] == '.' && name[1] == '.')
        return true; /* Kubernetes' "..data" swap */
    if (name[0] == '.')
        return false; /* an editor's or a writer's temporary file */
    if (ev->mask & IN_CREATE) {
        /* Only a symlink is complete when it appears; a file is read when
         * it is closed after writing. */
        struct stat st;
        int dir = open(options.config_dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        bool link = dir >= 0 && fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
        if (dir >= 0 && close(dir) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        if (!link)
            return false;
    }
    tenants_file_changed(i, name);
    return false;
}

/* What one event asks for: the directories to rescan, a bit each. */
static unsigned handle_event(const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW)
        return (1u << options.nconfig_dirs) - 1;
    bool self = ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED);
    if ((ev->mask & IN_MOVE_SELF) && wd_held(ev->wd, CONFIG_DIRS_MAX) &&
        inotify_rm_watch(inotify_watch.fd, ev->wd) != 0)
        slog(LOG_WARN, "inotify_rm_watch: %s", strerror(errno));
    unsigned rescan = 0;
    for (unsigned i = 0; i < options.nconfig_dirs; i++) {
        if (watches[i].wd != ev->wd)
            continue; /* another directory's, or a watch already replaced */
        if (self)
            forget(i); /* gone or moved away: watch what the path leads to now */
        else if (file_event(i, ev))
            rescan |= 1u << i;
    }
    return rescan;
}

static void on_inotify(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    unsigned rescan = 0;
    for (;;) {
        ssize_t n = read(inotify_watch.fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            slog(LOG_ERR, "inotify read: %s", strerror(errno));
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
            rescan |= handle_event(ev);
            p += sizeof *ev + ev->len;
        }
    }
    for (unsigned i = 0; i < options.nconfig_dirs; i++)
        if (watches[i].wd < 0 && rewatch(i))
            rescan |= 1u << i;
    for (unsigned i = 0; i < options.nconfig_dirs; i++)
        if (rescan & (1u << i)) {
            slog(LOG_INFO, "reloading %s", options.config_dirs[i]);
            tenants_scan_dir(i);
        }
}

int confwatch_open(void)
{
    for (unsigned i = 0; i < CONFIG_DIRS_MAX; i++)
        forget(i);
    inotify_watch = (struct loop_watch){.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC), .fn = on_inotify};
    if (inotify_watch.fd < 0 || loop_add(&inotify_watch, EPOLLIN) != 0) {
        slog(LOG_WARN, "inotify: %s: reload with SIGHUP", strerror(errno));
        if (inotify_watch.fd >= 0 && close(inotify_watch.fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        inotify_watch.fd = -1;
        return -1;
    }
    for (unsigned i = 0; i < options.nconfig_dirs; i++)
        rewatch(i);
    return 0;
}

void confwatch_check(void)
{
    if (inotify_watch.fd < 0)
        return;
    for (unsigned i = 0; i < options.nconfig_dirs; i++)
        if (rewatch(i))
            tenants_scan_dir(i);
}

void confwatch_reload(void)
{
    if (inotify_watch.fd >= 0)
        for (unsigned i = 0; i < options.nconfig_dirs; i++)
            rewatch(i);
    tenants_scan();
}

void confwatch_close(void)
{
    if (inotify_watch.fd >= 0) {
        loop_del(&inotify_watch);
        if (close(inotify_watch.fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        inotify_watch.fd = -1;
    }
}
