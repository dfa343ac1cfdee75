/*
 * fork_storm: forks again and again while other threads allocate, launch
 * and capture, as a PyTorch DataLoader forks its workers from a process
 * whose other threads use the GPU. Each child runs ordinary code (malloc,
 * stdio, symbols resolved through dlsym, which the shim overrides) and
 * exits as a DataLoader worker does, with _exit (a leak checker in the
 * child would report what its parent's other threads, absent there, were
 * building); the parent waits for it, at most 10 s, and stops forking after
 * three children that hung. Then one child execs a CUDA
 * program (PROGRAM ARGS...), which must run with the shim as usual.
 *
 *   fork_storm FORKS PROGRAM [ARGS...]
 *
 * Prints "fork_storm: forks=N hung=H crashed=C exec_rc=R allocs=A
 * launches=L captures=P" and exits 0 when every call of the threads that
 * must succeed did.
 */
#include <cuda.h>

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static CUcontext primary;
static CUfunction spin_fn, empty_fn;
static _Atomic int stop;
static _Atomic long allocs, launches, captures;

#define CALL(x)                                                                    \
    do {                                                                           \
        CUresult rc_ = (x);                                                        \
        if (rc_ != CUDA_SUCCESS) {                                                 \
            const char *n_ = NULL;                                                 \
            cuGetErrorName(rc_, &n_);                                              \
            fprintf(stderr, "fork_storm: %s: %s\n", #x, n_ ? n_ : "?");            \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static void *allocator(void *arg)
{
    (void)arg;
    CUstream stream;
    CALL(cuCtxSetCurrent(primary));
    CALL(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (long i = 0; !atomic_load(&stop); i++) {
        CUdeviceptr p;
        CALL(cuMemAlloc(&p, 1 << 20));
        CALL(cuMemFree(p));
        if (i % 8 == 0) {
            CALL(cuMemAllocAsync(&p, 4 << 20, stream));
            CALL(cuMemFreeAsync(p, stream));
            CALL(cuStreamSynchronize(stream));
        }
        if (i % 64 == 0) {
            size_t free_bytes, total;
            CALL(cuMemGetInfo(&free_bytes, &total));
        }
        atomic_fetch_add(&allocs, 1);
    }
    CALL(cuStreamDestroy(stream));
    return NULL;
}

static void *launcher(void *arg)
{
    (void)arg;
    CUstream stream;
    CALL(cuCtxSetCurrent(primary));
    CALL(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    uint64_t ns = 50000;
    void *params[] = {&ns};
    for (long i = 0; !atomic_load(&stop); i++) {
        CUstream where = i % 4 == 3 ? CU_STREAM_PER_THREAD : stream;
        CALL(cuLaunchKernel(spin_fn, 1, 1, 1, 1, 1, 1, 0, where, params, NULL));
        if (i % 8 == 7) {
            CALL(cuStreamSynchronize(stream));
            CALL(cuStreamSynchronize(CU_STREAM_PER_THREAD));
        }
        atomic_fetch_add(&launches, 1);
    }
    CALL(cuStreamSynchronize(stream));
    CALL(cuStreamDestroy(stream));
    return NULL;
}

static void *capturer(void *arg)
{
    (void)arg;
    CUstream stream;
    CALL(cuCtxSetCurrent(primary));
    CALL(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    while (!atomic_load(&stop)) {
        CUgraph graph;
        CUgraphExec exec;
        CALL(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        CALL(cuLaunchKernel(empty_fn, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
        CALL(cuLaunchKernel(empty_fn, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
        CALL(cuStreamEndCapture(stream, &graph));
        CALL(cuGraphInstantiateWithFlags(&exec, graph, 0));
        CALL(cuGraphLaunch(exec, stream));
        CALL(cuStreamSynchronize(stream));
        CALL(cuGraphExecDestroy(exec));
        CALL(cuGraphDestroy(graph));
        atomic_fetch_add(&captures, 1);
    }
    CALL(cuStreamDestroy(stream));
    return NULL;
}

/* A child of the storm: ordinary code; every fourth one also uses CUDA
 * afresh, as any process may (cuInit again, the primary context, device
 * memory), which takes the shim's locks; then exit. */
static void child(long index)
{
    char *buf = malloc(4096);
    if (!buf)
        _exit(3);
    snprintf(buf, 4096, "child %d", (int)getpid());
    void *init = dlsym(RTLD_DEFAULT, "cuInit");
    void *launch = dlsym(RTLD_DEFAULT, "cuLaunchKernel");
    void *next_malloc = dlsym(RTLD_NEXT, "malloc");
    void *strlen_fn = dlsym(RTLD_DEFAULT, "strlen");
    free(buf);
    if (index % 4 == 0) {
        CUdevice dev;
        CUcontext ctx;
        CUdeviceptr p;
        size_t free_bytes, total;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
            cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS || cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS ||
            cuMemFree(p) != CUDA_SUCCESS)
            _exit(5);
    }
    _exit(init && launch && next_malloc && strlen_fn ? 0 : 4);
}

/* Waits for pid at most timeout_s: its status, or -1 if it hung (then
 * killed). */
static int wait_for(pid_t pid, double timeout_s)
{
    struct timespec pause = {0, 1000000};
    for (double waited = 0; waited < timeout_s; waited += 0.001) {
        int status;
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return status;
        if (got < 0)
            return 0x7f00;
        nanosleep(&pause, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fork_storm FORKS PROGRAM [ARGS...]\n");
        return 2;
    }
    long forks = atol(argv[1]);
    CUdevice dev;
    CUmodule mod;
    CALL(cuInit(0));
    CALL(cuDeviceGet(&dev, 0));
    CALL(cuDevicePrimaryCtxRetain(&primary, dev));
    CALL(cuCtxSetCurrent(primary));
    CALL(cuModuleLoadData(&mod, "fork_storm"));
    CALL(cuModuleGetFunction(&spin_fn, mod, "spin"));
    CALL(cuModuleGetFunction(&empty_fn, mod, "empty"));

    pthread_t threads[3];
    void *(*mains[3])(void *) = {allocator, launcher, capturer};
    for (int i = 0; i < 3; i++)
        if (pthread_create(&threads[i], NULL, mains[i], NULL) != 0)
            return 1;
    usleep(200000);

    long done = 0, hung = 0, crashed = 0;
    for (; done < forks; done++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork_storm: fork");
            break;
        }
        if (pid == 0)
            child(done);
        int status = wait_for(pid, 10.0);
        if (status < 0) {
            if (++hung >= 3)
                break; /* the verdict is in; do not wait 10 s for each of the rest */
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            crashed++;
        }
    }

    /* A child that execs a CUDA program. */
    int exec_rc = -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[2], argv + 2);
        _exit(127);
    }
    if (pid > 0) {
        int status = wait_for(pid, 60.0);
        exec_rc = status < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }

    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    printf("fork_storm: forks=%ld hung=%ld crashed=%ld exec_rc=%d allocs=%ld launches=%ld captures=%ld\n", done,
           hung, crashed, exec_rc, atomic_load(&allocs), atomic_load(&launches), atomic_load(&captures));
    return 0;
}
