/*
 * The CUDA driver functions the examples call, resolved from
 * libcuda.so.1 with dlopen and dlsym once the command line is read: so
 * --help and --version work where there is no driver, and a missing
 * driver is one clear line instead of the loader's error. This is the
 * path PyTorch, JAX and cudart take to the driver too (dlopen, then a
 * lookup per function), and LD_LIBRARY_PATH decides which libcuda.so.1
 * it is: fakecuda in the tests, NVIDIA's driver on a GPU.
 *
 * Calls are written CU(cuFoo)(...). Each pointer has the type of the
 * function cuda.h declares under that name, and is looked up by the name
 * cuda.h maps it to (cuMemAlloc is cuMemAlloc_v2), as a program linked
 * with -lcuda binds it.
 */
#ifndef GPUSLICE_EXAMPLES_CUDA_DRIVER_H
#define GPUSLICE_EXAMPLES_CUDA_DRIVER_H

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define CUDA_DRIVER_NAME_(x) #x
#define CUDA_DRIVER_NAME(x) CUDA_DRIVER_NAME_(x) /* after cuda.h's macros */
#define CU(name) cuda_driver_##name

#define CUDA_DRIVER_DECLARE(name) static __typeof__(&name) cuda_driver_##name;
CUDA_DRIVER_FUNCTIONS(CUDA_DRIVER_DECLARE)

/* Loads the driver and every function; 0, or -1 after one line on stderr
 * that starts with prog. */
static int cuda_driver_load(const char *prog)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "%s: cannot load the CUDA driver: %s (install NVIDIA's driver, or point LD_LIBRARY_PATH "
                        "at a libcuda.so.1 such as fakecuda's)\n", prog, dlerror());
        return -1;
    }
#define CUDA_DRIVER_RESOLVE(name)                                                                                 \
    {                                                                                                             \
        void *fn = dlsym(lib, CUDA_DRIVER_NAME(name));                                                            \
        if (!fn) {                                                                                                \
            fprintf(stderr, "%s: the CUDA driver has no %s\n", prog, CUDA_DRIVER_NAME(name));                     \
            return -1;                                                                                            \
        }                                                                                                         \
        memcpy(&cuda_driver_##name, &fn, sizeof fn); /* a data pointer into a function pointer, as POSIX allows */          \
    }
    CUDA_DRIVER_FUNCTIONS(CUDA_DRIVER_RESOLVE)
#undef CUDA_DRIVER_RESOLVE
    return 0;
}

#endif
