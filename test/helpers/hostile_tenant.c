/*
 * hostile_tenant: a test helper that plays a tenant's processes over the
 * wire protocol (through the shared protocol code), as a tenant that does
 * not run the shim could: it holds slices and says what it likes about
 * them, or floods the server. Held time is measured here, by this
 * program's own clock: from each GRANT it reads to the RELEASE it sends.
 *
 *   hostile_tenant hold SOCKET SECONDS UUIDHEX[,UUIDHEX...] [--claim-idle] [--node PATH]
 *       one connection per UUID (the ranks of a job; two or more UUIDs
 *       make the tenant a gang), each declaring its GPU and asking for it
 *       again and again: it holds every grant until its deadline (or a
 *       REVOKE), then releases asking for more. --claim-idle: each RELEASE
 *       says the whole slice was left idle. --node PATH: each DEVICE
 *       passes a descriptor of PATH, opened for reading, as the proof of
 *       access the shim passes (none if it cannot be opened; without
 *       --node, none). Prints, per UUID in order,
 *       "held UUIDHEX: ms=HELD slices=N", then "wall: ms=W".
 *   hostile_tenant flood SOCKET CONNECTIONS SECONDS
 *       CONNECTIONS connections, each declaring its 16 slots again and
 *       again, as one GPU and then another, as fast as the server reads
 *       them, for SECONDS. Prints "sent N".
 *   hostile_tenant latency SOCKET UUIDHEX COUNT
 *       declares the GPU, then COUNT times: ACQUIRE, waits for the GRANT,
 *       RELEASE, 1 ms pause. Prints "latency_us: p50=.. p90=.. p99=..
 *       max=.. n=COUNT" (ACQUIRE sent to GRANT read), or "no-grant".
 *   hostile_tenant churn SOCKET UUIDHEX SECONDS
 *       declares the GPU, then as fast as it can: ACQUIRE, waits for the
 *       GRANT, RELEASE at once (nothing run). Prints "cycles N".
 *   hostile_tenant toggle SOCKET UUIDHEX OTHERHEX SECONDS
 *       names the GPU UUIDHEX and then OTHERHEX with its slot 0, back and
 *       forth as fast as the server reads it, never asking for a slice;
 *       reads what comes. Prints "flips N".
 *
 * Exit status 0, or 1 when the server closed a connection of `hold` or
 * `latency` (its ERROR is printed).
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
#include "gpuslice/transport.h"

#include <fcntl.h>

#define MAX_RANKS 8

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int connect_to(const char *path, int nonblocking)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        fprintf(stderr, "hostile_tenant: connect %s: %s\n", path, strerror(errno));
        exit(2);
    }
    return fd;
}

/* Sends one message; false if the server is gone or the socket is full. */
static int send_msg(int fd, const struct gs_msg *m)
{
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(m, buf, sizeof buf);
    return len && send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len;
}

/* 1 with msg filled, 0 if nothing came within ms, -1 if the server closed. */
static int recv_msg(int fd, struct gs_msg *msg, int ms)
{
    uint8_t buf[GS_MSG_MAX];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return 0;
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0 || gs_msg_decode(buf, (size_t)n, msg) != GS_DECODE_OK)
        return -1;
    if (msg->type == GS_MSG_ERROR) {
        printf("error %s\n", msg->u.error.reason);
        return -1;
    }
    return 1;
}

static int parse_uuid(const char *hex, uint8_t uuid[16])
{
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        uuid[i] = (uint8_t)v;
    }
    return 0;
}

static void hello(int fd)
{
    struct gs_msg m = {.type = GS_MSG_HELLO};
    m.u.hello.pid = (uint32_t)getpid();
    struct gs_msg answer;
    if (!send_msg(fd, &m) || recv_msg(fd, &answer, 5000) != 1 || answer.type != GS_MSG_WELCOME) {
        printf("no-welcome\n");
        exit(1);
    }
}

/* The file whose descriptor each DEVICE of `hold` passes (--node), or NULL. */
static const char *node_path;

static void declare(int fd, int slot, const uint8_t uuid[16])
{
    struct gs_msg m = {.type = GS_MSG_DEVICE};
    m.u.device.slot = (uint32_t)slot;
    memcpy(m.u.device.uuid, uuid, 16);
    int node = node_path ? open(node_path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) : -1;
    if (node_path && node < 0)
        fprintf(stderr, "hostile_tenant: %s: %s: declaring without it\n", node_path, strerror(errno));
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(&m, buf, sizeof buf);
    if (len && gs_transport_send_passing(fd, buf, len, node) != (ssize_t)len)
        fprintf(stderr, "hostile_tenant: DEVICE: %s\n", strerror(errno));
    if (node >= 0)
        close(node);
}

