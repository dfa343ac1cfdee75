/*
 * The kubelet side of gpuslice-dra (dra_kubelet_lib) with the fake
 * prepare (fake_prepare.c), for test/dra/kubelet_test.py:
 *
 *     kubelet_fake_plugin REGISTRATION_SOCKET PLUGIN_SOCKET [TICK_FILE]
 *
 * serves both sockets until SIGTERM or SIGINT, then exits 0; exits 1 with
 * the reason on stderr if it cannot serve. Each tick rewrites TICK_FILE
 * with the number of ticks so far.
 */
#include "dra.h"
#include "kubelet.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

/* Set by the signal handler, read by dra_kubelet_serve's loop (the only
 * thread that reads it). */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int signal_number)
{
    (void)signal_number;
    stop_requested = 1;
}

struct tick_record {
    const char *path;
    unsigned long ticks;
};

static void tick(void *arg)
{
    struct tick_record *record = arg;
    record->ticks++;
    FILE *file = fopen(record->path, "w");
    if (file == NULL) {
        perror(record->path);
        return;
    }
    int printed = fprintf(file, "%lu\n", record->ticks);
    if (fclose(file) != 0 || printed < 0)
        perror(record->path);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s REGISTRATION_SOCKET PLUGIN_SOCKET [TICK_FILE]\n", argv[0]);
        return 2;
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_stop_signal;
    if (sigemptyset(&action.sa_mask) != 0 || sigaction(SIGTERM, &action, NULL) != 0
        || sigaction(SIGINT, &action, NULL) != 0) {
        perror("sigaction");
        return 1;
    }
    struct tick_record record = {.path = argc == 4 ? argv[3] : NULL};
    struct dra_kubelet_options options = {
        .driver_name = DRA_DRIVER_NAME,
        .registration_socket = argv[1],
        .plugin_socket = argv[2],
        .tick = record.path != NULL ? tick : NULL,
        .tick_arg = &record,
    };
    char error[512];
    if (dra_kubelet_serve(&options, &stop_requested, error, sizeof error) != 0) {
        fprintf(stderr, "kubelet_fake_plugin: %s\n", error);
        return 1;
    }
    return 0;
}
