/*
 * gpuslice-server: the node-local token server. Start-up, options,
 * signals (signalfd), configuration watching (inotify) and logging.
 */
#include "server.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

struct server_options options = {
    .config_dir = "/etc/gpuslice/tenants.d",
    .run_dir = "/run/gpuslice",
    .cdi_dir = "/var/run/cdi",
    .shim_path = GPUSLICE_SHIM_DEFAULT,
    .grace_ns = 250000000ull,
};
int log_level = LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void slog(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ gpuslice-server: %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}

static void usage(FILE *f)
{
    fprintf(f,
"Usage: gpuslice-server [OPTIONS]\n"
"\n"
"The gpuslice token server. Processes preloaded with libgpuslice.so ask it\n"
"for a time slice on each GPU before they submit work; it grants exclusive,\n"
"drained slices so that busy tenants split each GPU in proportion to their\n"
"share, none exceeds its limit, and each stays under its memory cap.\n"
"\n"
"Tenants are files CONFIG_DIR/NAME.conf of 'key = value' lines:\n"
"  share = 1          positive weight\n"
"  limit = 1          largest fraction of a GPU, 0 < limit <= 1\n"
"  quantum_ms = 20    slice length, 1..1000 ms\n"
"  memory = 4G        device memory cap per GPU, summed over the tenant's\n"
"                     processes (K/M/G/T); none if absent\n"
"Each tenant gets a socket RUN_DIR/tenants/NAME/gpuslice.sock. Mount that\n"
"directory into the tenant's containers at /run/gpuslice (or point\n"
"GPUSLICE_SOCKET at the socket): a process's tenant is the socket it\n"
"connects to. The admin socket RUN_DIR/admin.sock (mode 0600) serves\n"
"gpuslicectl.\n"
"\n"
"Containers: the server writes CDI_DIR/gpuslice.json, a CDI spec with one\n"
"device per tenant (gpuslice.io/tenant=NAME) that mounts, read-only, the\n"
"tenant's directory at /run/gpuslice, the shim at\n"
"/usr/lib/gpuslice/libgpuslice.so and RUN_DIR/cdi/ld.so.preload at\n"
"/etc/ld.so.preload, and sets LD_PRELOAD. It follows every change of the\n"
"tenants and is removed when the server stops.\n"
"\n"
"Changes to CONFIG_DIR apply without a restart (inotify, or SIGHUP): new\n"
"tenants get a socket, changed settings apply to the next grant, removed\n"
"tenants lose their socket and their processes are disconnected. A file\n"
"with an error is reported (file, line, reason) and ignored; the other\n"
"tenants are unaffected.\n"
"\n"
"Options:\n"
"  -c, --config-dir DIR   tenant files (default /etc/gpuslice/tenants.d)\n"
"  -r, --run-dir DIR      sockets (default /run/gpuslice)\n"
"      --cdi-dir DIR      where to write the CDI spec (default /var/run/cdi;\n"
"                         empty: no spec)\n"
"      --shim PATH        the host's libgpuslice.so, which containers get\n"
"                         (default " GPUSLICE_SHIM_DEFAULT ")\n"
"  -g, --grace-ms MS      how long after its deadline a holder may take to\n"
"                         drain before its slice is taken back and charged\n"
"                         (default 250)\n"
"  -l, --log-level LEVEL  error, warn, info or debug (default info)\n"
"  -h, --help             show this help\n"
"  -V, --version          show the version\n"
"\n"
"Signals: SIGHUP reloads the configuration; SIGTERM and SIGINT stop the\n"
"server, disconnecting every client (which wait for it, or run\n"
"unthrottled, as their GPUSLICE_ON_SERVER_DOWN says).\n"
"\n"
"Exit status: 0 after SIGTERM/SIGINT, 1 on a usage error, 2 if the server\n"
"cannot start (directories, sockets).\n");
}

static bool parse_ms(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v > 3600000)
        return false;
    *out = v * 1000000ull;
    return true;
}

static struct loop_watch signal_watch, inotify_watch;
static struct timer housekeeping;

static void on_signal(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    struct signalfd_siginfo si;
    while (read(signal_watch.fd, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            tenants_reload();
        } else {
            slog(LOG_INFO, "signal %u: stopping", si.ssi_signo);
            loop_stop();
        }
    }
}

static void on_inotify(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    char buf[8192];
    bool changed = false;
    while (read(inotify_watch.fd, buf, sizeof buf) > 0)
        changed = true;
    if (changed)
        tenants_reload();
}

static void on_housekeeping(void *arg)
{
    (void)arg;
    clients_sweep();
    timer_at(&housekeeping, now_ns() + 1000000000ull);
}

int main(int argc, char **argv)
{
    static const struct option long_options[] = {
        {"config-dir", required_argument, NULL, 'c'}, {"run-dir", required_argument, NULL, 'r'},
        {"grace-ms", required_argument, NULL, 'g'},   {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},             {"version", no_argument, NULL, 'V'},
        {"cdi-dir", required_argument, NULL, 'C'},    {"shim", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "c:r:g:l:hV", long_options, NULL)) != -1) {
        switch (opt) {
        case 'c': options.config_dir = optarg; break;
        case 'r': options.run_dir = optarg; break;
        case 'C': options.cdi_dir = optarg; break;
        case 'S': options.shim_path = optarg; break;
        case 'g':
            if (!parse_ms(optarg, &options.grace_ns)) {
                fprintf(stderr, "gpuslice-server: --grace-ms needs milliseconds (0..3600000), got '%s'\n", optarg);
                return 1;
            }
            break;
        case 'l': {
            int found = -1;
            for (int i = 0; i < 4; i++)
                if (strcasecmp(optarg, level_names[i]) == 0)
                    found = i;
            if (found < 0) {
                fprintf(stderr, "gpuslice-server: --log-level must be error, warn, info or debug\n");
                return 1;
            }
            log_level = found;
            break;
        }
        case 'h': usage(stdout); return 0;
        case 'V': printf("gpuslice-server %s (protocol %d)\n", GPUSLICE_VERSION, GS_PROTOCOL_VERSION); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "gpuslice-server: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (loop_init() != 0) {
        slog(LOG_ERR, "epoll_create1: %s", strerror(errno));
        return 2;
    }
    signal_watch = (struct loop_watch){.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC), .fn = on_signal};
    inotify_watch = (struct loop_watch){.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC), .fn = on_inotify};
    if (signal_watch.fd < 0 || inotify_watch.fd < 0 || loop_add(&signal_watch, EPOLLIN) != 0 ||
        loop_add(&inotify_watch, EPOLLIN) != 0) {
        slog(LOG_ERR, "signalfd/inotify: %s", strerror(errno));
        return 2;
    }
    if (inotify_add_watch(inotify_watch.fd, options.config_dir,
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE) < 0)
        slog(LOG_WARN, "cannot watch %s (%s): reload with SIGHUP", options.config_dir, strerror(errno));
    if (cdi_init() != 0 || tenants_load() != 0 || admin_open() != 0)
        return 2;
    if (timer_init(&housekeeping, on_housekeeping, NULL) != 0)
        return 2;
    timer_at(&housekeeping, now_ns() + 1000000000ull);
    slog(LOG_INFO, "serving %s (admin socket %s/admin.sock)", options.config_dir, options.run_dir);

    int rc = loop_run();
    tenants_close_all();
    cdi_remove();
    admin_close();
    return rc == 0 ? 0 : 2;
}