static void acquire(int fd)
{
    struct gs_msg m = {.type = GS_MSG_ACQUIRE};
    m.u.acquire.slot = 0;
    send_msg(fd, &m);
}

static void release(int fd, uint64_t grant, uint64_t idle_ns, int more)
{
    struct gs_msg m = {.type = GS_MSG_RELEASE};
    m.u.release.slot = 0;
    m.u.release.grant = grant;
    m.u.release.idle_ns = idle_ns;
    m.u.release.flags = more ? GS_RELEASE_MORE : 0;
    send_msg(fd, &m);
}

struct rank {
    int fd;
    char hex[33];
    uint64_t grant;          /* held, 0 = none */
    uint64_t deadline, since;
    uint64_t held_ns, slices;
};

static int hold(const char *path, double seconds, char *uuids, int claim_idle)
{
    struct rank ranks[MAX_RANKS];
    int n = 0;
    for (char *tok = strtok(uuids, ","); tok && n < MAX_RANKS; tok = strtok(NULL, ","), n++) {
        uint8_t uuid[16];
        if (strlen(tok) != 32 || parse_uuid(tok, uuid) != 0) {
            fprintf(stderr, "hostile_tenant: bad UUID %s\n", tok);
            return 2;
        }
        ranks[n] = (struct rank){.fd = connect_to(path, 0)};
        snprintf(ranks[n].hex, sizeof ranks[n].hex, "%s", tok);
        hello(ranks[n].fd);
        declare(ranks[n].fd, 0, uuid);
    }
    for (int i = 0; i < n; i++)
        acquire(ranks[i].fd);
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    int closed = 0;
    while (!closed && now_ns() < end) {
        struct pollfd p[MAX_RANKS];
        uint64_t now = now_ns(), next = end;
        for (int i = 0; i < n; i++) {
            p[i] = (struct pollfd){.fd = ranks[i].fd, .events = POLLIN};
            if (ranks[i].grant && ranks[i].deadline < next)
                next = ranks[i].deadline;
        }
        int wait_ms = next > now ? (int)((next - now) / 1000000 + 1) : 0;
        if (poll(p, (nfds_t)n, wait_ms) < 0 && errno != EINTR)
            return 2;
        now = now_ns();
        for (int i = 0; i < n; i++) {
            struct rank *r = &ranks[i];
            struct gs_msg m;
            if (p[i].revents) {
                int got = recv_msg(r->fd, &m, 0);
                if (got < 0) {
                    closed = 1;
                    break;
                }
                if (got == 1 && m.type == GS_MSG_GRANT) {
                    if (m.u.grant.grant != r->grant) {
                        r->grant = m.u.grant.grant;
                        r->since = now;
                        r->slices++;
                    }
                    r->deadline = m.u.grant.deadline_ns; /* an extension moves it */
                } else if (got == 1 && m.type == GS_MSG_REVOKE && m.u.grant.grant == r->grant) {
                    r->deadline = now;
                }
            }
            if (r->grant && now >= r->deadline) {
                uint64_t held = now - r->since;
                r->held_ns += held;
                release(r->fd, r->grant, claim_idle ? held : 0, 1);
                r->grant = 0;
            }
        }
    }
    uint64_t stop = now_ns();
    for (int i = 0; i < n; i++) {
        struct rank *r = &ranks[i];
        if (r->grant)
            r->held_ns += stop - r->since;
        printf("held %s: ms=%.1f slices=%llu\n", r->hex, (double)r->held_ns / 1e6, (unsigned long long)r->slices);
    }
    printf("wall: ms=%.1f\n", (double)(stop - start) / 1e6);
    return closed ? 1 : 0;
}

static int flood(const char *path, int connections, double seconds)
{
    int *fds = calloc((size_t)connections, sizeof *fds);
    if (!fds)
        return 2;
    for (int i = 0; i < connections; i++) {
        fds[i] = connect_to(path, 0);
        hello(fds[i]);
    }
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9), sent = 0, serial = 0;
    while (now_ns() < end) {
        int progress = 0;
        for (int i = 0; i < connections; i++) {
            if (fds[i] < 0)
                continue;
            /* two GPUs, every slot of every connection switching between
             * them: each device has thousands of users to forget one of */
            uint8_t uuid[16] = {0xf1, 0x00, 0xd0};
            serial++;
            uuid[15] = (uint8_t)(serial / GS_MAX_DEVICES % 2);
            struct gs_msg m = {.type = GS_MSG_DEVICE};
            m.u.device.slot = (uint32_t)(serial % GS_MAX_DEVICES);
            memcpy(m.u.device.uuid, uuid, 16);
            if (send_msg(fds[i], &m)) {
                sent++;
                progress = 1;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                close(fds[i]);
                fds[i] = -1;
            }
        }
        if (!progress)
            usleep(100);
    }
    printf("sent %llu\n", (unsigned long long)sent);
    return 0;
}

