/*
 * fakecuda handles and entry points: a destroyed context, stream or event
 * answers what a real driver answers (a context's streams and events die
 * with it); under FAKECUDA_STRICT=1 the use of such a stale handle prints
 * one line naming the call and the handle and aborts; under
 * FAKECUDA_TRAMPOLINES=1 cuGetProcAddress hands out trampolines that are
 * not the exported functions and still work.
 *
 * Usage: fakecuda_handles_test            (the tests)
 *        fakecuda_handles_test --stale N  (one stale use, for the strict case)
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "test_util.h"

CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult cuCtxGetDevice_v2(CUdevice *, CUcontext);

#define EXPECT_RC(call, want) EXPECT((call) == (want))

static CUcontext primary;

/* ---- stale handles -------------------------------------------------------- */

struct thread_call {
    CUcontext ctx;
    pthread_barrier_t current, destroyed;
    CUresult sync_rc, alloc_rc;
};

/* Makes ctx current, waits until it is destroyed, then uses it. */
static void *use_after_destroy(void *arg)
{
    struct thread_call *t = arg;
    cuCtxSetCurrent(t->ctx);
    pthread_barrier_wait(&t->current);
    pthread_barrier_wait(&t->destroyed);
    CUdeviceptr p;
    t->sync_rc = cuCtxSynchronize();
    t->alloc_rc = cuMemAlloc_v2(&p, 64);
    return NULL;
}

