/*
 * A planted fault, for the test that the check's capture row can fail
 * (test/gpu/plant_test.py): preloaded ahead of libgpuslice.so, it takes
 * the application's cuGraphLaunch and cuGraphLaunch_ptsz and calls the
 * driver's own, so that graph launches skip gpuslice's gate. Test code
 * only: nothing ships it, and gpu_check.py uses it only with --simulate.
 *
 * The driver's function is looked up with glibc's dlsym, found by version,
 * since the shim's dlsym would hand back the shim's wrapper.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

typedef int (*graph_launch_fn)(void *exec, void *stream);

static void *driver_symbol(const char *name)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    void *(*glibc_dlsym)(void *, const char *) = NULL;
    for (size_t i = 0; !glibc_dlsym && i < sizeof versions / sizeof versions[0]; i++) {
        void *found = dlvsym(RTLD_DEFAULT, "dlsym", versions[i]);
        if (found)
            memcpy(&glibc_dlsym, &found, sizeof glibc_dlsym); /* ISO C has no object-to-function cast */
    }
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    return glibc_dlsym && driver ? glibc_dlsym(driver, name) : NULL;
}

static graph_launch_fn as_launch(void *symbol)
{
    graph_launch_fn fn = NULL;
    if (symbol)
        memcpy(&fn, &symbol, sizeof fn);
    return fn;
}

__attribute__((visibility("default"))) int cuGraphLaunch(void *exec, void *stream)
{
    static graph_launch_fn real;
    if (!real)
        real = as_launch(driver_symbol("cuGraphLaunch"));
    return real ? real(exec, stream) : 999; /* CUDA_ERROR_UNKNOWN */
}

__attribute__((visibility("default"))) int cuGraphLaunch_ptsz(void *exec, void *stream)
{
    static graph_launch_fn real;
    if (!real)
        real = as_launch(driver_symbol("cuGraphLaunch_ptsz"));
    return real ? real(exec, stream) : 999;
}
