/*
 * gpuslicectl: the operator's view of a running gpuslice-server, over its
 * admin socket. The server renders the report; this tool only asks and
 * prints. "gpuslicectl cdi" prints, without a server, the CDI spec the
 * server would write for a configuration directory, from the same code.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cdi_spec.h"
#include "gpuslice/protocol.h"
#include "server.h"

static void usage(FILE *f)
{
    fprintf(f,
"Usage: gpuslicectl [--run-dir DIR] status [--json]\n"
"       gpuslicectl [--config-dir DIR] [--run-dir DIR] [--shim PATH] cdi\n"
"\n"
"Shows what gpuslice-server is doing: per GPU the tenant holding its time\n"
"slice and the tenants waiting; per tenant its share, limit, connected\n"
"processes and, per GPU, the share of device time it achieved over the\n"
"last 10 s, slices granted, time spent waiting and GPU time used; and\n"
"each tenant's processes with their host PID, container ID and pod UID.\n"
"\n"
"cdi prints the CDI spec that gpuslice-server --cdi-dir writes for the\n"
"tenants in the configuration directory (a dry run: no server needed).\n"
"Files with an error are reported on stderr and left out, as the server\n"
"does.\n"
"\n"
"Options:\n"
"  -r, --run-dir DIR  the server's run directory (default /run/gpuslice);\n"
"                     the admin socket is DIR/admin.sock\n"
"  -c, --config-dir DIR  tenant files, for cdi (default\n"
"                     /etc/gpuslice/tenants.d)\n"
"      --shim PATH    the host's libgpuslice.so, for cdi (default\n"
"                     " GPUSLICE_SHIM_DEFAULT ")\n"
"      --json         one JSON object instead of tables; its fields are\n"
"                     stable (new ones may be added)\n"
"  -h, --help         show this help\n"
"\n"
"Exit status: 0 on success, 1 on a usage error, 2 if the server cannot be\n"
"reached, answers wrongly, or sends an empty or incomplete status (then\n"
"whatever arrived has been printed); cdi: 2 if no tenant file is valid.\n");
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

/* gpuslicectl cdi: the spec for every valid tenant file in config_dir. */
static int print_cdi(const char *config_dir, const char *run_dir, const char *shim)
{
    static char run_abs[4096], shim_abs[4096];
    run_dir = absolute(run_dir, run_abs, sizeof run_abs);
    shim = absolute(shim, shim_abs, sizeof shim_abs);
    if (!run_dir || !shim) {
        fprintf(stderr, "gpuslicectl: cannot make the paths absolute: %s\n", strerror(errno));
        return 2;
    }
    DIR *dir = opendir(config_dir);
    if (!dir) {
        fprintf(stderr, "gpuslicectl: cannot read %s: %s\n", config_dir, strerror(errno));
        return 2;
    }
    static char names[1024][GS_NAME_MAX];
    const char *list[1024];
    size_t count = 0;
    struct dirent *e;
    while ((e = readdir(dir)) && count < 1024) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".conf") != 0 || e->d_name[0] == '.')
            continue;
        char name[256], path[4400], err[600];
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->d_name);
        snprintf(path, sizeof path, "%s/%s", config_dir, e->d_name);
        struct tenant_config config;
        if (!config_valid_name(name) || !cdi_valid_device_name(name)) {
            fprintf(stderr, "gpuslicectl: %s: '%s' is not a valid tenant name; left out\n", path, name);
            continue;
        }
        /* The server's own reader: regular files only, never blocking. */
        if (config_read_file(dirfd(dir), e->d_name, path, &config, err, sizeof err) != 0) {
            fprintf(stderr, "gpuslicectl: %s; left out\n", err);
            continue;
        }
        memcpy(names[count], name, strlen(name) + 1); /* config_valid_name bounds it */
        list[count] = names[count];
        count++;
    }
    closedir(dir);
    if (count == 0) {
        fprintf(stderr, "gpuslicectl: no valid tenant in %s: a CDI spec needs at least one device\n", config_dir);
        return 2;
    }
    char *text = cdi_spec_render(list, count, run_dir, shim);
    if (!text) {
        fprintf(stderr, "gpuslicectl: out of memory\n");
        return 2;
    }
    fputs(text, stdout);
    free(text);
    return fflush(stdout) == 0 ? 0 : 2;
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"run-dir", required_argument, NULL, 'r'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {"config-dir", required_argument, NULL, 'c'},
        {"shim", required_argument, NULL, 'S'},    {NULL, 0, NULL, 0},
    };
    const char *run_dir = "/run/gpuslice", *config_dir = "/etc/gpuslice/tenants.d";
    const char *shim = GPUSLICE_SHIM_DEFAULT;
    int json = 0, opt;
    while ((opt = getopt_long(argc, argv, "r:c:h", options, NULL)) != -1) {
        switch (opt) {
        case 'r': run_dir = optarg; break;
        case 'c': config_dir = optarg; break;
        case 'S': shim = optarg; break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind == argc - 1 && strcmp(argv[optind], "cdi") == 0 && !json)
        return print_cdi(config_dir, run_dir, shim);
    if (optind != argc - 1 || strcmp(argv[optind], "status") != 0) {
        usage(stderr);
        return 1;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int n = snprintf(addr.sun_path, sizeof addr.sun_path, "%s/admin.sock", run_dir);
    if (n < 0 || (size_t)n >= sizeof addr.sun_path) {
        fprintf(stderr, "gpuslicectl: %s/admin.sock: path too long\n", run_dir);
        return 2;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        fprintf(stderr, "gpuslicectl: cannot reach gpuslice-server at %s: %s\n", addr.sun_path, strerror(errno));
        return 2;
    }
    struct timeval tv = {5, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        fprintf(stderr, "gpuslicectl: setsockopt: %s\n", strerror(errno));
        return 2;
    }
    struct gs_msg request = {.type = GS_MSG_STATUS_REQUEST};
    request.u.status.format = json ? GS_STATUS_JSON : GS_STATUS_TABLE;
    static uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(&request, buf, sizeof buf);
    if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
        fprintf(stderr, "gpuslicectl: send: %s\n", strerror(errno));
        return 2;
    }
    /* The report comes in pieces; an empty one ends it. */
    unsigned long long total = 0;
    for (;;) {
        ssize_t got = recv(fd, buf, sizeof buf, MSG_TRUNC);
        if (got <= 0) {
            fprintf(stderr, "gpuslicectl: %s%s%s\n",
                    total ? "the status ended early: the server closed the connection" : "no answer from the server",
                    got < 0 ? ": " : "", got < 0 ? strerror(errno) : "");
            return 2;
        }
        struct gs_msg reply;
        enum gs_decode_result r = (size_t)got > sizeof buf ? GS_DECODE_BAD_LENGTH : gs_msg_decode(buf, (size_t)got, &reply);
        if (r != GS_DECODE_OK || reply.type != GS_MSG_STATUS_REPLY) {
            fprintf(stderr, "gpuslicectl: bad answer from the server: %s\n",
                    r != GS_DECODE_OK ? gs_decode_result_str(r) : gs_msg_type_str(reply.type));
            return 2;
        }
        if (reply.text_len == 0)
            break;
        if (fwrite(reply.text, 1, reply.text_len, stdout) != reply.text_len) {
            fprintf(stderr, "gpuslicectl: writing the status: %s\n", strerror(errno));
            return 2;
        }
        total += reply.text_len;
    }
    if (total == 0) {
        fprintf(stderr, "gpuslicectl: the server sent an empty status\n");
        return 2;
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "gpuslicectl: writing the status: %s\n", strerror(errno));
        return 2;
    }
    if (close(fd) != 0) {
        fprintf(stderr, "gpuslicectl: close: %s\n", strerror(errno));
        return 2;
    }
    return 0;
}