static void test_stale_handles(void)
{
    CUcontext ctx;
    CUstream stream, ctx_stream;
    CUevent event, ctx_event;
    CUfunction spin;
    EXPECT_RC(cuCtxCreate_v2(&ctx, 0, 0), CUDA_SUCCESS);
    EXPECT_RC(cuStreamCreate(&ctx_stream, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&ctx_event, 0), CUDA_SUCCESS);
    spin = spin_function();
    EXPECT(spin != NULL);
    /* Timed from the launch, not from after the thread below has started:
     * on a loaded machine that alone may outlast a short kernel. */
    uint64_t launched = now_ns();
    EXPECT_RC(launch_spin(spin, ctx_stream, 200 * MS), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(ctx_event, ctx_stream), CUDA_SUCCESS);

    struct thread_call t = {.ctx = ctx};
    pthread_barrier_init(&t.current, NULL, 2);
    pthread_barrier_init(&t.destroyed, NULL, 2);
    pthread_t thread;
    pthread_create(&thread, NULL, use_after_destroy, &t);
    pthread_barrier_wait(&t.current);
    /* Destroying waits for its work; its streams and events go with it. */
    EXPECT_RC(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
    EXPECT(now_ns() - launched >= 190 * MS);
    pthread_barrier_wait(&t.destroyed);
    pthread_join(thread, NULL);
    /* Still current to that thread: "CUDA_ERROR_CONTEXT_IS_DESTROYED". */
    EXPECT(t.sync_rc == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    EXPECT(t.alloc_rc == CUDA_ERROR_CONTEXT_IS_DESTROYED);
    pthread_barrier_destroy(&t.current);
    pthread_barrier_destroy(&t.destroyed);

    EXPECT_RC(cuCtxPushCurrent_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuCtxSetCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuCtxDestroy_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
    CUdevice device;
    EXPECT_RC(cuCtxGetDevice_v2(&device, ctx), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC(cuCtxSetCurrent(primary), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(ctx_stream), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuStreamQuery(ctx_stream), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(launch_spin(spin, ctx_stream, MS), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuStreamDestroy_v2(ctx_stream), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuEventQuery(ctx_event), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuEventSynchronize(ctx_event), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuEventRecord(ctx_event, NULL), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuEventDestroy_v2(ctx_event), CUDA_ERROR_INVALID_HANDLE);

    /* Destroyed one by one. */
    EXPECT_RC(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&event, 0), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(event), CUDA_SUCCESS);
    EXPECT_RC(cuStreamSynchronize(stream), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuStreamWaitEvent(NULL, event, 0), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuEventRecord(event, NULL), CUDA_ERROR_INVALID_HANDLE);
    /* A new stream may reuse the slot: the old handle stays stale. */
    CUstream reused;
    EXPECT_RC(cuStreamCreate(&reused, 0), CUDA_SUCCESS);
    EXPECT(reused != stream);
    EXPECT_RC(cuStreamQuery(stream), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuStreamQuery(reused), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(reused), CUDA_SUCCESS);
}

static void *destroy_context(void *ctx)
{
    cuCtxDestroy_v2((CUcontext)ctx);
    return NULL;
}

/* One stale use (or a garbage handle, case 0) in a child under
 * FAKECUDA_STRICT=1. */
static int stale_use(int which)
{
    CUcontext ctx, other;
    CUstream stream;
    CUevent event;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) || cuStreamCreate(&stream, 0) ||
        cuEventCreate(&event, 0) || cuCtxCreate_v2(&other, 0, 0))
        return 2;
    CUstream other_stream;
    if (cuStreamCreate(&other_stream, 0) || cuCtxPopCurrent_v2(NULL))
        return 2;
    switch (which) {
    case 0: /* garbage is not stale: an error, no abort */
        return cuStreamSynchronize((CUstream)(uintptr_t)0x1234567) == CUDA_ERROR_INVALID_HANDLE &&
                       cuCtxPushCurrent_v2((CUcontext)(uintptr_t)0xdeadbeef) == CUDA_ERROR_INVALID_CONTEXT
                   ? 0
                   : 3;
    case 1:
        cuStreamDestroy_v2(stream);
        cuStreamSynchronize(stream);
        break;
    case 2:
        cuEventDestroy_v2(event);
        cuEventRecord(event, NULL);
        break;
    case 3:
        cuCtxDestroy_v2(other);
        cuCtxPushCurrent_v2(other);
        break;
    case 4: /* a stream of a destroyed context */
        cuCtxDestroy_v2(other);
        cuStreamQuery(other_stream);
        break;
    case 5: { /* a context destroyed by another thread while current here */
        pthread_t thread;
        cuCtxPushCurrent_v2(other);
        pthread_create(&thread, NULL, destroy_context, other);
        pthread_join(thread, NULL);
        cuCtxSynchronize();
        break;
    }
    default:
        return 2;
    }
    return 4; /* the stale use did not abort */
}

struct strict_case {
    int which;
    const char *call, *type;
};

static void test_strict_mode(void)
{
    static const struct strict_case cases[] = {
        {1, "cuStreamSynchronize", "CUstream"}, {2, "cuEventRecord", "CUevent"},
        {3, "cuCtxPushCurrent_v2", "CUcontext"}, {4, "cuStreamQuery", "CUstream"},
        {5, "cuCtxSynchronize", "CUcontext"},
    };
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    EXPECT(n > 0);
    if (n <= 0)
        return;
    self[n] = '\0';
    for (int c = -1; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        int which = c < 0 ? 0 : cases[c].which;
        int err[2];
        if (pipe(err) != 0)
            return;
        pid_t pid = fork();
        if (pid == 0) {
            char arg[8];
            snprintf(arg, sizeof arg, "%d", which);
            dup2(err[1], STDERR_FILENO);
            close(err[0]);
            setenv("FAKECUDA_STRICT", "1", 1);
            execl(self, self, "--stale", arg, (char *)NULL);
            _exit(127);
        }
        close(err[1]);
        char text[4096] = {0};
        size_t len = 0;
        ssize_t got;
        while (len < sizeof text - 1 && (got = read(err[0], text + len, sizeof text - 1 - len)) > 0)
            len += (size_t)got;
        close(err[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        if (c < 0) {
            EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            continue;
        }
        bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
        char want[128];
        snprintf(want, sizeof want, "%s: stale %s 0x", cases[c].call, cases[c].type);
        if (!aborted || !strstr(text, want))
            printf("strict case %d: status %#x, stderr: %s\n", which, status, text);
        EXPECT(aborted);
        EXPECT(strstr(text, want) != NULL);
    }
}

/* ---- trampolines ---------------------------------------------------------- */

typedef CUresult (*device_count_fn)(int *);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*launch_fn)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                              unsigned int, unsigned int, CUstream, void **, void **);
typedef CUresult (*sync_fn)(CUstream);

static void *lookup(const char *name, int version, cuuint64_t flags)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult status;
    if (cuGetProcAddress_v2(name, &p, version, flags, &status) != CUDA_SUCCESS)
        return NULL;
    return p;
}

static void test_trampolines(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    EXPECT(lib != NULL);
    if (!lib)
        return;
    static const struct {
        const char *base, *exported;
        int version;
        cuuint64_t flags;
    } entries[] = {
        {"cuDeviceGetCount", "cuDeviceGetCount", 12000, 0},
        {"cuMemAlloc", "cuMemAlloc_v2", 12000, 0},
        {"cuMemFree", "cuMemFree_v2", 12000, 0},
        {"cuLaunchKernel", "cuLaunchKernel", 12000, 0},
        {"cuLaunchKernel", "cuLaunchKernel_ptsz", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
        {"cuStreamSynchronize", "cuStreamSynchronize_ptsz", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
        {"cuStreamBeginCapture", "cuStreamBeginCapture_v2", 12000, 0},
        {"cuGetProcAddress", "cuGetProcAddress_v2", 12000, 0},
    };
    void *seen[sizeof entries / sizeof entries[0]];
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void *p = lookup(entries[i].base, entries[i].version, entries[i].flags);
        void *real = dlsym(lib, entries[i].exported);
        seen[i] = p;
        if (!p || !real || p == real)
            printf("%s: lookup %p, dlsym(%s) %p\n", entries[i].base, p, entries[i].exported, real);
        EXPECT(p != NULL && real != NULL && p != real);
        for (size_t j = 0; j < i; j++)
            EXPECT(seen[j] != p);
    }
    /* dlsym still finds the functions themselves. */
    EXPECT(dlsym(lib, "cuGetProcAddress_v2") == (void *)(uintptr_t)cuGetProcAddress_v2);

    /* Each trampoline calls its function, arguments intact (eleven of
     * them, some on the stack, for cuLaunchKernel). */
    device_count_fn count_via;
    alloc_fn alloc_via;
    free_fn free_via;
    launch_fn launch_via, launch_ptsz_via;
    sync_fn sync_ptsz_via;
    memcpy(&count_via, &seen[0], sizeof count_via);
    memcpy(&alloc_via, &seen[1], sizeof alloc_via);
    memcpy(&free_via, &seen[2], sizeof free_via);
    memcpy(&launch_via, &seen[3], sizeof launch_via);
    memcpy(&launch_ptsz_via, &seen[4], sizeof launch_ptsz_via);
    memcpy(&sync_ptsz_via, &seen[5], sizeof sync_ptsz_via);
    int count = 0;
    EXPECT_RC(count_via(&count), CUDA_SUCCESS);
    EXPECT(count == 1);
    EXPECT_RC(count_via(NULL), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr p = 0;
    size_t free_before, free_after, total;
    EXPECT_RC(cuMemGetInfo_v2(&free_before, &total), CUDA_SUCCESS);
    EXPECT_RC(alloc_via(&p, 12345), CUDA_SUCCESS);
    EXPECT_RC(cuMemGetInfo_v2(&free_after, &total), CUDA_SUCCESS);
    EXPECT(free_before - free_after == 12345);
    EXPECT_RC(free_via(p), CUDA_SUCCESS);
    CUfunction spin = spin_function();
    uint64_t ns = 30 * MS;
    void *params[] = {&ns};
    uint64_t start = now_ns();
    EXPECT_RC(launch_via(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    EXPECT_RC(launch_via(spin, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(launch_ptsz_via(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_SUCCESS);
    EXPECT_RC(sync_ptsz_via(NULL), CUDA_SUCCESS);
    EXPECT(now_ns() - start >= 2 * ns);
    /* A lookup through the trampoline of cuGetProcAddress_v2 itself. */
    CUresult (*gpa_via)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    memcpy(&gpa_via, &seen[7], sizeof gpa_via);
    void *again = NULL;
    EXPECT_RC(gpa_via("cuMemAlloc", &again, 12000, 0, NULL), CUDA_SUCCESS);
    EXPECT(again == seen[1]);
    dlclose(lib);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--stale") == 0)
        return stale_use(atoi(argv[2]));
    const char *path = use_fresh_state("1", "1G");
    setenv("FAKECUDA_TRAMPOLINES", "1", 1);
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&primary, 0) || cuCtxSetCurrent(primary))
        return 2;
    test_stale_handles();
    test_strict_mode();
    test_trampolines();
    unlink(path);
    return check_finish();
}
