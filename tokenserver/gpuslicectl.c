/*
 * gpuslicectl: the operator's view of a running gpuslice-server, over its
 * admin socket. The server renders the report; this tool only asks and
 * prints.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gpuslice/protocol.h"

static void usage(FILE *f)
{
    fprintf(f,
"Usage: gpuslicectl [--run-dir DIR] status [--json]\n"
"\n"
"Shows what gpuslice-server is doing: per GPU the tenant holding its time\n"
"slice and the tenants waiting; per tenant its share, limit, connected\n"
"processes and, per GPU, the share of device time it achieved over the\n"
"last 10 s, slices granted, time spent waiting and GPU time used.\n"
"\n"
"Options:\n"
"  -r, --run-dir DIR  the server's run directory (default /run/gpuslice);\n"
"                     the admin socket is DIR/admin.sock\n"
"      --json         one JSON object instead of tables; its fields are\n"
"                     stable (new ones may be added)\n"
"  -h, --help         show this help\n"
"\n"
"Exit status: 0 on success, 1 on a usage error, 2 if the server cannot be\n"
"reached, answers wrongly, or sends an empty or incomplete status (then\n"
"whatever arrived has been printed).\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"run-dir", required_argument, NULL, 'r'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *run_dir = "/run/gpuslice";
    int json = 0, opt;
    while ((opt = getopt_long(argc, argv, "r:h", options, NULL)) != -1) {
        switch (opt) {
        case 'r': run_dir = optarg; break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
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
