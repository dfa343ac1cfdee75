/*
 * Whether a process lives on (tokenserver/process_lives.c), which decides
 * whether the device memory of a process whose connection closed stays
 * counted: a running child lives, and so does one whose main thread ended
 * while another thread runs; a zombie and a reaped child do not; nor does
 * a child reaped between the opening of its stat file and the reading of
 * it (its parent's wait races with the server's look at every exit).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "../tokenserver/server.h"

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Waits until pid is a zombie, without reaping it. */
static bool wait_zombie(pid_t pid)
{
    siginfo_t info;
    memset(&info, 0, sizeof info);
    return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) == 0;
}

static pid_t child_sleeping(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        pause_ms(10000);
        _exit(0);
    }
    return pid;
}

static void *sleeper(void *arg)
{
    (void)arg;
    pause_ms(10000);
    return NULL;
}

/* A child whose main thread ends (pthread_exit) while another sleeps;
 * ready is written once the main thread is about to end. */
static pid_t child_main_thread_gone(int ready)
{
    pid_t pid = fork();
    if (pid == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, sleeper, NULL) != 0)
            _exit(1);
        char one = 1;
        if (write(ready, &one, 1) != 1)
            _exit(1);
        pthread_exit(NULL);
    }
    return pid;
}

int main(void)
{
    EXPECT(process_lives(getpid()));
    EXPECT(!process_lives(0));

    pid_t live = child_sleeping();
    EXPECT(live > 0 && process_lives(live));
    kill(live, SIGKILL);
    EXPECT(wait_zombie(live));
    EXPECT(!process_lives(live)); /* a zombie */
    waitpid(live, NULL, 0);
    EXPECT(!process_lives(live)); /* reaped */

    /* Reaped between the opening of its stat file and the reading. */
    pid_t reaped = child_sleeping();
    kill(reaped, SIGKILL);
    EXPECT(wait_zombie(reaped));
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)reaped);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    EXPECT(fd >= 0);
    waitpid(reaped, NULL, 0);
    EXPECT(fd >= 0 && !task_stat_lives(fd));
    if (fd >= 0)
        close(fd);

    /* Opened while it ran: it lives. */
    pid_t running = child_sleeping();
    snprintf(path, sizeof path, "/proc/%d/stat", (int)running);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    EXPECT(fd >= 0 && task_stat_lives(fd));
    if (fd >= 0)
        close(fd);
    kill(running, SIGKILL);
    waitpid(running, NULL, 0);

    /* Its main thread ended, another runs on: it lives. */
    int pipefd[2];
    EXPECT(pipe(pipefd) == 0);
    pid_t half = child_main_thread_gone(pipefd[1]);
    char byte;
    EXPECT(read(pipefd[0], &byte, 1) == 1);
    for (int i = 0; i < 200; i++) { /* until its main thread has ended */
        char stat[512] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", (int)half);
        FILE *f = fopen(path, "re");
        size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
        if (f)
            fclose(f);
        stat[n] = '\0';
        const char *rest = strrchr(stat, ')');
        if (rest && rest[2] == 'Z')
            break;
        pause_ms(5);
    }
    EXPECT(process_lives(half));
    kill(half, SIGKILL);
    waitpid(half, NULL, 0);
    EXPECT(!process_lives(half));
    return check_finish();
}
