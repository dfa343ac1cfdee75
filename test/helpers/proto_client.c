/*
 * proto_client: a test helper that talks to gpuslice-server directly,
 * through the shared protocol code, or sends it deliberately bad bytes.
 *
 *   proto_client SOCKET hello
 *       HELLO; prints "welcome TENANT" or "error REASON" or "closed".
 *   proto_client SOCKET steal UUIDHEX WAIT_MS
 *       declares the GPU, sends RELEASE for grant ids 1..2000 (slices it
 *       does not hold), then ACQUIRE; prints "granted MS" with the time the
 *       grant took, or "no-grant" after WAIT_MS.
 *   proto_client SOCKET bad KIND
 *       KIND: short, magic, version, type, length, field, oversized,
 *       unexpected, silent. Prints "closed" if the server dropped the
 *       connection (after an ERROR, printed as "error REASON"), else "open".
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice/protocol.h"

static int fd;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void send_msg(const struct gs_msg *m)
{
    static uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(m, buf, sizeof buf);
    if (len == 0 || send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len) {
        printf("closed\n");
        exit(0);
    }
}

/* Waits up to ms for a message: 1 with msg filled, 0 on timeout, -1 when
 * the server closed the connection. */
static int recv_msg(struct gs_msg *msg, int ms)
{
    static uint8_t buf[GS_MSG_MAX];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return 0;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
        return -1;
    return gs_msg_decode(buf, (size_t)n, msg) == GS_DECODE_OK ? 1 : -1;
}

static void hello(void)
{
    struct gs_msg m = {.type = GS_MSG_HELLO};
    m.u.hello.pid = (uint32_t)getpid();
    send_msg(&m);
}

/* Reports how the server treated us: an ERROR, then a close, or nothing. */
static int report_close(int wait_ms)
{
    struct gs_msg msg;
    double end = now_ms() + wait_ms;
    for (;;) {
        int r = recv_msg(&msg, (int)(end - now_ms()));
        if (r < 0) {
            printf("closed\n");
            return 0;
        }
        if (r == 0) {
            printf("open\n");
            return 0;
        }
        if (msg.type == GS_MSG_ERROR)
            printf("error %s\n", msg.u.error.reason);
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4); /* the test machine is little-endian like the protocol */
}

static int bad(const char *kind)
{
    uint8_t buf[GS_MSG_MAX + 64];
    struct gs_msg valid = {.type = GS_MSG_HELLO};
    size_t len = gs_msg_encode(&valid, buf, sizeof buf);
    if (strcmp(kind, "short") == 0) {
        len = 7;
    } else if (strcmp(kind, "magic") == 0) {
        put32(buf, 0xdeadbeef);
    } else if (strcmp(kind, "version") == 0) {
        buf[4] = GS_PROTOCOL_VERSION + 1;
    } else if (strcmp(kind, "type") == 0) {
        buf[6] = 99;
    } else if (strcmp(kind, "length") == 0) {
        put32(buf + 8, 3);
    } else if (strcmp(kind, "field") == 0) {
        hello();
        struct gs_msg m = {.type = GS_MSG_ACQUIRE};
        len = gs_msg_encode(&m, buf, sizeof buf);
        put32(buf + GS_HEADER_SIZE, 5000); /* slot out of range */
    } else if (strcmp(kind, "oversized") == 0) {
        len = sizeof buf;
        memset(buf + GS_HEADER_SIZE, 'x', len - GS_HEADER_SIZE);
        put32(buf + 8, (uint32_t)(len - GS_HEADER_SIZE));
    } else if (strcmp(kind, "unexpected") == 0) {
        hello();
        struct gs_msg m = {.type = GS_MSG_WELCOME};
        len = gs_msg_encode(&m, buf, sizeof buf);
    } else if (strcmp(kind, "silent") == 0) {
        return report_close(8000);
    } else {
        fprintf(stderr, "proto_client: unknown kind %s\n", kind);
        return 1;
    }
    if (send(fd, buf, len, MSG_NOSIGNAL) < 0) {
        printf("closed\n");
        return 0;
    }
    return report_close(2000);
}

static int steal(const char *hex, int wait_ms)
{
    struct gs_msg m = {.type = GS_MSG_DEVICE};
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 1;
        m.u.device.uuid[i] = (uint8_t)v;
    }
    hello();
    struct gs_msg reply;
    if (recv_msg(&reply, 2000) != 1 || reply.type != GS_MSG_WELCOME) {
        printf("closed\n");
        return 0;
    }
    send_msg(&m);
    for (uint64_t g = 1; g <= 2000; g++) {
        struct gs_msg r = {.type = GS_MSG_RELEASE};
        r.u.release.grant = g;
        send_msg(&r);
    }
    struct gs_msg a = {.type = GS_MSG_ACQUIRE};
    double start = now_ms();
    send_msg(&a);
    for (;;) {
        int left = (int)(start + wait_ms - now_ms());
        int r = recv_msg(&reply, left > 0 ? left : 0);
        if (r <= 0) {
            printf(r < 0 ? "closed\n" : "no-grant\n");
            return 0;
        }
        if (reply.type == GS_MSG_GRANT) {
            printf("granted %.1f\n", now_ms() - start);
            return 0;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: proto_client SOCKET hello|steal UUID MS|bad KIND\n");
        return 1;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", argv[1]);
    fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        printf("connect-failed %s\n", strerror(errno));
        return 0;
    }
    if (strcmp(argv[2], "hello") == 0) {
        hello();
        struct gs_msg reply;
        int r = recv_msg(&reply, 2000);
        if (r == 1 && reply.type == GS_MSG_WELCOME)
            printf("welcome %s\n", reply.u.welcome.tenant);
        else if (r == 1 && reply.type == GS_MSG_ERROR)
            printf("error %s\n", reply.u.error.reason);
        else
            printf("closed\n");
        return 0;
    }
    if (strcmp(argv[2], "steal") == 0 && argc == 5)
        return steal(argv[3], atoi(argv[4]));
    if (strcmp(argv[2], "bad") == 0 && argc == 4)
        return bad(argv[3]);
    fprintf(stderr, "proto_client: bad arguments\n");
    return 1;
}
