/*
 * gpuslice-server: the node-local token server. Options and limits,
 * start-up (descriptor limit, umask, working directory), signals
 * (signalfd) and the once-a-second housekeeping.
 */
#include "server.h"
#include "metrics/metrics.h"
#include "gpuslice/nvidia_info.h"
#include "gpuslice/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

/* How long leases wait after a restart for the last server's processes. */
#define RECOVERY_NS 1500000000ull

static void usage(FILE *f)
{
    char keys[160];
    config_key_list(keys, sizeof keys, " and ");
    fprintf(f,
"Usage: gpuslice-server [OPTIONS]\n"
"\n"
"The gpuslice token server. Processes preloaded with libgpuslice.so ask it\n"
"for a time slice on each GPU before they submit work; it grants exclusive,\n"
"drained slices so that busy tenants split each GPU in proportion to their\n"
"share, none exceeds its limit, and each stays under its memory cap.\n"
"\n"
"Tenants are files CONFIG_DIR/NAME.conf of 'key = value' lines with the keys\n"
"%s.\n"
"gpuslice-server --help-tenant-file (or man 5 gpuslice-tenant) says what\n"
"they mean, their values and defaults, and which files are tenants.\n"
"\n"
"Each tenant gets a socket RUN_DIR/tenants/NAME/gpuslice.sock and a file\n"
"RUN_DIR/tenants/NAME/on-server-down that holds its policy ('wait' or\n"
"'open'). Mount that directory, read-only, into the tenant's containers at\n"
"/run/gpuslice: a process's tenant is the socket it connects to, and where\n"
"/run/gpuslice holds the socket or the policy file, the shim takes both\n"
"from there, whatever GPUSLICE_SOCKET and GPUSLICE_ON_SERVER_DOWN say. (On\n"
"the host, point GPUSLICE_SOCKET at the socket.) The directory stays when\n"
"the tenant is removed or the server stops, so a mount of it stays valid\n"
"and a re-added tenant, or the next server, makes its socket there again.\n"
"The admin socket RUN_DIR/admin.sock (mode 0600) serves gpuslicectl.\n"
"\n"
"Containers: the server writes CDI_DIR/gpuslice.json, a CDI spec with one\n"
"device per tenant (gpuslice.io/tenant=NAME) that mounts, read-only, the\n"
"tenant's directory at /run/gpuslice, the shim at\n"
"/usr/lib/gpuslice/libgpuslice.so and RUN_DIR/cdi/ld.so.preload at\n"
"/etc/ld.so.preload, and sets LD_PRELOAD. It follows every change of the\n"
"tenants, and stays when the server stops, so that containers created\n"
"while it restarts start (their processes connect once it is back).\n"
"\n"
"One server per run directory: a server holds RUN_DIR/server.lock while it\n"
"runs, and a second one started on the same directory exits with status 2,\n"
"naming the first one's PID.\n"
"\n", keys);
    fprintf(f,
"Changes to CONFIG_DIR apply without a restart (inotify, or SIGHUP): new\n"
"tenants get a socket, changed settings apply to the next grant, removed\n"
"tenants lose their socket and their processes are disconnected. A file is\n"
"read once it is complete (closed after writing, or renamed into place). A\n"
"file with an error is reported (file, line, reason) and ignored; the other\n"
"tenants are unaffected. If CONFIG_DIR is a symlink that is swapped, the\n"
"new target is followed within a second.\n"
"\n"
"--config-dir may be given up to 8 times: each CONFIG_DIR is read, watched\n"
"and followed as above, and must exist at start. A tenant belongs to the\n"
"directory its file is in. A NAME in two directories is the first one's\n"
"(in the order given): the other file is reported and ignored, and\n"
"configures the tenant once the first one's file is gone.\n"
"\n");
    /* Two strings: C11 compilers need support only 4095 characters in one. */
    fprintf(f,
"Options:\n"
"  -c, --config-dir DIR   tenant files (default /etc/gpuslice/tenants.d);\n"
"                         up to 8 times, for several directories\n"
"  -r, --run-dir DIR      sockets (default /run/gpuslice)\n"
"      --cdi-dir DIR      where to write the CDI spec (default /var/run/cdi;\n"
"                         empty: no spec)\n"
"      --shim PATH        the host's libgpuslice.so, which containers get\n"
"                         (default " GPUSLICE_SHIM_DEFAULT ")\n"
"  -g, --grace-ms MS      how long after its deadline a holder may take to\n"
"                         drain before its slice is taken back and charged\n"
"                         (0 to 3600000, default 250); a release that comes\n"
"                         later is charged up to when it was sent, one more\n"
"                         grace period at most\n"
"      --preempt-ms MS    for GPUs a latency tenant shares: the most estimated\n"
"                         device time a batch holder's processes keep admitted\n"
"                         ahead of the GPU, which is what a latency tenant's\n"
"                         preemption waits for; a tenant file's preempt_ms\n"
"                         overrides it (1 to 1000, default 2)\n"
"  -l, --log-level LEVEL  error, warn, info or debug (default info)\n"
"  -m, --metrics ADDR:PORT\n"
"                         serve Prometheus metrics at http://ADDR:PORT/metrics\n"
"                         (default 127.0.0.1:29400). ADDR is numeric:\n"
"                         ':PORT' for every IPv4 address, '[::1]:PORT' or\n"
"                         '[::]:PORT' for IPv6, '' for none\n"
"      --nvidia-dir DIR   the NVIDIA driver's /proc directory: the GPUs of the\n"
"                         node, their indexes (metrics) and device minor\n"
"                         numbers (default /proc/driver/nvidia)\n"
"      --verify-gpus auto|on|off\n"
"                         whether a GPU a process declares must be one it\n"
"                         was given: listed in DIR/gpus, and declared with\n"
"                         an open descriptor of its device node (character\n"
"                         device 195:N), which a container's device cgroup\n"
"                         lets it open only for the GPUs it was allocated.\n"
"                         A process that declares another GPU gets an ERROR\n"
"                         and is disconnected. auto (default): on when\n"
"                         DIR/gpus exists; off: any UUID is accepted\n"
"                         (needed for MIG instances, whose UUIDs DIR/gpus\n"
"                         does not list)\n"
"      --nvidia-major N   the major number of the driver's device nodes\n"
"                         (default 195, NVIDIA's; tests stand another\n"
"                         driver's nodes in for them)\n"
"      --hostname NAME    a Hostname label on GPU and process series in\n"
"                         /metrics, as dcgm-exporter has (default none; in a\n"
"                         DaemonSet, the node's name)\n"
"      --pod-log-dir DIR  the kubelet's links to container logs,\n"
"                         POD_NAMESPACE_CONTAINER-ID.log, whose names give\n"
"                         the namespace, pod and container labels of process\n"
"                         series (default /var/log/containers; '' for none)\n");
    fprintf(f,
"      --on-server-down POLICY\n"
"                         what the processes in tenants' containers do while\n"
"                         no server answers (stopped, restarting, upgraded),\n"
"                         unless a tenant file says otherwise: 'wait' (the\n"
"                         default) holds their GPU work until a server is\n"
"                         back, so no tenant runs past its share, limit or\n"
"                         memory cap; 'open' runs it unthrottled and\n"
"                         uncounted meanwhile. Written into each tenant's\n"
"                         directory, where it outlives the server\n"
"      --uninstall        take gpuslice off the node instead of serving (see\n"
"                         Uninstall below)\n"
"      --install-dir DIR  with --uninstall: also remove what the Kubernetes\n"
"                         DaemonSet's init container copied there\n"
"                         (DIR/lib/libgpuslice.so, DIR/bin/gpuslice-hook,\n"
"                         DIR/hooks.d/gpuslice.json)\n"
"  -h, --help             show this help\n"
"      --help-tenant-file show the reference of tenant files\n"
"  -V, --version          show the version\n"
"\n");
    fprintf(f,
"Limits (a tenant is not trusted: nothing it does may exhaust the server;\n"
"each N is a whole number from 1 to 1000000):\n"
"      --max-clients N    connections of all tenants together (default\n"
"                         65536, and never more than the descriptor limit\n"
"                         allows: the server raises RLIMIT_NOFILE to its\n"
"                         hard limit and keeps one descriptor per tenant\n"
"                         and 64 more for the rest)\n"
"      --max-clients-per-tenant N\n"
"                         connections of one tenant (default 256); a\n"
"                         connection over a limit gets an ERROR and is\n"
"                         closed, and that socket is not read for 100 ms\n"
"      --max-devices N    GPUs known at once (default 256)\n"
"      --max-devices-per-tenant N\n"
"                         GPUs one tenant's processes may declare (default\n"
"                         64); a process declaring more is disconnected\n"
"      --device-linger-ms MS\n"
"                         a GPU no process has declared for this long is\n"
"                         forgotten, statistics included (0 to 86400000,\n"
"                         default 10000; sooner when --max-devices is\n"
"                         reached); never while a live process that lost\n"
"                         its connection has memory counted on it\n"
"      --client-buffer BYTES\n"
"                         messages queued to a process that does not read\n"
"                         them; when full, the process is disconnected with\n"
"                         one log line (4096 to 67108864, default 65536,\n"
"                         kernel accounting)\n"
"Messages a client can cause are logged at most 10 times per 10 s per kind\n"
"and tenant, then counted.\n"
"\n"
"Signals: SIGHUP reloads the configuration; SIGTERM and SIGINT stop the\n"
"server for a restart or an upgrade, disconnecting every client (which\n"
"wait for the next server, or run unthrottled, as their tenant's policy\n"
"says); the CDI spec and the tenants' directories stay.\n"
"\n");
    fprintf(f,
"Uninstall: gpuslice-server --uninstall (with the --run-dir and --cdi-dir\n"
"the server ran with) stops the server of RUN_DIR if one still runs\n"
"(SIGTERM, then waits up to 30 s for it to exit), then: writes\n"
"'uninstalled open' into every tenant's on-server-down, so that the\n"
"processes still running stop waiting for a server and run ungated (a\n"
"shim that does not know 'uninstalled' takes 'open'); removes the sockets,\n"
"RUN_DIR/.clients and the preload list; replaces a CDI spec of RUN_DIR by\n"
"one whose devices change nothing but set GPUSLICE_UNINSTALLED=1, so that\n"
"containers that still name a tenant start, without gpuslice (remove\n"
"CDI_DIR/gpuslice.json once none does); and with --install-dir removes\n"
"the copied shim, hook and hooks.d file. The tenants' directories stay\n"
"(running containers have them mounted); RUN_DIR is on /run, gone at the\n"
"next boot.\n"
"\n"
"Exit status: 0 after SIGTERM/SIGINT (or an uninstall), 1 on a usage\n"
"error, 2 if the server cannot start (directories, sockets, another\n"
"server on RUN_DIR) or the uninstall could not finish.\n");
}

