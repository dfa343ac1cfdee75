/*
 * Watching the configuration directory with inotify.
 *
 * A tenant file is read once it is complete: when it is closed after
 * writing (IN_CLOSE_WRITE) or renamed into place (IN_MOVED_TO), never at
 * IN_CREATE, when it may still be empty; only a symlink appearing
 * (IN_CREATE of a symlink: ConfigMap keys, ln -s) is complete at once. A
 * file that goes (IN_DELETE, IN_MOVED_FROM) removes its tenant. Each event
 * applies to its own file only, so a file being written is never read
 * because another one changed. Kubernetes swaps a ConfigMap by renaming
 * "..data": any change to a name starting with ".." rereads everything,
 * as does a lost event (IN_Q_OVERFLOW).
 *
 * The watch is on the directory the path leads to. If the path is, or is
 * under, a symlink that is swapped, the old directory is still watched;
 * so every second (and on SIGHUP) the path is resolved again, and if it
 * now leads to another directory, that one is watched and read.
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

/* The inotify descriptor, the one watch on it and the directory it is on
 * (0/0: none); owned by the loop's thread. */
static struct loop_watch inotify_watch = {.fd = -1};
static int wd = -1;
static dev_t watched_dev;
static ino_t watched_ino;
static bool warned, ever_watched;

/* (Re)places the watch on the directory options.config_dir leads to now.
 * Returns true if that is another directory than before. */
static bool rewatch(void)
{
    struct stat st;
    if (stat(options.config_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (!warned)
            slog(LOG_WARN, "cannot watch %s (%s): changes apply once it is back, or on SIGHUP",
                 options.config_dir, errno ? strerror(errno) : "not a directory");
        warned = true;
        return false;
    }
    if (wd >= 0 && st.st_dev == watched_dev && st.st_ino == watched_ino)
        return false;
    bool moved = ever_watched;
    if (wd >= 0 && inotify_rm_watch(inotify_watch.fd, wd) != 0 && errno != EINVAL)
        slog(LOG_WARN, "inotify_rm_watch: %s", strerror(errno));
    wd = inotify_add_watch(inotify_watch.fd, options.config_dir, WATCH_MASK);
    if (wd < 0) {
        if (!warned)
            slog(LOG_WARN, "cannot watch %s (%s): reload with SIGHUP", options.config_dir, strerror(errno));
        warned = true;
        watched_dev = 0;
        watched_ino = 0;
        return false;
    }
    warned = false;
    ever_watched = true;
    /* The directory watched may have been swapped between stat and the
     * watch; the next check sees that. */
    watched_dev = st.st_dev;
    watched_ino = st.st_ino;
    if (moved)
        slog(LOG_INFO, "%s now leads to another directory: watching and reading that one", options.config_dir);
    return moved;
}

/* What one event asks for: nothing, its own file, or a full rescan. */
static bool handle_event(const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW)
        return true;
    if (ev->wd != wd)
        return false; /* a watch already replaced */
    if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
        /* Gone or moved away: watch what the path leads to now. */
        if ((ev->mask & IN_MOVE_SELF) && inotify_rm_watch(inotify_watch.fd, wd) != 0)
            slog(LOG_WARN, "inotify_rm_watch: %s", strerror(errno));
        wd = -1;
        watched_dev = 0;
        watched_ino = 0;
        return false;
    }
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
        int dir = open(options.config_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        bool link = dir >= 0 && fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
        if (dir >= 0 && close(dir) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        if (!link)
            return false;
    }
    tenants_file_changed(name);
    return false;
}

static void on_inotify(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool rescan = false;
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
    if (wd < 0 && rewatch())
        rescan = true;
    if (rescan) {
        slog(LOG_INFO, "reloading %s", options.config_dir);
        tenants_scan();
    }
}

int confwatch_open(void)
{
    inotify_watch = (struct loop_watch){.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC), .fn = on_inotify};
    if (inotify_watch.fd < 0 || loop_add(&inotify_watch, EPOLLIN) != 0) {
        slog(LOG_WARN, "inotify: %s: reload with SIGHUP", strerror(errno));
        if (inotify_watch.fd >= 0 && close(inotify_watch.fd) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
        inotify_watch.fd = -1;
        return -1;
    }
    rewatch();
    return 0;
}

bool confwatch_check(void)
{
    if (inotify_watch.fd < 0 || !rewatch())
        return false;
    tenants_scan();
    return true;
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
