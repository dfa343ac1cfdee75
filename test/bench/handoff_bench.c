/*
 * handoff_bench: how long a blocked launch waits after the slice it waits
 * for is released. Two roles, run as two processes by server_bench.py:
 *
 *   handoff_bench holder SOCKET ROUNDS
 *       a bare protocol client of tenant A: takes the slice, holds it 20 ms,
 *       prints "released T" (CLOCK_MONOTONIC ns) and releases; repeats.
 *   handoff_bench launcher ROUNDS
 *       a CUDA process of tenant B (libgpuslice.so preloaded): launches a
 *       kernel, prints "returned T BLOCKED_NS" when the launch returns,
 *       then idles 9 ms so that its own slice is released; repeats.
 *
 * Pairing each blocked launch with the release just before it gives the
 * handoff: release -> blocked launch returns. Neither role writes its
 * output while a handoff may be under way (see main).
 *
 *   handoff_bench floor ROUNDS
 *       the same path with nothing on it, for scale: a process that slept
 *       20 ms sends a message to a second, asleep in recv, which passes it
 *       to a third, asleep in recv (holder -> server -> launcher); prints
 *       "floor MEDIAN_NS" of the first's send to the third's receipt.
 */
#include <cuda.h>

#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice/protocol.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static int fd;

static int send_msg(const struct gs_msg *m)
{
    uint8_t buf[256];
    size_t len = gs_msg_encode(m, buf, sizeof buf);
    return len && send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static int recv_msg(struct gs_msg *m)
{
    static uint8_t buf[GS_MSG_MAX];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n > 0 && gs_msg_decode(buf, (size_t)n, m) == GS_DECODE_OK ? 0 : -1;
}

static int holder(const char *path, int rounds)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        return 2;
    struct gs_msg m = {.type = GS_MSG_HELLO}, r;
    m.u.hello.pid = (uint32_t)getpid();
    if (send_msg(&m) || recv_msg(&r) || r.type != GS_MSG_WELCOME)
        return 2;
    /* the simulated device's UUID, as the launcher's shim declares it */
    CUdevice dev;
    CUuuid uuid;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDeviceGetUuid(&uuid, dev))
        return 2;
    m = (struct gs_msg){.type = GS_MSG_DEVICE};
    memcpy(m.u.device.uuid, uuid.bytes, 16);
    if (send_msg(&m))
        return 2;
    for (int i = 0; i < rounds; i++) {
        m = (struct gs_msg){.type = GS_MSG_ACQUIRE};
        if (send_msg(&m))
            return 2;
        do {
            if (recv_msg(&r))
                return 2;
        } while (r.type != GS_MSG_GRANT);
        sleep_ms(20);
        uint64_t t = now_ns();
        m = (struct gs_msg){.type = GS_MSG_RELEASE};
        m.u.grant.grant = r.u.grant.grant;
        if (send_msg(&m))
            return 2;
        printf("released %llu\n", (unsigned long long)t);
        sleep_ms(5);
    }
    return 0;
}

static int launcher(int rounds)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuModuleLoadData(&mod, "x") || cuModuleGetFunction(&fn, mod, "k"))
        return 2;
    for (int i = 0; i < rounds; i++) {
        uint64_t t0 = now_ns();
        if (cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL))
            return 2;
        uint64_t t1 = now_ns();
        printf("returned %llu %llu\n", (unsigned long long)t1, (unsigned long long)(t1 - t0));
        cuCtxSynchronize();
        sleep_ms(9);
        if (i % 8 == 7)
            fflush(stdout); /* just before a launch that waits a slice for its grant */
    }
    return 0;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int floor_bench(int rounds)
{
    int to_relay[2], to_last[2], back[2];
    if (rounds <= 0 || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, to_relay) ||
        socketpair(AF_UNIX, SOCK_SEQPACKET, 0, to_last) || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, back))
        return 2;
    uint64_t t;
    pid_t relay = fork();
    if (relay == 0) {
        while (recv(to_relay[1], &t, sizeof t, 0) == sizeof t && send(to_last[0], &t, sizeof t, 0) == sizeof t)
            ;
        _exit(0);
    }
    pid_t last = fork();
    if (last == 0) {
        while (recv(to_last[1], &t, sizeof t, 0) == sizeof t) {
            uint64_t took = now_ns() - t;
            if (send(back[1], &took, sizeof took, 0) != sizeof took)
                break;
        }
        _exit(0);
    }
    if (relay < 0 || last < 0)
        return 2;
    uint64_t *took = calloc((size_t)rounds, sizeof *took);
    int n = 0;
    for (; took && n < rounds; n++) {
        sleep_ms(20);
        t = now_ns();
        if (send(to_relay[0], &t, sizeof t, 0) != sizeof t || recv(back[0], &took[n], sizeof took[n], 0) != sizeof took[n])
            break;
        sleep_ms(5);
    }
    kill(relay, SIGKILL);
    kill(last, SIGKILL);
    waitpid(relay, NULL, 0);
    waitpid(last, NULL, 0);
    if (n < rounds) {
        free(took);
        return 2;
    }
    qsort(took, (size_t)n, sizeof *took, compare_u64);
    printf("floor %llu\n", (unsigned long long)took[n / 2]);
    free(took);
    return 0;
}

int main(int argc, char **argv)
{
    /* Output is buffered: a line written to the pipe wakes its reader,
     * whose run on a small machine would delay the handoff being
     * measured. The holder writes all at exit; the launcher every 8
     * rounds, while it waits for its grant (and is then killed). */
    static char outbuf[1 << 20];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    if (argc == 4 && strcmp(argv[1], "holder") == 0)
        return holder(argv[2], atoi(argv[3]));
    if (argc == 3 && strcmp(argv[1], "launcher") == 0)
        return launcher(atoi(argv[2]));
    if (argc == 3 && strcmp(argv[1], "floor") == 0)
        return floor_bench(atoi(argv[2]));
    fprintf(stderr, "usage: handoff_bench holder SOCKET ROUNDS | launcher ROUNDS | floor ROUNDS\n");
    return 1;
}