/* Prints text wrapped before column 78, continued lines from column
 * indent; the first line goes on from column at (pads to indent, or starts
 * a new line if at is past it). */
static void print_wrapped(FILE *f, const char *text, int at, int indent)
{
    int col = at;
    if (col > indent - 1) {
        fputc('\n', f);
        col = 0;
    }
    fprintf(f, "%*s", indent - col, "");
    col = indent;
    while (*text) {
        int len = (int)strcspn(text, " ");
        if (col > indent && col + 1 + len > 78) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        }
        if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", len, text);
        col += len;
        text += len;
        text += strspn(text, " ");
    }
    fputc('\n', f);
}

/* The reference of tenant files (--help-tenant-file; man 5
 * gpuslice-tenant is made from it): the keys from the parser's table. */
static void tenant_file_help(FILE *f)
{
    fputs("Tenant files of gpuslice-server\n"
          "\n"
          "A tenant of gpuslice-server is a file NAME.conf in one of its\n"
          "configuration directories (--config-dir, default\n"
          "/etc/gpuslice/tenants.d): the tenant NAME, whose processes share the\n"
          "node's GPUs as the file says. The file holds 'key = value' lines; '#'\n"
          "begins a comment, on its own line or after a value, and blank lines are\n"
          "ignored. Every key is optional, and may be given once.\n"
          "\n"
          "Keys:\n",
          f);
    for (unsigned i = 0; i < config_nkeys; i++) {
        int at = fprintf(f, "  %s = %s", config_keys[i].name, config_keys[i].example);
        print_wrapped(f, config_keys[i].text, at, 21);
    }
    fputs("\n"
          "File names:\n"
          "NAME is 1 to 63 letters, digits, '.', '_' and '-', not beginning with '.'\n"
          "or '-'. Other files are not tenants: names beginning with '.' (editors'\n"
          "temporary files) are passed over in silence, and any other file whose\n"
          "name does not end in .conf (team-a.cnf, team-a.conf.bak, team-a.yaml) is\n"
          "logged once, at warn, as ignored. A tenant file must be a regular file\n"
          "(or a symlink to one) of at most 64 KiB. A NAME in two directories is\n"
          "the first directory's, in the order --config-dir gives them.\n"
          "\n"
          "Values and errors:\n"
          "Numbers are decimal only ('0x10', 'inf' and 'nan' are errors). A UTF-8\n"
          "byte order mark and CRLF line ends are accepted. A file with an error\n"
          "is logged (file, line, reason) and changes nothing: a new tenant is not\n"
          "created, an existing one keeps its last good settings. Changes apply\n"
          "without a restart, once a file is complete (closed after writing, or\n"
          "renamed into place).\n"
          "\n"
          "Example:\n"
          "  # /etc/gpuslice/tenants.d/team-a.conf\n"
          "  share = 2\n"
          "  limit = 0.5\n"
          "  memory = 16G\n",
          f);
}

