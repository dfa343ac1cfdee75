/*
 * fakecuda process identity across PID namespaces: two processes that
 * each run as pid 1 of their own namespace (unshare --pid) share one state
 * file, each with its own meter slot and memory; killing one returns its
 * memory. Needs unshare(1) and the right to create PID namespaces;
 * otherwise it says why and exits 77 (skipped).
 *
 * Usage: fakecuda_pidns_test FAKECUDA_STAT
 *        fakecuda_pidns_test --helper MIB     (run inside the namespace)
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define HELPER_KERNEL_NS (30ull * 1000 * 1000)

/* Inside the namespace: allocate MIB, run one 30 ms kernel, report, and
 * hold everything until stdin closes. */
static int helper(unsigned mib)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction spin;
    CUdeviceptr p;
    uint64_t ns = HELPER_KERNEL_NS;
    void *params[] = {&ns};
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuMemAlloc_v2(&p, (size_t)mib << 20) || cuModuleLoadData(&mod, "x") ||
        cuModuleGetFunction(&spin, mod, "spin") ||
        cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) || cuCtxSynchronize())
        return 2;
    printf("ready pid=%d\n", (int)getpid());
    fflush(stdout);
    char buf[16];
    while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
    }
    return 0;
}

struct helper_proc {
    pid_t unshare_pid; /* in our namespace */
    int to_child, from_child;
    int ns_pid;        /* what the helper sees as its own pid */
};

static bool start_helper(const char *self, unsigned mib, struct helper_proc *h)
{
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
        return false;
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        char arg[16];
        snprintf(arg, sizeof arg, "%u", mib);
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        close(in[1]);
        close(out[0]);
        execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", "--kill-child", self, "--helper",
               arg, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    h->unshare_pid = pid;
    h->to_child = in[1];
    h->from_child = out[0];
    char line[128] = {0};
    size_t len = 0;
    while (len < sizeof line - 1) {
        ssize_t n = read(h->from_child, line + len, 1);
        if (n <= 0 || line[len] == '\n')
            break;
        len++;
    }
    return sscanf(line, "ready pid=%d", &h->ns_pid) == 1;
}

/* The helper's pid in our namespace: the child of its unshare process. */
static pid_t namespace_init(pid_t unshare_pid)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)unshare_pid, (int)unshare_pid);
    FILE *f = fopen(path, "r");
    int child = -1;
    if (f) {
        if (fscanf(f, "%d", &child) != 1)
            child = -1;
        fclose(f);
    }
    return child;
}

struct meter_line {
    int pid;
    unsigned long long busy_ns, kernels, mem_used;
    int alive;
    char id[40];
};

/* Reads fakecuda-stat's per-process lines for device 0 and the device's
 * memory in use. */
static int read_meter(const char *stat, const char *state, struct meter_line *lines, int max,
                      unsigned long long *device_mem)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "%s %s", stat, state);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        struct meter_line m;
        unsigned long long used;
        double share;
        unsigned long long copy_busy, copies, peak;
        if (sscanf(line, "device=0 uuid=%*s busy_ns=%*u kernels=%*u mem_used=%llu", &used) == 1)
            *device_mem = used;
        else if (n < max &&
                 sscanf(line, "pid=%d device=0 busy_ns=%llu kernels=%llu mem_used=%llu mem_peak=%llu "
                        "share=%lf alive=%d copy_busy_ns=%llu copies=%llu id=%39s",
                        &m.pid, &m.busy_ns, &m.kernels, &m.mem_used, &peak, &share, &m.alive, &copy_busy,
                        &copies, m.id) == 10)
            lines[n++] = m;
    }
    pclose(f);
    return n;
}

static int can_unshare(char *why, size_t len)
{
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, STDOUT_FILENO);
            dup2(devnull, STDERR_FILENO);
        }
        execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", "true", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        snprintf(why, len, "cannot run unshare: %s", strerror(errno));
        return 0;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, len, "unshare --pid --fork --mount-proc is not permitted here (status %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--helper") == 0)
        return helper((unsigned)atoi(argv[2]));
    if (argc != 2) {
        fprintf(stderr, "usage: %s FAKECUDA_STAT\n", argv[0]);
        return 2;
    }
    char why[256];
    if (!can_unshare(why, sizeof why)) {
        printf("skipped: %s\n", why);
        return 77;
    }
    char state[] = "/tmp/fakecuda-pidns-XXXXXX";
    int fd = mkstemp(state);
    if (fd < 0)
        return 2;
    close(fd);
    unlink(state);
    setenv("FAKECUDA_STATE", state, 1);
    setenv("FAKECUDA_MEMORY", "1G", 1);
    setenv("FAKECUDA_DEVICES", "1", 1);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 2;
    self[n] = '\0';

    struct helper_proc a, b;
    EXPECT(start_helper(self, 100, &a));
    EXPECT(start_helper(self, 300, &b));
    EXPECT(a.ns_pid == 1 && b.ns_pid == 1);

    struct meter_line lines[8];
    unsigned long long device_mem = 0;
    int count = read_meter(argv[1], state, lines, 8, &device_mem);
    EXPECT(count == 2);
    EXPECT(device_mem == 400ull << 20);
    if (count == 2) {
        EXPECT(lines[0].pid == 1 && lines[1].pid == 1);
        EXPECT(strcmp(lines[0].id, lines[1].id) != 0);
        unsigned long long mem = lines[0].mem_used + lines[1].mem_used;
        EXPECT(mem == 400ull << 20);
        EXPECT(lines[0].mem_used != lines[1].mem_used);
        for (int i = 0; i < 2; i++) {
            EXPECT(lines[i].alive == 1 && lines[i].kernels == 1);
            EXPECT(lines[i].busy_ns >= HELPER_KERNEL_NS && lines[i].busy_ns < 3 * HELPER_KERNEL_NS);
        }
    }

    /* This process, in the root namespace, sees the two and its own. */
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr mine;
    size_t free_b = 0, total_b = 0;
    EXPECT(cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
           cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
    EXPECT(cuMemAlloc_v2(&mine, 64ull << 20) == CUDA_SUCCESS);
    EXPECT(cuMemGetInfo_v2(&free_b, &total_b) == CUDA_SUCCESS);
    EXPECT(total_b - free_b == (464ull << 20));

    /* Killing the first helper returns its 100 MiB, not the other's. */
    pid_t victim = namespace_init(a.unshare_pid);
    EXPECT(victim > 0);
    if (victim > 0)
        kill(victim, SIGKILL);
    int status;
    waitpid(a.unshare_pid, &status, 0);
    EXPECT(cuMemGetInfo_v2(&free_b, &total_b) == CUDA_SUCCESS);
    EXPECT(total_b - free_b == (364ull << 20));
    count = read_meter(argv[1], state, lines, 8, &device_mem);
    int alive = 0;
    for (int i = 0; i < count; i++)
        alive += lines[i].alive && lines[i].pid == 1;
    EXPECT(alive == 1);
    EXPECT(device_mem == 364ull << 20);

    /* The second exits normally: only this process's memory is left. */
    close(b.to_child);
    waitpid(b.unshare_pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(cuMemGetInfo_v2(&free_b, &total_b) == CUDA_SUCCESS);
    EXPECT(total_b - free_b == (64ull << 20));
    close(a.to_child);
    unlink(state);
    return check_finish();
}
