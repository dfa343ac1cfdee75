/*
 * gpuslicectl: the operator's view of a running gpuslice-server, over its
 * admin socket. The server renders the report; `status` asks and prints
 * it, `top` redraws it every second (top.c). "gpuslicectl cdi" prints,
 * without a server, the CDI spec the server would write for its
 * configuration directories, from the same code.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi_spec.h"
#include "ctl.h"
#include "gpuslice/protocol.h"
#include "server.h"

static void usage(FILE *f)
{
    fprintf(f,
"Usage: gpuslicectl [--run-dir DIR] status [--json]\n"
"   or: gpuslicectl [--config-dir DIR]... [--run-dir DIR] [--shim PATH] cdi\n"
"   or: gpuslicectl [--run-dir DIR] top [--once | -n N] [--interval S] [--json]\n"
"\n"
"status shows what gpuslice-server is doing: per GPU the tenant holding its\n"
"time slice and the tenants waiting; per tenant its share, limit, connected\n"
"processes and, per GPU, the share of device time it achieved over the\n"
"last 10 s, slices granted, time spent waiting and GPU time used; and\n"
"each tenant's processes with their host PID, container ID and pod UID.\n"
"\n"
"cdi prints the CDI spec that gpuslice-server --cdi-dir writes for the\n"
"tenants in the configuration directories (a dry run: no server needed).\n"
"Files with an error are reported on stderr and left out, as the server\n"
"does, and so are tenants whose name a CDI device cannot have (it must\n"
"begin with a letter or digit; the server serves them, without a device).\n"
"A name in two directories is the first directory's, as for the server.\n"
"\n"
"top shows the same live, redrawn every second: per GPU its holder, per\n"
"tenant and GPU a bar of the share achieved (#) against its target (|) and\n"
"limit (!), memory against its cap, wait time and processes. Keys: q quits,\n"
"s changes the order (name, achieved share, wait, memory). When standard\n"
"output is not a terminal it prints a plain frame every interval. The live\n"
"view needs ncurses: a gpuslicectl built without it says so and exits 2,\n"
"and --once, -n N and --json work as usual.\n"
"\n"
"Options:\n"
"  -r, --run-dir DIR  the server's run directory (default /run/gpuslice);\n"
"                     the admin socket is DIR/admin.sock\n"
"  -c, --config-dir DIR  tenant files, for cdi (default\n"
"                     /etc/gpuslice/tenants.d); up to 8 times, in the\n"
"                     order the server is given them\n"
"      --shim PATH    the host's libgpuslice.so, for cdi (default\n"
"                     " GPUSLICE_SHIM_DEFAULT ")\n"
"      --json         one JSON object instead of tables; its fields are\n"
"                     stable (new ones may be added). top --json prints\n"
"                     one object and exits, or N of them with -n N\n"
"      --once         top: print one plain frame and exit\n"
"  -n N               top: print N plain frames (N >= 1), then exit\n"
"      --interval S   top: seconds between frames, 0.1 to 3600 (default 1)\n"
"  -h, --help         show this help\n"
"  -V, --version      show the version\n"
"\n"
"Exit status: 0 on success, 1 on a usage error (an unknown command\n"
"included), 2 if the server cannot be reached, answers wrongly, or sends\n"
"an empty or incomplete status (then whatever arrived has been printed);\n"
"cdi: 2 if no tenant file is valid.\n");
}

/* path made absolute against the current directory, as gpuslice-server
 * makes its own, so that the dry run prints the same paths. */
static const char *absolute(const char *path, char *buf, size_t len)
{
    if (path[0] == '/')
        return path;
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    int n = snprintf(buf, len, "%s/%s", cwd, path);
    return n < 0 || (size_t)n >= len ? NULL : buf;
}

/* The tenants gpuslicectl cdi found so far, and the directory of each. */
struct cdi_names {
    char names[1024][GS_NAME_MAX];
    const char *list[1024];
    unsigned dir[1024];
    size_t count;
};

/* The directory index of name in found, or -1. */
static int cdi_found(const struct cdi_names *found, const char *name)
{
    for (size_t i = 0; i < found->count; i++)
        if (strcmp(found->names[i], name) == 0)
            return (int)found->dir[i];
    return -1;
}

/* Adds the valid tenant files of dirs[d] to found; -1 if it cannot be read. */
static int cdi_read_dir(const char *const *dirs, unsigned d, struct cdi_names *found)
{
    DIR *dir = opendir(dirs[d]);
    if (!dir) {
        fprintf(stderr, "gpuslicectl: cannot read %s: %s\n", dirs[d], strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(dir)) && found->count < 1024) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".conf") != 0 || e->d_name[0] == '.')
            continue;
        char name[256], path[4400], err[600];
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->d_name);
        snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
        struct tenant_config config;
        if (!config_valid_name(name)) {
            fprintf(stderr, "gpuslicectl: %s: '%s' is not a valid tenant name; left out\n", path, name);
            continue;
        }
        if (!cdi_valid_device_name(name)) {
            fprintf(stderr, "gpuslicectl: %s: tenant '%s' is not a valid CDI device name (it must start with a "
                            "letter or a digit); left out of the spec, as the server does\n", path, name);
            continue;
        }
        int first = cdi_found(found, name);
        if (first >= 0) {
            fprintf(stderr, "gpuslicectl: %s: ignored: tenant %s is configured by %s/%s (the first configuration "
                            "directory given wins)\n", path, name, dirs[first], e->d_name);
            continue;
        }
        /* The server's own reader: regular files only, never blocking. */
        if (config_read_file(dirfd(dir), e->d_name, path, &config, err, sizeof err) != 0) {
            fprintf(stderr, "gpuslicectl: %s; left out\n", err);
            continue;
        }
        memcpy(found->names[found->count], name, strlen(name) + 1); /* config_valid_name bounds it */
        found->list[found->count] = found->names[found->count];
        found->dir[found->count++] = d;
    }
    if (closedir(dir) != 0)
        fprintf(stderr, "gpuslicectl: closedir %s: %s\n", dirs[d], strerror(errno));
    return 0;
}

