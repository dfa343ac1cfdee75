/*
 * fail_threads.so: preloaded before libgpuslice.so, fails pthread_create
 * calls that libgpuslice.so makes, with EAGAIN, as a container at its
 * pids.max limit would: the first FAIL_THREADS (default 1), or, with
 * FAIL_THREADS_EXCEPT=N, every one but the Nth. Test code.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static _Atomic int failed; /* the calls of libgpuslice.so so far */

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    void *symbol = dlsym(RTLD_NEXT, "pthread_create");
    create_fn real;
    if (!symbol)
        return EAGAIN;
    memcpy(&real, &symbol, sizeof real); /* ISO C has no object-to-function cast */
    const char *limit_text = getenv("FAIL_THREADS"), *except_text = getenv("FAIL_THREADS_EXCEPT");
    int limit = limit_text ? atoi(limit_text) : 1, except = except_text ? atoi(except_text) : 0;
    Dl_info info;
    if (dladdr(__builtin_return_address(0), &info) && info.dli_fname && strstr(info.dli_fname, "libgpuslice")) {
        int n = atomic_fetch_add(&failed, 1) + 1;
        if (except ? n != except : n <= limit) {
            fprintf(stderr, "fail_threads: a pthread_create of libgpuslice.so fails (EAGAIN)\n");
            return EAGAIN;
        }
    }
    return real(thread, attr, start, arg);
}
