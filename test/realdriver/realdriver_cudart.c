/*
 * realdriver_cudart: what an application using NVIDIA's CUDA runtime sees
 * on a machine without a GPU. Opens libcudart.so.11.0 with dlopen (no cudart
 * headers are needed: the few functions used are declared here), asks for
 * the device count and a device allocation, and prints each result with how
 * long the call took. cuda_test.py runs it with and without
 * libgpuslice.so preloaded and compares codes and times.
 *
 * Prints "NAME rc=CODE error=NAME ms=MILLISECONDS" per call, and
 * "driver_version=V" and "runtime_version=V".
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

typedef int cuda_error; /* cudaError_t */

typedef cuda_error (*get_device_count_fn)(int *);
typedef cuda_error (*malloc_fn)(void **, size_t);
typedef cuda_error (*free_fn)(void *);
typedef cuda_error (*get_version_fn)(int *);
typedef const char *(*error_name_fn)(cuda_error);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void *need(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        fprintf(stderr, "realdriver_cudart: %s not found: %s\n", name, dlerror());
    return p;
}

int main(void)
{
    double start = now_ms();
    void *lib = dlopen("libcudart.so.11.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "realdriver_cudart: %s\n", dlerror());
        return 2;
    }
    get_device_count_fn get_device_count = (get_device_count_fn)(uintptr_t)need(lib, "cudaGetDeviceCount");
    malloc_fn cuda_malloc = (malloc_fn)(uintptr_t)need(lib, "cudaMalloc");
    free_fn cuda_free = (free_fn)(uintptr_t)need(lib, "cudaFree");
    get_version_fn driver_version = (get_version_fn)(uintptr_t)need(lib, "cudaDriverGetVersion");
    get_version_fn runtime_version = (get_version_fn)(uintptr_t)need(lib, "cudaRuntimeGetVersion");
    error_name_fn error_name = (error_name_fn)(uintptr_t)need(lib, "cudaGetErrorName");
    if (!get_device_count || !cuda_malloc || !cuda_free || !driver_version || !runtime_version || !error_name)
        return 2;
    printf("dlopen ms=%.1f\n", now_ms() - start);

    int count = -1, version = 0;
    void *ptr = NULL;
    double t;
    cuda_error rc;
#define TIMED(name, call)                                                                       \
    t = now_ms();                                                                               \
    rc = (call);                                                                                \
    printf("%s rc=%d error=%s ms=%.1f\n", name, rc, error_name(rc), now_ms() - t);              \
    fflush(stdout);

    TIMED("cudaDriverGetVersion", driver_version(&version))
    printf("driver_version=%d\n", version);
    TIMED("cudaRuntimeGetVersion", runtime_version(&version))
    printf("runtime_version=%d\n", version);
    TIMED("cudaGetDeviceCount", get_device_count(&count))
    TIMED("cudaMalloc", cuda_malloc(&ptr, 1 << 20))
    TIMED("cudaGetDeviceCount (again)", get_device_count(&count))
    TIMED("cudaFree (NULL)", cuda_free(NULL))
    printf("total ms=%.1f\n", now_ms() - start);
    return 0;
}