/* gpuslicectl cdi: the spec for every valid tenant file in the
 * directories, a name the first directory's that has it. */
static int print_cdi(const char *const *dirs, unsigned ndirs, const char *run_dir, const char *shim)
{
    static char run_abs[4096], shim_abs[4096];
    static struct cdi_names found;
    run_dir = absolute(run_dir, run_abs, sizeof run_abs);
    shim = absolute(shim, shim_abs, sizeof shim_abs);
    if (!run_dir || !shim) {
        fprintf(stderr, "gpuslicectl: cannot make the paths absolute: %s\n", strerror(errno));
        return 2;
    }
    for (unsigned d = 0; d < ndirs; d++)
        if (cdi_read_dir(dirs, d, &found) != 0)
            return 2;
    if (found.count == 0) {
        fprintf(stderr, "gpuslicectl: no valid tenant in %s%s: a CDI spec needs at least one device\n", dirs[0],
                ndirs > 1 ? " or the other directories" : "");
        return 2;
    }
    char *text = cdi_spec_render(found.list, found.count, run_dir, shim);
    if (!text) {
        fprintf(stderr, "gpuslicectl: out of memory\n");
        return 2;
    }
    fputs(text, stdout);
    free(text);
    return fflush(stdout) == 0 ? 0 : 2;
}

enum { OPT_JSON = 256, OPT_ONCE, OPT_INTERVAL };

static int status(const char *run_dir, bool json)
{
    char *text, err[512];
    size_t len;
    int rc = ctl_fetch_status(run_dir, json ? GS_STATUS_JSON : GS_STATUS_TABLE, &text, &len, err, sizeof err);
    if (text && fwrite(text, 1, len, stdout) != len) {
        snprintf(err, sizeof err, "writing the status failed");
        rc = 2;
    }
    free(text);
    if (fflush(stdout) != 0 && rc == 0) {
        snprintf(err, sizeof err, "writing the status failed");
        rc = 2;
    }
    if (rc)
        fprintf(stderr, "gpuslicectl: %s\n", err);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"run-dir", required_argument, NULL, 'r'}, {"json", no_argument, NULL, OPT_JSON},
        {"once", no_argument, NULL, OPT_ONCE},     {"interval", required_argument, NULL, OPT_INTERVAL},
        {"config-dir", required_argument, NULL, 'c'}, {"shim", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct top_options top = {.run_dir = "/run/gpuslice", .interval_s = 1.0};
    const char *config_dirs[CONFIG_DIRS_MAX] = {"/etc/gpuslice/tenants.d"}, *shim = GPUSLICE_SHIM_DEFAULT;
    unsigned nconfig_dirs = 0; /* none given: the default */
    int opt;
    char *end;
    while ((opt = getopt_long(argc, argv, "r:c:n:hV", options, NULL)) != -1) {
        switch (opt) {
        case 'r': top.run_dir = optarg; break;
        case 'c':
            if (nconfig_dirs == CONFIG_DIRS_MAX) {
                fprintf(stderr, "gpuslicectl: --config-dir may be given at most %d times\n", CONFIG_DIRS_MAX);
                return 1;
            }
            config_dirs[nconfig_dirs++] = optarg;
            break;
        case 'S': shim = optarg; break;
        case OPT_JSON: top.json = true; break;
        case OPT_ONCE: top.once = true; break;
        case 'n':
            top.iterations = strtol(optarg, &end, 10);
            if (*end || top.iterations < 1) {
                fprintf(stderr, "gpuslicectl: -n needs a whole number of frames, got '%s'\n", optarg);
                return 1;
            }
            break;
        case OPT_INTERVAL:
            top.interval_s = strtod(optarg, &end);
            if (*end || !(top.interval_s >= 0.1 && top.interval_s <= 3600)) {
                fprintf(stderr, "gpuslicectl: --interval needs seconds from 0.1 to 3600, got '%s'\n", optarg);
                return 1;
            }
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("gpuslicectl %s (protocol %d)\n", GPUSLICE_VERSION, GS_PROTOCOL_VERSION); return 0;
        default: fprintf(stderr, "see gpuslicectl --help\n"); return 1;
        }
    }
    if (optind == argc - 1 && strcmp(argv[optind], "cdi") == 0 && !top.json)
        return print_cdi(config_dirs, nconfig_dirs ? nconfig_dirs : 1, top.run_dir, shim);
    if (optind == argc - 1 && strcmp(argv[optind], "status") == 0)
        return status(top.run_dir, top.json);
    if (optind == argc - 1 && strcmp(argv[optind], "top") == 0)
        return top_main(&top);
    if (optind == argc)
        fprintf(stderr, "gpuslicectl: no command given (the commands are status, top and cdi)\n");
    else if (strcmp(argv[optind], "status") != 0 && strcmp(argv[optind], "top") != 0 &&
             strcmp(argv[optind], "cdi") != 0)
        fprintf(stderr, "gpuslicectl: unknown command '%s' (the commands are status, top and cdi)\n", argv[optind]);
    else if (optind < argc - 1)
        fprintf(stderr, "gpuslicectl: unexpected argument '%s' after %s\n", argv[optind + 1], argv[optind]);
    else
        fprintf(stderr, "gpuslicectl: cdi prints the spec as it is: --json does not apply\n");
    fprintf(stderr, "Run 'gpuslicectl --help' for how to use it.\n");
    return 1;
}
