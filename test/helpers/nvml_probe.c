/*
 * nvml_probe: an NVML client linked against libnvidia-ml.so.1 (the linked
 * path: under libgpuslice.so its calls bind to the shim's exports), and a
 * bare protocol client that asks the server for USAGE directly.
 *
 *   nvml_probe report
 *       GPU 0: "total=B used=B free=B gpu=P pids=P1,P2 rc=R" (memory v1,
 *       utilization, compute processes v3; rc: the first error, 0 if none)
 *   nvml_probe bench N
 *       N nvmlDeviceGetMemoryInfo calls on GPU 0: "median_ns=T"
 *   nvml_probe flood SECONDS RATE
 *       nvmlDeviceGetMemoryInfo RATE times a second, paced, for SECONDS:
 *       "queries=N errors=E"
 *   nvml_probe raw SOCKET UUIDHEX COUNT RATE
 *       connects to a tenant's socket, says HELLO, and sends COUNT
 *       USAGE_QUERY about the GPU UUIDHEX (32 hex digits) at RATE a second,
 *       reading every answer: "ok=N limited=M other=K pids=P1,P2 used=B"
 *       (pids and used from the last OK answer)
 *
 * The NVML types are written out from NVIDIA's NVML API Reference.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpuslice/protocol.h"

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *util);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_t *infos);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static nvmlDevice_t gpu0(void)
{
    nvmlDevice_t dev = NULL;
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc == 0)
        rc = nvmlDeviceGetHandleByIndex_v2(0, &dev);
    if (rc != 0) {
        printf("rc=%d\n", rc);
        exit(1);
    }
    return dev;
}

static int report(void)
{
    nvmlDevice_t dev = gpu0();
    nvmlMemory_t m = {0};
    nvmlUtilization_t u = {0};
    nvmlProcessInfo_t procs[64];
    unsigned int n = 64;
    nvmlReturn_t rc = nvmlDeviceGetMemoryInfo(dev, &m), rc2 = nvmlDeviceGetUtilizationRates(dev, &u),
                 rc3 = nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, procs);
    printf("total=%llu used=%llu free=%llu gpu=%u pids=", m.total, m.used, m.free, u.gpu);
    for (unsigned int i = 0; rc3 == 0 && i < n; i++)
        printf("%s%u", i ? "," : "", procs[i].pid);
    printf(" rc=%d\n", rc ? rc : rc2 ? rc2 : rc3);
    return 0;
}

static int bench(long count)
{
    nvmlDevice_t dev = gpu0();
    uint64_t *t = calloc((size_t)count, sizeof *t);
    if (!t)
        return 1;
    nvmlMemory_t m;
    for (long i = 0; i < count; i++) {
        uint64_t start = now_ns();
        nvmlDeviceGetMemoryInfo(dev, &m);
        t[i] = now_ns() - start;
    }
    qsort(t, (size_t)count, sizeof *t, cmp_u64);
    printf("median_ns=%llu\n", (unsigned long long)t[count / 2]);
    free(t);
    return 0;
}

static int flood(double seconds, double rate)
{
    nvmlDevice_t dev = gpu0();
    nvmlMemory_t m;
    uint64_t start = now_ns(), step = (uint64_t)(1e9 / rate), end = start + (uint64_t)(seconds * 1e9);
    long queries = 0, errors = 0;
    for (uint64_t next = start; next < end; next += step) {
        sleep_until(next);
        if (nvmlDeviceGetMemoryInfo(dev, &m) != 0)
            errors++;
        queries++;
    }
    printf("queries=%ld errors=%ld\n", queries, errors);
    return 0;
}

static int send_msg(int fd, const struct gs_msg *m)
{
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(m, buf, sizeof buf);
    return len && send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static int recv_msg(int fd, struct gs_msg *m)
{
    static uint8_t buf[GS_MSG_MAX];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n > 0 && gs_msg_decode(buf, (size_t)n, m) == GS_DECODE_OK ? 0 : -1;
}

static int raw(const char *path, const char *hex, long count, double rate)
{
    uint8_t uuid[16];
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (strlen(hex) != 32 || sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 2;
        uuid[i] = (uint8_t)v;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        printf("closed\n");
        return 1;
    }
    struct gs_msg m = {.type = GS_MSG_HELLO};
    m.u.hello.pid = (uint32_t)getpid();
    if (send_msg(fd, &m) != 0 || recv_msg(fd, &m) != 0 || m.type != GS_MSG_WELCOME) {
        printf("closed\n");
        return 1;
    }
    long ok = 0, limited = 0, other = 0;
    struct gs_msg_usage last = {0};
    uint64_t step = (uint64_t)(1e9 / rate), next = now_ns();
    for (long i = 0; i < count; i++, next += step) {
        sleep_until(next);
        struct gs_msg q = {.type = GS_MSG_USAGE_QUERY};
        q.u.usage_query.id = (uint64_t)i + 1;
        memcpy(q.u.usage_query.uuid, uuid, 16);
        if (send_msg(fd, &q) != 0 || recv_msg(fd, &m) != 0) {
            other++;
            break;
        }
        if (m.type != GS_MSG_USAGE)
            other++;
        else if (m.u.usage.status == GS_USAGE_LIMITED)
            limited++;
        else {
            ok++;
            last = m.u.usage;
        }
    }
    printf("ok=%ld limited=%ld other=%ld pids=", ok, limited, other);
    for (uint32_t i = 0; i < last.nprocs; i++)
        printf("%s%u", i ? "," : "", last.procs[i].pid);
    printf(" used=%llu\n", (unsigned long long)last.used);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "report") == 0)
        return report();
    if (argc == 3 && strcmp(argv[1], "bench") == 0)
        return bench(atol(argv[2]));
    if (argc == 4 && strcmp(argv[1], "flood") == 0)
        return flood(atof(argv[2]), atof(argv[3]));
    if (argc == 6 && strcmp(argv[1], "raw") == 0)
        return raw(argv[2], argv[3], atol(argv[4]), atof(argv[5]));
    fprintf(stderr, "usage: nvml_probe report | bench N | flood SECONDS RATE | raw SOCKET UUIDHEX COUNT RATE\n");
    return 2;
}