static bool parse_uint(const char *text, unsigned long long min, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (text[0] < '0' || text[0] > '9')
        return false;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* An absolute path for dir (or a file), relative to the current directory
 * if it is not; symlinks are left in place (the configuration directory may
 * be one that gets swapped). NULL if out of memory or the cwd is unknown. */
static const char *absolute(const char *dir)
{
    if (dir[0] == '/')
        return dir;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    size_t len = strlen(cwd) + 1 + strlen(dir) + 1;
    char *path = malloc(len);
    if (path)
        snprintf(path, len, "%s/%s", cwd, dir);
    return path;
}

/* Makes the configuration directories absolute and joins them into
 * options.config_dirs_text: 0, 1 if one is given twice, 2 if out of memory
 * or the cwd is unknown. */
static int config_dirs_absolute(void)
{
    size_t len = 1;
    for (unsigned i = 0; i < options.nconfig_dirs; i++) {
        options.config_dirs[i] = absolute(options.config_dirs[i]);
        if (!options.config_dirs[i])
            return 2;
        for (unsigned j = 0; j < i; j++)
            if (strcmp(options.config_dirs[i], options.config_dirs[j]) == 0) {
                fprintf(stderr, "gpuslice-server: --config-dir %s is given twice\n", options.config_dirs[i]);
                return 1;
            }
        len += strlen(options.config_dirs[i]) + 2;
    }
    char *text = malloc(len);
    if (!text)
        return 2;
    text[0] = '\0';
    for (unsigned i = 0; i < options.nconfig_dirs; i++) {
        if (i)
            strcat(text, ", ");
        strcat(text, options.config_dirs[i]);
    }
    options.config_dirs_text = text;
    return 0;
}

/* Every configuration directory must be there at start (no watch is
 * promised for one that is not); false, logged, if one is not. */
static bool config_dirs_exist(void)
{
    for (unsigned i = 0; i < options.nconfig_dirs; i++) {
        int conf = open(options.config_dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (conf < 0) {
            slog(LOG_ERR, "cannot read the configuration directory %s: %s (create it, or give --config-dir)",
                 options.config_dirs[i], strerror(errno));
            return false;
        }
        if (close(conf) != 0)
            slog(LOG_WARN, "close: %s", strerror(errno));
    }
    return true;
}

/* Raises the soft descriptor limit to the hard one. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        slog(LOG_WARN, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        options.nofile = 1024;
        return;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            slog(LOG_WARN, "cannot raise RLIMIT_NOFILE from %llu to %llu: %s", (unsigned long long)was,
                 (unsigned long long)rl.rlim_max, strerror(errno));
            rl.rlim_cur = was;
        }
    }
    options.nofile = rl.rlim_cur == RLIM_INFINITY ? ULONG_MAX : (unsigned long)rl.rlim_cur;
}

/* The signalfd and the once-a-second timer; owned by the loop's thread. */
static struct loop_watch signal_watch = {.fd = -1};
static struct timer housekeeping;

static void on_signal(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    struct signalfd_siginfo si;
    ssize_t n;
    while ((n = read(signal_watch.fd, &si, sizeof si)) == sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            slog(LOG_INFO, "SIGHUP: reloading %s", options.config_dirs_text);
            confwatch_reload();
        } else {
            slog(LOG_INFO, "signal %u: stopping", si.ssi_signo);
            loop_stop();
        }
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR)
        slog(LOG_ERR, "signalfd: %s", strerror(errno));
}

static void on_housekeeping(void *arg)
{
    (void)arg;
    clients_sweep();
    admin_sweep();
    devices_sweep();
    devices_check_ghosts();
    tenants_retry_listen();
    cdi_retry();
    confwatch_check();
    log_flush();
    status_shares_refresh(now_ns());
    timer_at(&housekeeping, now_ns() + 1000000000ull);
}

enum {
    OPT_MAX_CLIENTS = 256,
    OPT_MAX_CLIENTS_PER_TENANT,
    OPT_MAX_DEVICES,
    OPT_MAX_DEVICES_PER_TENANT,
    OPT_DEVICE_LINGER,
    OPT_CLIENT_BUFFER,
    OPT_CDI_DIR,
    OPT_SHIM,
    OPT_NVIDIA_DIR,
    OPT_NVIDIA_MAJOR,
    OPT_VERIFY_GPUS,
    OPT_ON_SERVER_DOWN,
    OPT_UNINSTALL,
    OPT_INSTALL_DIR,
    OPT_HOSTNAME,
    OPT_POD_LOG_DIR,
    OPT_PREEMPT_MS,
    OPT_HELP_TENANT_FILE,
};

/* --uninstall and its --install-dir; set from the command line. */
static bool uninstall;
static const char *install_dir;

/* Parses the command line into options; returns -1 to exit 0 (help,
 * version), 1 on a usage error, 0 to run. */
static int parse_options(int argc, char **argv)
{
    static const struct option long_options[] = {
        {"config-dir", required_argument, NULL, 'c'},
        {"run-dir", required_argument, NULL, 'r'},
        {"grace-ms", required_argument, NULL, 'g'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {"help-tenant-file", no_argument, NULL, OPT_HELP_TENANT_FILE},
        {"version", no_argument, NULL, 'V'},
        {"cdi-dir", required_argument, NULL, OPT_CDI_DIR},
        {"shim", required_argument, NULL, OPT_SHIM},
        {"max-clients", required_argument, NULL, OPT_MAX_CLIENTS},
        {"max-clients-per-tenant", required_argument, NULL, OPT_MAX_CLIENTS_PER_TENANT},
        {"max-devices", required_argument, NULL, OPT_MAX_DEVICES},
        {"max-devices-per-tenant", required_argument, NULL, OPT_MAX_DEVICES_PER_TENANT},
        {"device-linger-ms", required_argument, NULL, OPT_DEVICE_LINGER},
        {"client-buffer", required_argument, NULL, OPT_CLIENT_BUFFER},
        {"metrics", required_argument, NULL, 'm'},
        {"nvidia-dir", required_argument, NULL, OPT_NVIDIA_DIR},
        {"nvidia-major", required_argument, NULL, OPT_NVIDIA_MAJOR},
        {"verify-gpus", required_argument, NULL, OPT_VERIFY_GPUS},
        {"on-server-down", required_argument, NULL, OPT_ON_SERVER_DOWN},
        {"uninstall", no_argument, NULL, OPT_UNINSTALL},
        {"install-dir", required_argument, NULL, OPT_INSTALL_DIR},
        {"hostname", required_argument, NULL, OPT_HOSTNAME},
        {"pod-log-dir", required_argument, NULL, OPT_POD_LOG_DIR},
        {"preempt-ms", required_argument, NULL, OPT_PREEMPT_MS},
        {NULL, 0, NULL, 0},
    };
    int opt, index = 0;
    bool dirs_given = false; /* the first --config-dir replaces the default */
    while ((opt = getopt_long(argc, argv, "c:r:g:l:m:hV", long_options, &index)) != -1) {
        unsigned long long v = 0;
        const char *name = opt >= OPT_MAX_CLIENTS ? long_options[index].name : NULL;
        switch (opt) {
        case 'c':
            if (!dirs_given)
                options.nconfig_dirs = 0;
            dirs_given = true;
            if (options.nconfig_dirs == CONFIG_DIRS_MAX) {
                fprintf(stderr, "gpuslice-server: --config-dir may be given at most %d times\n", CONFIG_DIRS_MAX);
                return 1;
            }
            options.config_dirs[options.nconfig_dirs++] = optarg;
            break;
        case 'r': options.run_dir = optarg; break;
        case OPT_CDI_DIR: options.cdi_dir = optarg; break;
        case OPT_SHIM: options.shim_path = optarg; break;
        case 'm': options.metrics_addr = optarg; break;
        case OPT_NVIDIA_DIR: options.nvidia_dir = optarg; break;
        case OPT_NVIDIA_MAJOR:
            if (!parse_uint(optarg, 1, 4095, &v)) {
                fprintf(stderr, "gpuslice-server: --nvidia-major needs a device major number (1..4095), got '%s'\n",
                        optarg);
                return 1;
            }
            options.nvidia_major = (unsigned)v;
            break;
        case OPT_UNINSTALL: uninstall = true; break;
        case OPT_INSTALL_DIR: install_dir = optarg; break;
        case OPT_HOSTNAME: options.hostname = optarg; break;
        case OPT_POD_LOG_DIR: options.pod_log_dir = optarg; break;
        case OPT_VERIFY_GPUS:
            if (strcmp(optarg, "auto") == 0)
                options.verify_gpus = VERIFY_GPUS_AUTO;
            else if (strcmp(optarg, "on") == 0)
                options.verify_gpus = VERIFY_GPUS_ON;
            else if (strcmp(optarg, "off") == 0)
                options.verify_gpus = VERIFY_GPUS_OFF;
            else {
                fprintf(stderr, "gpuslice-server: --verify-gpus must be auto, on or off, got '%s'\n", optarg);
                return 1;
            }
            break;
        case OPT_ON_SERVER_DOWN:
            if (strcmp(optarg, "wait") != 0 && strcmp(optarg, "open") != 0) {
                fprintf(stderr, "gpuslice-server: --on-server-down must be wait or open, got '%s'\n", optarg);
                return 1;
            }
            options.on_server_down = optarg[0] == 'o' ? ON_DOWN_OPEN : ON_DOWN_WAIT;
            break;
        case OPT_PREEMPT_MS:
            if (!parse_uint(optarg, 1, PREEMPT_MS_MAX, &v)) {
                fprintf(stderr, "gpuslice-server: --preempt-ms needs milliseconds (1..%d), got '%s'\n", PREEMPT_MS_MAX,
                        optarg);
                return 1;
            }
            options.preempt_ns = v * 1000000ull;
            break;
        case 'g':
            if (!parse_uint(optarg, 0, 3600000, &v)) {
                fprintf(stderr, "gpuslice-server: --grace-ms needs milliseconds (0..3600000), got '%s'\n", optarg);
                return 1;
            }
            options.grace_ns = v * 1000000ull;
            break;
        case 'l':
            log_level = log_level_parse(optarg);
            if (log_level < 0) {
                fprintf(stderr, "gpuslice-server: --log-level must be error, warn, info or debug\n");
                return 1;
            }
            break;
        case 'h': usage(stdout); return -1;
        case OPT_HELP_TENANT_FILE: tenant_file_help(stdout); return -1;
        case 'V': printf("gpuslice-server %s (protocol %d)\n", GPUSLICE_VERSION, GS_PROTOCOL_VERSION); return -1;
        case OPT_MAX_CLIENTS:
        case OPT_MAX_CLIENTS_PER_TENANT:
        case OPT_MAX_DEVICES:
        case OPT_MAX_DEVICES_PER_TENANT:
            if (!parse_uint(optarg, 1, 1000000, &v)) {
                fprintf(stderr, "gpuslice-server: --%s needs a whole number from 1 to 1000000, got '%s'\n", name,
                        optarg);
                return 1;
            }
            *(opt == OPT_MAX_CLIENTS              ? &options.max_clients
              : opt == OPT_MAX_CLIENTS_PER_TENANT ? &options.max_clients_per_tenant
              : opt == OPT_MAX_DEVICES            ? &options.max_devices
                                                  : &options.max_devices_per_tenant) = (unsigned)v;
            break;
        case OPT_DEVICE_LINGER:
            if (!parse_uint(optarg, 0, 86400000, &v)) {
                fprintf(stderr, "gpuslice-server: --device-linger-ms needs milliseconds (0..86400000), got '%s'\n",
                        optarg);
                return 1;
            }
            options.device_linger_ns = v * 1000000ull;
            break;
        case OPT_CLIENT_BUFFER:
            if (!parse_uint(optarg, 4096, 64ull << 20, &v)) {
                fprintf(stderr, "gpuslice-server: --client-buffer needs bytes from 4096 to 67108864, got '%s'\n",
                        optarg);
                return 1;
            }
            options.client_buffer = (unsigned)v;
            break;
        default: fprintf(stderr, "see gpuslice-server --help\n"); return 1;
        }
    }
    struct sockaddr_storage addr;
    socklen_t addr_len;
    if (options.metrics_addr[0] && !metrics_parse_addr(options.metrics_addr, &addr, &addr_len)) {
        fprintf(stderr, "gpuslice-server: --metrics needs ADDR:PORT with a numeric address, got '%s'\n",
                options.metrics_addr);
        return 1;
    }
    if (install_dir && !uninstall) {
        fprintf(stderr, "gpuslice-server: --install-dir is for --uninstall\n");
        return 1;
    }
    if (optind != argc) {
        fprintf(stderr, "gpuslice-server: unexpected argument '%s'; see gpuslice-server --help\n", argv[optind]);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int parsed = parse_options(argc, argv);
    if (parsed)
        return parsed < 0 ? 0 : 1;
    int dirs = config_dirs_absolute();
    if (dirs == 1)
        return 1;
    options.run_dir = absolute(options.run_dir);
    /* The CDI spec names the shim and the run directory for runtimes that
     * run elsewhere: absolute paths too. */
    if (options.cdi_dir[0])
        options.cdi_dir = absolute(options.cdi_dir);
    options.shim_path = absolute(options.shim_path);
    if (dirs != 0 || !options.run_dir || !options.cdi_dir || !options.shim_path ||
        (install_dir && !(install_dir = absolute(install_dir)))) {
        slog(LOG_ERR, "cannot make the paths absolute: %s", strerror(errno));
        return 2;
    }
    if (uninstall)
        return uninstall_run(install_dir);
    if (!options.hostname)
        options.hostname = "";
    /* Nothing is created through a path a tenant controls, and modes are
     * given at creation: 0755 directories; sockets set their own. */
    umask(022);
    if (chdir("/") != 0) {
        slog(LOG_ERR, "chdir /: %s", strerror(errno));
        return 2;
    }
    raise_nofile();
    /* Deadlines on the wire are on the initial time namespace's clock
     * (gpuslice/transport.h); a server in another namespace converts. */
    options.clock_offset_ns = gs_transport_clock_offset_ns();
    if (options.clock_offset_ns)
        slog(LOG_INFO, "in a time namespace whose CLOCK_MONOTONIC is %+.3f s off the initial one's; "
                       "deadlines are converted", (double)options.clock_offset_ns / 1e9);

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) != 0 || signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
        slog(LOG_ERR, "signals: %s", strerror(errno));
        return 2;
    }
    sched_init(&server_sched, options.grace_ns);
    server_sched.preempt_ns = options.preempt_ns;
    if (!sched_actions_reserve(&server_sched, 0)) {
        slog(LOG_ERR, "out of memory");
        return 2;
    }
    if (loop_init() != 0) {
        slog(LOG_ERR, "epoll_create1: %s", strerror(errno));
        return 2;
    }
    signal_watch = (struct loop_watch){.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC), .fn = on_signal};
    if (signal_watch.fd < 0 || loop_add(&signal_watch, EPOLLIN) != 0) {
        slog(LOG_ERR, "signalfd: %s", strerror(errno));
        return 2;
    }
    if (accept_init() != 0 || rundir_open() != 0 || rundir_lock() != 0 || cdi_init() != 0)
        return 2;
    if (rundir_clients_marked()) {
        /* Processes of the last server may still run: they reconnect within
         * their backoff (at most a second) and declare what they hold. */
        server_sched.recovering_until = now_ns() + RECOVERY_NS;
        slog(LOG_INFO, "processes of the previous server may still run: memory leases wait %.1f s for them to "
                       "reconnect and declare what they hold", (double)RECOVERY_NS / 1e9);
    }
    if (!config_dirs_exist())
        return 2;
    confwatch_open();
    if (tenants_load() != 0 || admin_open() != 0 || metrics_open() != 0)
        return 2;
    /* The spec the last server left: brought up to date even when no
     * tenant came (then it goes). */
    cdi_update();
    timer_init(&housekeeping, on_housekeeping, NULL);
    timer_at(&housekeeping, now_ns() + 1000000000ull);
    slog(LOG_INFO, "serving %s (admin socket %s/admin.sock); limits: %lu connections (%u per tenant), %u GPUs "
                   "(%u per tenant), %lu descriptors",
         options.config_dirs_text, options.run_dir, accept_client_budget(), options.max_clients_per_tenant,
         options.max_devices, options.max_devices_per_tenant, options.nofile);
    if (gpu_access_checked(now_ns()))
        slog(LOG_INFO, "a GPU a process declares must be listed in %s/gpus, and the process must pass an open "
                       "descriptor of its device node", options.nvidia_dir);
    else
        slog(options.verify_gpus == VERIFY_GPUS_OFF ? LOG_INFO : LOG_WARN,
             "GPU UUIDs that processes declare are not checked (%s)",
             options.verify_gpus == VERIFY_GPUS_OFF ? "--verify-gpus off" : "no NVIDIA driver list of GPUs here");

    int rc = loop_run();
    /* Processes still connected reconnect to the next server. */
    rundir_mark_clients(nclients > 0);
    metrics_close();
    tenants_close_all();
    cdi_close();
    devices_free_all();
    admin_close();
    confwatch_close();
    rundir_close();
    return rc == 0 ? 0 : 2;
}
