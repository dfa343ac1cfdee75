/*
 * fakecuda modules and launches: any image loads, any name resolves to a
 * function, and a launch queues a kernel whose device time is known:
 *   - a kernel whose name starts with "spin" runs for the nanoseconds in
 *     its first parameter (a uint64_t);
 *   - a kernel whose name starts with "collective" waits on its device for
 *     its peer ranks, then runs for its first parameter's nanoseconds
 *     (parameters and behaviour: fc_collective.c);
 *   - a kernel whose name starts with "stamp" runs for its first
 *     parameter's nanoseconds, then writes when it started and ended into
 *     the 16 bytes of device memory its second parameter points to
 *     (fc_exec.c), as a kernel reading %globaltimer would;
 *   - any other runs for FAKECUDA_KERNEL_NS (default 5000).
 * A library's kernel (cuLibraryGetKernel) is context-independent: launched
 * into a created stream it runs in that stream's context, current context
 * or not; the NULL and special streams need a current context.
 */
#include "fc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fc_module {
    uint64_t handle;
};

/* ---- modules and libraries --------------------------------------------- */

static CUresult module_new(enum fc_handle_type type, uint64_t *out)
{
    CUresult rc;
    if (type == FC_H_MODULE && !fc_current_ctx("cuModuleLoadData", &rc))
        return rc;
    if ((rc = fc_check_init()) != CUDA_SUCCESS)
        return rc;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->handle = fc_handle_new(type, m);
    if (!m->handle) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = m->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (!fname)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(FC_H_MODULE, (uint64_t *)module);
}

FC_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(FC_H_MODULE, (uint64_t *)module);
}

FC_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int nopts,
                                   CUjit_option *options, void **values)
{
    (void)nopts;
    (void)options;
    (void)values;
    return cuModuleLoadData(module, image);
}

FC_API CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_module *m = fc_handle_use(__func__, FC_H_MODULE, (uint64_t)(uintptr_t)hmod);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_handle_free(FC_H_MODULE, m->handle);
    free(m);
    return CUDA_SUCCESS;
}

FC_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
                                  void **jit_values, unsigned int njit, CUlibraryOption *lib_options,
                                  void **lib_values, unsigned int nlib)
{
    (void)jit_options;
    (void)jit_values;
    (void)njit;
    (void)lib_options;
    (void)lib_values;
    (void)nlib;
    if (!code)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(FC_H_LIBRARY, (uint64_t *)library);
}

FC_API CUresult cuLibraryUnload(CUlibrary library)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_module *m = fc_handle_use(__func__, FC_H_LIBRARY, (uint64_t)(uintptr_t)library);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_handle_free(FC_H_LIBRARY, m->handle);
    free(m);
    return CUDA_SUCCESS;
}

/* Functions live as long as the process: real modules own them, but a
 * stale CUfunction must not crash fakecuda, so they are never freed. */
static CUresult function_new(const char *name, uint64_t *out)
{
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_function *f = calloc(1, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(f->name, sizeof f->name, "%s", name);
    if (strncmp(name, "spin", 4) == 0)
        f->kind = FC_FN_SPIN;
    else if (strncmp(name, "collective", 10) == 0)
        f->kind = FC_FN_COLLECTIVE;
    else if (strncmp(name, "stamp", 5) == 0)
        f->kind = FC_FN_STAMP;
    else
        f->kind = FC_FN_DEFAULT;
    f->handle = fc_handle_new(FC_H_FUNCTION, f);
    if (!f->handle) {
        free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = f->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!fc_handle_use(__func__, FC_H_MODULE, (uint64_t)(uintptr_t)hmod))
        return CUDA_ERROR_INVALID_HANDLE;
    return function_new(name, (uint64_t *)hfunc);
}

FC_API CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!fc_handle_use(__func__, FC_H_LIBRARY, (uint64_t)(uintptr_t)library))
        return CUDA_ERROR_INVALID_HANDLE;
    return function_new(name, (uint64_t *)kernel);
}

/* A CUkernel is usable as a CUfunction of any context: the same handle. */
FC_API CUresult cuKernelGetFunction(CUfunction *pfunc, CUkernel kernel)
{
    CUresult rc;
    if (!fc_current_ctx(__func__, &rc))
        return rc;
    if (!pfunc)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_handle_use(__func__, FC_H_FUNCTION, (uint64_t)(uintptr_t)kernel))
        return CUDA_ERROR_INVALID_HANDLE;
    *pfunc = (CUfunction)kernel;
    return CUDA_SUCCESS;
}

/* ---- launches ----------------------------------------------------------- */

/* The 64-bit parameter `index` (0 or 1) of a kernel whose parameters are
 * all 64-bit: from kernelParams, or at offset 8 x index of an `extra`
 * buffer at least that long. 0 if it is not there. */
static uint64_t param_u64(void **params, void **extra, unsigned index)
{
    uint64_t v = 0;
    if (params && params[0]) {
        if (index == 0 || params[index])
            memcpy(&v, params[index], sizeof v);
    } else if (extra) {
        const void *buffer = NULL;
        size_t size = 0;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buffer = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                memcpy(&size, extra[i + 1], sizeof size);
        }
        if (buffer && (index == 0 || size >= 8 * (index + 1)))
            memcpy(&v, (const char *)buffer + 8 * index, sizeof v);
    }
    return v;
}

