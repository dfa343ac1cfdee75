/*
 * Whether a process lives on (process_lives, server.h), read from /proc:
 * what decides if the device memory counted for a process whose
 * connection closed stays counted (memory.c's ghosts) or goes at once.
 *
 * A process's exit goes through steps the server can see between: its
 * tasks are marked exiting (PF_EXITING) before its exit closes its files
 * (the server hears its connection close), its main task turns zombie,
 * and its parent reaps it. Each step reads as gone: a missing process, a
 * zombie, a task that exits, and a task reaped between the opening of its
 * stat file and the reading of it (the read fails with ESRCH, or reads
 * nothing). That last one comes often: a parent that waits for its child
 * (a shell, a container runtime, a test) reaps it just as the server
 * looks. Counting it as alive kept the process's memory counted until the
 * next look at ghosts, a second later, and a process started in between
 * was refused memory it was due.
 *
 * Only a stat file that exists but cannot be opened or parsed (hidepid,
 * an unexpected format) counts as alive: memory then stays counted a
 * little longer rather than a tenant passing its cap.
 *
 * Owns nothing.
 */
#include "server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PF_EXITING_FLAG 0x4u /* proc(5), field 9 of stat */

bool task_stat_lives(int fd)
{
    char buf[512];
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno != ESRCH && errno != ENOENT; /* reaped since it was opened */
    if (n == 0)
        return false; /* a task's stat is never empty: it is gone */
    buf[n] = '\0';
    const char *rest = strrchr(buf, ')'); /* the name may hold anything */
    char state;
    unsigned long flags;
    if (!rest || sscanf(rest + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
        return true;
    return state != 'Z' && state != 'X' && !(flags & PF_EXITING_FLAG);
}

/* Whether the task whose stat file is at path lives: see task_stat_lives;
 * a file that is not there is a task that is gone. */
static bool task_lives(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT && errno != ESRCH;
    bool lives = task_stat_lives(fd);
    close(fd);
    return lives;
}

bool process_lives(pid_t pid)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    /* A zombie, or a process whose exit is closing its files, holds nothing
     * on a GPU any more: its driver context went with its exit. But the
     * stat of a process is its main thread's, which may have ended on its
     * own (pthread_exit) while other threads run on: then one of them
     * living is the process living. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (task_lives(path))
        return true;
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *tasks = opendir(path);
    if (!tasks)
        return false;
    bool alive = false;
    struct dirent *e;
    while (!alive && (e = readdir(tasks)) != NULL) {
        char task[96];
        if (e->d_name[0] == '.')
            continue;
        snprintf(task, sizeof task, "/proc/%d/task/%.20s/stat", (int)pid, e->d_name);
        alive = task_lives(task);
    }
    closedir(tasks);
    return alive;
}