/* ACQUIRE, then reads until the GRANT (in m): 1, or 0 if none came within
 * 5 s, or -1 if the server closed the connection ("no-grant" or "closed"
 * printed). */
static int acquire_granted(int fd, struct gs_msg *m)
{
    acquire(fd);
    int got;
    while ((got = recv_msg(fd, m, 5000)) == 1 && m->type != GS_MSG_GRANT)
        ;
    if (got != 1)
        printf(got < 0 ? "closed\n" : "no-grant\n");
    return got;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int latency(const char *path, const char *hex, int count)
{
    uint8_t uuid[16];
    if (parse_uuid(hex, uuid) != 0 || count < 1)
        return 2;
    int fd = connect_to(path, 0);
    hello(fd);
    declare(fd, 0, uuid);
    uint64_t *took = calloc((size_t)count, sizeof *took);
    if (!took)
        return 2;
    for (int i = 0; i < count; i++) {
        uint64_t start = now_ns();
        struct gs_msg m;
        if (acquire_granted(fd, &m) != 1)
            return 1;
        took[i] = now_ns() - start;
        release(fd, m.u.grant.grant, 0, 0);
        usleep(1000);
    }
    qsort(took, (size_t)count, sizeof *took, by_value);
    size_t n = (size_t)count;
    printf("latency_us: p50=%.1f p90=%.1f p99=%.1f max=%.1f n=%d\n", (double)took[n / 2] / 1e3,
           (double)took[n * 9 / 10] / 1e3, (double)took[(n * 99 + 99) / 100 - 1] / 1e3, (double)took[n - 1] / 1e3,
           count);
    return 0;
}

static int churn(const char *path, const char *hex, double seconds)
{
    uint8_t uuid[16];
    if (parse_uuid(hex, uuid) != 0)
        return 2;
    int fd = connect_to(path, 0);
    hello(fd);
    declare(fd, 0, uuid);
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9), cycles = 0;
    while (now_ns() < end) {
        struct gs_msg m;
        if (acquire_granted(fd, &m) != 1)
            return 1;
        release(fd, m.u.grant.grant, 0, 0);
        cycles++;
    }
    printf("cycles %llu\n", (unsigned long long)cycles);
    return 0;
}

static int toggle(const char *path, const char *hex, const char *other_hex, double seconds)
{
    uint8_t uuid[2][16];
    if (parse_uuid(hex, uuid[0]) != 0 || parse_uuid(other_hex, uuid[1]) != 0)
        return 2;
    int fd = connect_to(path, 0);
    hello(fd);
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9), flips = 0;
    while (now_ns() < end) {
        declare(fd, 0, uuid[flips % 2]);
        flips++;
        struct gs_msg m;
        int got;
        while ((got = recv_msg(fd, &m, 0)) == 1)
            ;
        if (got < 0) {
            printf("closed\n");
            return 1;
        }
    }
    printf("flips %llu\n", (unsigned long long)flips);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 5 && strcmp(argv[1], "hold") == 0) {
        int claim_idle = 0;
        for (int i = 5; i < argc; i++) {
            if (strcmp(argv[i], "--claim-idle") == 0)
                claim_idle = 1;
            else if (strcmp(argv[i], "--node") == 0 && i + 1 < argc)
                node_path = argv[++i];
            else
                goto usage;
        }
        return hold(argv[2], atof(argv[3]), argv[4], claim_idle);
    }
    if (argc == 5 && strcmp(argv[1], "flood") == 0)
        return flood(argv[2], atoi(argv[3]), atof(argv[4]));
    if (argc == 5 && strcmp(argv[1], "latency") == 0)
        return latency(argv[2], argv[3], atoi(argv[4]));
    if (argc == 5 && strcmp(argv[1], "churn") == 0)
        return churn(argv[2], argv[3], atof(argv[4]));
    if (argc == 6 && strcmp(argv[1], "toggle") == 0)
        return toggle(argv[2], argv[3], argv[4], atof(argv[5]));
usage:
    fprintf(stderr, "usage: hostile_tenant hold SOCKET SECONDS UUIDHEX[,UUIDHEX...] [--claim-idle] [--node PATH]\n"
                    "       hostile_tenant flood SOCKET CONNECTIONS SECONDS\n"
                    "       hostile_tenant latency SOCKET UUIDHEX COUNT\n"
                    "       hostile_tenant churn SOCKET UUIDHEX SECONDS\n"
                    "       hostile_tenant toggle SOCKET UUIDHEX OTHERHEX SECONDS\n");
    return 2;
}
