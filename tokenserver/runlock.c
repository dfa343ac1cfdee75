/*
 * One server per run directory: RUN_DIR/server.lock, locked with flock(2)
 * for as long as a server runs there, and holding that server's PID.
 *
 * The kernel lets go of the lock when the server exits, however it exits
 * (SIGKILL included), so a stale file never keeps the next server out,
 * and the lock is never taken twice. The PID in the file is only for
 * messages; the holder is looked up first in /proc/locks, which names it
 * in the reader's PID namespace (the file says what the holder saw in
 * its own). The file is never removed: a server that opened it just
 * before would otherwise lock an inode nobody else can find.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int runlock_open(int run_fd)
{
    return openat(run_fd, RUNLOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
}

int runlock_take(int fd)
{
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    return errno == EWOULDBLOCK ? 1 : -1;
}

void runlock_mark(int fd)
{
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n)
        slog(LOG_WARN, "cannot write the PID into %s/%s: %s", options.run_dir, RUNLOCK_NAME, strerror(errno));
}

/* The PID /proc/locks gives the holder of an flock on (dev, ino): -1 if
 * it lists one whose PID this PID namespace cannot see, 0 if none (or
 * /proc/locks cannot be read). */
static long holder_from_proc_locks(dev_t dev, ino_t ino)
{
    FILE *f = fopen("/proc/locks", "re");
    if (!f)
        return 0;
    char line[256];
    long found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        /* "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; waiters
         * have "->" after the number. */
        char type[16], mode[16], access[16];
        long pid;
        unsigned maj, min;
        unsigned long long inode;
        const char *p = strchr(line, ':');
        if (!p || strstr(line, "->"))
            continue;
        if (sscanf(p + 1, "%15s %15s %15s %ld %x:%x:%llu", type, mode, access, &pid, &maj, &min, &inode) == 7 &&
            strcmp(type, "FLOCK") == 0 && maj == major(dev) && min == minor(dev) && inode == (unsigned long long)ino)
            found = pid > 0 ? pid : -1;
    }
    fclose(f);
    return found;
}

long runlock_holder(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return 0;
    long pid = holder_from_proc_locks(st.st_dev, st.st_ino);
    if (pid > 0)
        return pid;
    char text[32];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    long v = strtol(text, &end, 10);
    return v > 0 && (*end == '\n' || *end == '\0') ? v : 0;
}

int runlock_held_at(const char *run_dir, long *pid)
{
    /* Read from /proc/locks, never by trying the lock: a server starting
     * there at that moment would find it taken. */
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", run_dir, RUNLOCK_NAME);
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    long holder = holder_from_proc_locks(st.st_dev, st.st_ino);
    if (pid)
        *pid = holder > 0 ? holder : 0;
    return holder != 0;
}