static uint64_t spin_ns(void **params, void **extra)
{
    return param_u64(params, extra, 0);
}

CUresult fc_kernel_work(const struct fc_function *f, void **params, void **extra, struct fc_work *work)
{
    work->kind = FC_WORK_KERNEL;
    work->collective = false;
    work->stamp_out = NULL;
    if (f->kind == FC_FN_DEFAULT) {
        work->ns = fc_kernel_default_ns();
    } else if (f->kind == FC_FN_SPIN) {
        work->ns = spin_ns(params, extra);
    } else if (f->kind == FC_FN_STAMP) {
        work->ns = spin_ns(params, extra);
        CUdeviceptr out = (CUdeviceptr)param_u64(params, extra, 1);
        if (out && !fc_mem_range_valid(out, 2 * sizeof(uint64_t))) {
            fc_log("launch of stamp kernel %s refused: its output 0x%llx is not 16 bytes of device memory", f->name,
                   (unsigned long long)out);
            return CUDA_ERROR_INVALID_VALUE;
        }
        work->stamp_out = (void *)(uintptr_t)out;
    } else {
        const char *why = "";
        if (!fc_collective_parse(params, extra, &work->ns, &work->coll, &why)) {
            fc_log("launch of collective kernel %s refused: %s", f->name, why);
            return CUDA_ERROR_INVALID_VALUE;
        }
        work->collective = true;
    }
    return CUDA_SUCCESS;
}

static CUresult launch(const char *call, enum fc_null_stream null_means, CUfunction hfunc, unsigned gx,
                       unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, CUstream hstream,
                       void **params, void **extra)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_stream *stream;
    rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    const struct fc_function *f = NULL;
    if (rc == CUDA_SUCCESS && !(f = fc_handle_use(call, FC_H_FUNCTION, (uint64_t)(uintptr_t)hfunc)))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (rc == CUDA_SUCCESS && (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
                                    (uint64_t)bx * by * bz > 1024 || (params && extra)))
        rc = CUDA_ERROR_INVALID_VALUE;
    struct fc_work work = {.kind = FC_WORK_KERNEL};
    if (rc == CUDA_SUCCESS)
        rc = fc_kernel_work(f, params, extra, &work);
    if (rc == CUDA_SUCCESS)
        rc = fc_stream_submit_locked(call, stream, &work);
    fc_exec_unlock();
    return rc;
}

CUresult fc_launch_kernel(const char *call, enum fc_null_stream null_means, CUfunction f, unsigned int gx,
                          unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                          CUstream s, void **params, void **extra)
{
    return launch(call, null_means, f, gx, gy, gz, bx, by, bz, s, params, extra);
}

CUresult fc_launch_kernel_ex(const char *call, enum fc_null_stream null_means, const CUlaunchConfig *config,
                             CUfunction f, void **params, void **extra)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(call, null_means, f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->hStream, params, extra);
}

FC_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                               CUstream s, void **params, void **extra)
{
    (void)shmem;
    return launch(__func__, FC_NULL_LEGACY, f, gx, gy, gz, bx, by, bz, s, params, extra);
}

FC_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return fc_launch_kernel_ex(__func__, FC_NULL_LEGACY, config, f, params, extra);
}

FC_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                          unsigned int bx, unsigned int by, unsigned int bz,
                                          unsigned int shmem, CUstream s, void **params)
{
    (void)shmem;
    return launch(__func__, FC_NULL_LEGACY, f, gx, gy, gz, bx, by, bz, s, params, NULL);
}

FC_API CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int ndevices,
                                                     unsigned int flags)
{
    (void)flags;
    if (!list || ndevices == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < ndevices; i++) {
        CUDA_LAUNCH_PARAMS *p = &list[i];
        CUresult rc = launch(__func__, FC_NULL_LEGACY, p->function, p->gridDimX, p->gridDimY, p->gridDimZ,
                             p->blockDimX, p->blockDimY, p->blockDimZ, p->hStream, p->kernelParams, NULL);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

/* The pre-4.0 launch API: block shape and parameters were set beforehand;
 * fakecuda keeps none of that and runs the default-length kernel. */
FC_API CUresult cuLaunch(CUfunction f) { return launch(__func__, FC_NULL_LEGACY, f, 1, 1, 1, 1, 1, 1, NULL, NULL, NULL); }

FC_API CUresult cuLaunchGrid(CUfunction f, int w, int h)
{
    if (w <= 0 || h <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(__func__, FC_NULL_LEGACY, f, (unsigned)w, (unsigned)h, 1, 1, 1, 1, NULL, NULL, NULL);
}

FC_API CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s)
{
    if (w <= 0 || h <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(__func__, FC_NULL_LEGACY, f, (unsigned)w, (unsigned)h, 1, 1, 1, 1, s, NULL, NULL);
}
