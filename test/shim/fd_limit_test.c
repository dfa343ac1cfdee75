/*
 * shim fd limit test: a process at its RLIMIT_NOFILE when its first launch
 * starts the shim's gate thread. The gate thread needs two eventfds; with
 * room for one, starting fails, and must leave no descriptor behind (it
 * used to keep the first, then drop it at the next try: one lost per
 * failed start). Launches still run (GPUSLICE_ON_SERVER_DOWN=open, no
 * server), and once descriptors are free again the next call that needs
 * the gate thread starts it.
 */
#include <cuda.h>

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static int failures;

static void expect(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok)
        failures++;
}

/* Open descriptors, not counting the directory listing them. */
static int open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));)
        if (e->d_name[0] != '.')
            n++;
    closedir(dir);
    return n - 1;
}

/* Threads of this process named `name`. */
static int threads_named(const char *name)
{
    DIR *dir = opendir("/proc/self/task");
    if (!dir)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f))
            comm[strcspn(comm, "\n")] = 0;
        if (f)
            fclose(f);
        n += strcmp(comm, name) == 0;
    }
    closedir(dir);
    return n;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    if (cuInit(0) || cuDeviceGet(&dev, 0)) {
        printf("FAILED: cuInit\n");
        return 1;
    }
    struct rlimit saved;
    if (getrlimit(RLIMIT_NOFILE, &saved) != 0)
        return 1;
    /* Room for exactly one more descriptor: the lowest free one. */
    int lowest = dup(0);
    if (lowest < 0 || close(lowest) != 0)
        return 1;
    int before = open_fds();
    struct rlimit tight = saved;
    tight.rlim_cur = (rlim_t)lowest + 1;
    if (setrlimit(RLIMIT_NOFILE, &tight) != 0)
        return 1;
    /* The first use of a context starts the gate thread. */
    CUresult rc = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (rc == CUDA_SUCCESS)
        rc = cuCtxSetCurrent(ctx);
    if (rc == CUDA_SUCCESS)
        rc = cuModuleLoadData(&mod, "x");
    if (rc == CUDA_SUCCESS)
        rc = cuModuleGetFunction(&fn, mod, "k");
    for (int i = 0; i < 10 && rc == CUDA_SUCCESS; i++)
        rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    CUresult synced = cuCtxSynchronize();
    if (setrlimit(RLIMIT_NOFILE, &saved) != 0)
        return 1;
    int after = open_fds();
    char what[160];
    snprintf(what, sizeof what, "a context made and launches run at the descriptor limit (%d, %d)", (int)rc,
             (int)synced);
    expect(rc == CUDA_SUCCESS && synced == CUDA_SUCCESS, what);
    snprintf(what, sizeof what, "no gate thread could start (%d)", threads_named("gpuslice-gate"));
    expect(threads_named("gpuslice-gate") == 0, what);
    snprintf(what, sizeof what, "the failed start left no descriptor open (%d before, %d after)", before, after);
    expect(after == before, what);

    /* Descriptors free again: the next call that needs the gate thread
     * (here a device allocation, counted against the tenant's cap)
     * starts it. */
    CUdeviceptr ptr;
    rc = cuMemAlloc(&ptr, 1 << 20);
    snprintf(what, sizeof what, "then an allocation starts the gate thread (%d, %d thread)", (int)rc,
             threads_named("gpuslice-gate"));
    expect(rc == CUDA_SUCCESS && threads_named("gpuslice-gate") == 1, what);
    expect(cuMemFree(ptr) == CUDA_SUCCESS, "and the allocation is freed");
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
