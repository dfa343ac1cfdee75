/*
 * fakecuda initialisation: cuInit and cuDriverGetVersion, the attachment to
 * the shared state, small helpers the other files share, and what a forked
 * child inherits (nothing: it must call cuInit again). Contexts are in
 * fc_ctx.c, devices in fc_device.c.
 */
#include "fc_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Process-wide driver state; guarded by proc_lock, except `initialized`,
 * which is also read without it (set last, under the lock). */
static pthread_mutex_t proc_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool initialized;
static struct fc_shared *shared;
static int self_slot = -1;

uint64_t fc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fc_log(const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "fakecuda[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}

bool fc_parse_bytes(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || text[0] == '-')
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end != '\0' || (shift && v > (UINT64_MAX >> shift)))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

struct fc_shared *fc_shared_state(void) { return shared; }
int fc_self_slot(void) { return self_slot; }

CUresult fc_check_init(void)
{
    return atomic_load_explicit(&initialized, memory_order_acquire) ? CUDA_SUCCESS
                                                                   : CUDA_ERROR_NOT_INITIALIZED;
}

static void atfork_prepare(void)
{
    pthread_mutex_lock(&proc_lock);
    fc_ctx_atfork_prepare();
    fc_exec_atfork_prepare();
    fc_mem_atfork_prepare();
    fc_handles_atfork_prepare();
}

static void atfork_parent(void)
{
    fc_handles_atfork_parent();
    fc_mem_atfork_parent();
    fc_exec_atfork_parent();
    fc_ctx_atfork_parent();
    pthread_mutex_unlock(&proc_lock);
}

static void atfork_child(void)
{
    /* None of the parent's contexts or worker threads exist here. The
     * shared mapping stays; the child takes its own slot at cuInit. */
    fc_handles_atfork_child();
    fc_mem_atfork_child();
    fc_exec_atfork_child();
    fc_streams_atfork_child();
    fc_ctx_atfork_child();
    if (!fc_state_after_fork_child())
        shared = NULL; /* cannot prove liveness: attach afresh at cuInit */
    self_slot = -1;
    atomic_store(&initialized, false);
    pthread_mutex_unlock(&proc_lock);
}

__attribute__((constructor)) static void fakecuda_load(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

FC_API CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&proc_lock);
    if (atomic_load(&initialized))
        goto out;
    const char *devices_env = getenv("FAKECUDA_DEVICES");
    const char *memory_env = getenv("FAKECUDA_MEMORY");
    uint64_t ndevices = 1, memory = 16ull << 30;
    if (devices_env && (!fc_parse_bytes(devices_env, &ndevices) || ndevices < 1 ||
                        ndevices > FC_MAX_DEVICES)) {
        fc_log("FAKECUDA_DEVICES=%s: expected a count from 1 to %d", devices_env, FC_MAX_DEVICES);
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (memory_env && (!fc_parse_bytes(memory_env, &memory) || memory == 0)) {
        fc_log("FAKECUDA_MEMORY=%s: expected bytes, e.g. 16G or 512M", memory_env);
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!shared) {
        char err[256];
        shared = fc_state_open(getenv("FAKECUDA_STATE"), (int)ndevices, memory, err, sizeof err);
        if (!shared) {
            fc_log("cannot attach simulated GPUs: %s", err);
            rc = CUDA_ERROR_OPERATING_SYSTEM;
            goto out;
        }
    }
    self_slot = fc_state_register(shared, getpid());
    if (self_slot < 0) {
        fc_log("all %d process slots of the state file belong to live processes", FC_MAX_PROCS);
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }
    atomic_store_explicit(&initialized, true, memory_order_release);
out:
    pthread_mutex_unlock(&proc_lock);
    return rc;
}

FC_API CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = FC_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

