/*
 * fakecuda host synchronization, judged by the calling thread's CPU time
 * while it waits 300 ms for a kernel: a spinning wait (CU_CTX_SCHED_SPIN,
 * or CU_CTX_SCHED_AUTO with no more contexts than CPUs) burns about the
 * whole wait, a blocking one (CU_CTX_SCHED_BLOCKING_SYNC, or an event made
 * with CU_EVENT_BLOCKING_SYNC) next to nothing. Margins are wide: the
 * machine may be shared.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "test_util.h"

#define EXPECT_RC(call, want) EXPECT((call) == (want))
#define WAIT_NS (300 * MS)

enum sync_call { CTX_SYNC, STREAM_SYNC, EVENT_SYNC };
static const char *const call_names[] = {"cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"};

struct measure {
    uint64_t wall_ns, cpu_ns;
};

/* Queues a 300 ms kernel on the current context and measures one way of
 * waiting for it. */
static struct measure wait_once(CUfunction spin, enum sync_call call, unsigned event_flags)
{
    CUstream stream;
    CUevent event;
    struct measure m = {0, 0};
    EXPECT_RC(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&event, event_flags), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin, stream, WAIT_NS), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(event, stream), CUDA_SUCCESS);
    uint64_t wall = now_ns(), cpu = thread_cpu_ns();
    switch (call) {
    case CTX_SYNC: EXPECT_RC(cuCtxSynchronize(), CUDA_SUCCESS); break;
    case STREAM_SYNC: EXPECT_RC(cuStreamSynchronize(stream), CUDA_SUCCESS); break;
    case EVENT_SYNC: EXPECT_RC(cuEventSynchronize(event), CUDA_SUCCESS); break;
    }
    m.cpu_ns = thread_cpu_ns() - cpu;
    m.wall_ns = now_ns() - wall;
    EXPECT_RC(cuEventQuery(event), CUDA_SUCCESS);
    EXPECT_RC(cuEventDestroy_v2(event), CUDA_SUCCESS);
    EXPECT_RC(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
    return m;
}

static void expect_spins(const char *what, struct measure m)
{
    printf("%s: waited %.0f ms, CPU %.0f ms (spins)\n", what, m.wall_ns / 1e6, m.cpu_ns / 1e6);
    EXPECT(m.wall_ns >= WAIT_NS * 9 / 10);
    /* A spinning wait uses the CPU it is given: on a loaded machine that
     * may be a fifth of one, still ten times what a blocking wait uses
     * (below, at most a fortieth: a futex wait costs microseconds). */
    EXPECT(m.cpu_ns >= m.wall_ns / 10);
}

static void expect_blocks(const char *what, struct measure m)
{
    printf("%s: waited %.0f ms, CPU %.0f ms (blocks)\n", what, m.wall_ns / 1e6, m.cpu_ns / 1e6);
    EXPECT(m.wall_ns >= WAIT_NS * 9 / 10);
    EXPECT(m.cpu_ns <= m.wall_ns / 40);
}

