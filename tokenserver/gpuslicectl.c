/*
 * gpuslicectl: the operator's view of a running gpuslice-server, over its
 * admin socket. The server renders the report; `status` asks and prints
 * it, `top` redraws it every second (top.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static void usage(FILE *f)
{
    fprintf(f,
"Usage: gpuslicectl [--run-dir DIR] status [--json]\n"
"       gpuslicectl [--run-dir DIR] top [--once | -n N] [--interval S] [--json]\n"
"\n"
"status shows what gpuslice-server is doing: per GPU the tenant holding its\n"
"time slice and the tenants waiting; per tenant its share, limit, connected\n"
"processes and, per GPU, the share of device time it achieved over the\n"
"last 10 s, slices granted, time spent waiting and GPU time used.\n"
"\n"
"top shows the same live, redrawn every second: per GPU its holder, per\n"
"tenant and GPU a bar of the share achieved (#) against its target (|) and\n"
"limit (!), memory against its cap, wait time and processes. Keys: q quits,\n"
"s changes the order (name, achieved share, wait, memory). When standard\n"
"output is not a terminal it prints a plain frame every interval.\n"
"\n"
"Options:\n"
"  -r, --run-dir DIR  the server's run directory (default /run/gpuslice);\n"
"                     the admin socket is DIR/admin.sock\n"
"      --json         one JSON object instead of tables; its fields are\n"
"                     stable (new ones may be added)\n"
"      --once         top: print one plain frame and exit\n"
"  -n N               top: print N plain frames, then exit\n"
"      --interval S   top: seconds between frames (default 1)\n"
"  -h, --help         show this help\n"
"\n"
"Exit status: 0 on success, 1 on a usage error, 2 if the server cannot be\n"
"reached, answers wrongly, or sends an empty or incomplete status (then\n"
"whatever arrived has been printed).\n");
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
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    struct top_options top = {.run_dir = "/run/gpuslice", .interval_s = 1.0};
    int opt;
    char *end;
    while ((opt = getopt_long(argc, argv, "r:n:h", options, NULL)) != -1) {
        switch (opt) {
        case 'r': top.run_dir = optarg; break;
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
        default: usage(stderr); return 1;
        }
    }
    if (optind == argc - 1 && strcmp(argv[optind], "status") == 0)
        return status(top.run_dir, top.json);
    if (optind == argc - 1 && strcmp(argv[optind], "top") == 0)
        return top_main(&top);
    usage(stderr);
    return 1;
}