/* Runs every sync call in a context created with these flags. */
static void in_created_context(unsigned flags, bool spins)
{
    CUcontext ctx;
    EXPECT_RC(cuCtxCreate_v2(&ctx, flags, 0), CUDA_SUCCESS);
    CUfunction spin = spin_function();
    for (int call = CTX_SYNC; call <= EVENT_SYNC; call++) {
        char what[96];
        snprintf(what, sizeof what, "flags %#x, %s", flags, call_names[call]);
        struct measure m = wait_once(spin, (enum sync_call)call, 0);
        if (spins)
            expect_spins(what, m);
        else
            expect_blocks(what, m);
    }
    /* An event made with CU_EVENT_BLOCKING_SYNC blocks whatever the context
     * says. */
    char what[96];
    snprintf(what, sizeof what, "flags %#x, CU_EVENT_BLOCKING_SYNC event", flags);
    expect_blocks(what, wait_once(spin, EVENT_SYNC, CU_EVENT_BLOCKING_SYNC));
    EXPECT_RC(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
}

static void test_primary_context_flags(void)
{
    CUcontext primary;
    unsigned flags = 99;
    int active = 1;
    EXPECT_RC(cuDevicePrimaryCtxSetFlags_v2(0, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
    EXPECT_RC(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
    EXPECT(flags == CU_CTX_SCHED_BLOCKING_SYNC && active == 0);
    EXPECT_RC(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
    EXPECT_RC(cuCtxPushCurrent_v2(primary), CUDA_SUCCESS);
    CUfunction spin = spin_function();
    expect_blocks("primary, CU_CTX_SCHED_BLOCKING_SYNC", wait_once(spin, CTX_SYNC, 0));
    /* New flags apply to the active primary context. */
    EXPECT_RC(cuDevicePrimaryCtxSetFlags_v2(0, CU_CTX_SCHED_SPIN), CUDA_SUCCESS);
    EXPECT_RC(cuCtxGetFlags(&flags), CUDA_SUCCESS);
    EXPECT((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_SPIN);
    expect_spins("primary, CU_CTX_SCHED_SPIN", wait_once(spin, STREAM_SYNC, 0));
    EXPECT_RC(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
    EXPECT_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
    EXPECT_RC(cuDevicePrimaryCtxSetFlags_v2(0, 3), CUDA_ERROR_INVALID_VALUE);
}

/* CU_CTX_SCHED_AUTO with more contexts than logical CPUs yields instead of
 * spinning; the waits still complete. */
static void test_auto_with_many_contexts(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1 || cpus > 256) {
        printf("skipping the many-contexts case: %ld CPUs\n", cpus);
        return;
    }
    CUcontext *ctxs = calloc((size_t)cpus + 1, sizeof *ctxs);
    for (long i = 0; i <= cpus; i++)
        EXPECT_RC(cuCtxCreate_v2(&ctxs[i], CU_CTX_SCHED_AUTO, 0), CUDA_SUCCESS);
    struct measure m = wait_once(spin_function(), STREAM_SYNC, 0);
    printf("%ld contexts on %ld CPUs: waited %.0f ms, CPU %.0f ms\n", cpus + 1, cpus, m.wall_ns / 1e6,
           m.cpu_ns / 1e6);
    EXPECT(m.wall_ns >= WAIT_NS * 9 / 10);
    for (long i = cpus; i >= 0; i--)
        EXPECT_RC(cuCtxDestroy_v2(ctxs[i]), CUDA_SUCCESS);
    free(ctxs);
}

static void test_disable_timing(void)
{
    CUcontext ctx;
    CUevent timed, untimed;
    float ms = -1;
    EXPECT_RC(cuCtxCreate_v2(&ctx, CU_CTX_SCHED_BLOCKING_SYNC, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&timed, 0), CUDA_SUCCESS);
    EXPECT_RC(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(timed, NULL), CUDA_SUCCESS);
    EXPECT_RC(launch_spin(spin_function(), NULL, 20 * MS), CUDA_SUCCESS);
    EXPECT_RC(cuEventRecord(untimed, NULL), CUDA_SUCCESS);
    EXPECT_RC(cuEventSynchronize(untimed), CUDA_SUCCESS);
    EXPECT_RC(cuEventElapsedTime(&ms, timed, untimed), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC(cuEventElapsedTime(&ms, timed, timed), CUDA_SUCCESS);
    EXPECT(ms == 0.0f);
    EXPECT_RC(cuEventCreate(&untimed, 0x80), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
    EXPECT_RC(cuCtxCreate_v2(&ctx, 3, 0), CUDA_ERROR_INVALID_VALUE);
}

int main(void)
{
    const char *path = use_fresh_state("1", "1G");
    if (cuInit(0) != CUDA_SUCCESS)
        return 2;
    in_created_context(CU_CTX_SCHED_SPIN, true);
    in_created_context(CU_CTX_SCHED_AUTO, true); /* 1 context, at least 1 CPU */
    in_created_context(CU_CTX_SCHED_BLOCKING_SYNC, false);
    test_primary_context_flags();
    test_auto_with_many_contexts();
    test_disable_timing();
    unlink(path);
    return check_finish();
}
