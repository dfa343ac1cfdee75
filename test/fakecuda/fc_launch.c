/*
 * fakecuda modules and launches: any image loads, any name resolves to a
 * function, and a launch queues a kernel whose device time is known:
 *   - a kernel whose name starts with "spin" runs for the nanoseconds in
 *     its first parameter (a uint64_t);
 *   - any other runs for FAKECUDA_KERNEL_NS (default 5000).
 * Also the minimal graph API: kernel nodes, instantiate, launch.
 */
#include "fc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fc_module {
    uint64_t handle;
};

struct graph_kernel {
    uint64_t ns;
};

struct fc_graph {
    uint64_t handle;
    struct graph_kernel *kernels;
    size_t count, cap;
};

/* ---- modules and libraries --------------------------------------------- */

static CUresult module_new(enum fc_handle_type type, uint64_t *out)
{
    CUresult rc;
    if (type == FC_H_MODULE && !fc_current_ctx(&rc))
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
    struct fc_module *m = fc_handle_get(FC_H_MODULE, (uint64_t)(uintptr_t)hmod);
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
    struct fc_module *m = fc_handle_get(FC_H_LIBRARY, (uint64_t)(uintptr_t)library);
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
    f->is_spin = strncmp(name, "spin", 4) == 0;
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
    if (!fc_handle_get(FC_H_MODULE, (uint64_t)(uintptr_t)hmod))
        return CUDA_ERROR_INVALID_HANDLE;
    return function_new(name, (uint64_t *)hfunc);
}

FC_API CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!fc_handle_get(FC_H_LIBRARY, (uint64_t)(uintptr_t)library))
        return CUDA_ERROR_INVALID_HANDLE;
    return function_new(name, (uint64_t *)kernel);
}

/* ---- launches ----------------------------------------------------------- */

/* Device time of one launch of f with these arguments. */
static uint64_t kernel_ns(const struct fc_function *f, void **params, void **extra)
{
    if (!f->is_spin)
        return fc_kernel_default_ns();
    uint64_t ns = 0;
    if (params && params[0]) {
        memcpy(&ns, params[0], sizeof ns);
    } else if (extra) {
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2)
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1])
                memcpy(&ns, extra[i + 1], sizeof ns);
    }
    return ns;
}

static CUresult launch(CUfunction hfunc, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, CUstream hstream, void **params, void **extra)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_stream *stream;
    if ((rc = fc_resolve_stream(hstream, &stream)) != CUDA_SUCCESS)
        return rc;
    struct fc_function *f = fc_handle_get(FC_H_FUNCTION, (uint64_t)(uintptr_t)hfunc);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
        (uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op op = {.kind = FC_OP_KERNEL, .ns = kernel_ns(f, params, extra)};
    return fc_submit(stream, &op);
}

FC_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                               CUstream s, void **params, void **extra)
{
    (void)shmem;
    return launch(f, gx, gy, gz, bx, by, bz, s, params, extra);
}

FC_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->hStream, params, extra);
}

FC_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                          unsigned int bx, unsigned int by, unsigned int bz,
                                          unsigned int shmem, CUstream s, void **params)
{
    (void)shmem;
    return launch(f, gx, gy, gz, bx, by, bz, s, params, NULL);
}

FC_API CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int ndevices,
                                                     unsigned int flags)
{
    (void)flags;
    if (!list || ndevices == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < ndevices; i++) {
        CUDA_LAUNCH_PARAMS *p = &list[i];
        CUresult rc = launch(p->function, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX,
                             p->blockDimY, p->blockDimZ, p->hStream, p->kernelParams, NULL);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

/* The pre-4.0 launch API: block shape and parameters were set beforehand;
 * fakecuda keeps none of that and runs the default-length kernel. */
FC_API CUresult cuLaunch(CUfunction f) { return launch(f, 1, 1, 1, 1, 1, 1, NULL, NULL, NULL); }

FC_API CUresult cuLaunchGrid(CUfunction f, int w, int h)
{
    if (w <= 0 || h <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, (unsigned)w, (unsigned)h, 1, 1, 1, 1, NULL, NULL, NULL);
}

FC_API CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s)
{
    if (w <= 0 || h <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, (unsigned)w, (unsigned)h, 1, 1, 1, 1, s, NULL, NULL);
}

/* ---- graphs ------------------------------------------------------------- */

FC_API CUresult cuGraphCreate(CUgraph *phgraph, unsigned int flags)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phgraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_graph *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->handle = fc_handle_new(FC_H_GRAPH, g);
    if (!g->handle) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phgraph = (CUgraph)(uintptr_t)g->handle;
    return CUDA_SUCCESS;
}

static CUresult graph_append(struct fc_graph *g, uint64_t ns)
{
    if (g->count == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        struct graph_kernel *grown = realloc(g->kernels, cap * sizeof *grown);
        if (!grown)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->kernels = grown;
        g->cap = cap;
    }
    g->kernels[g->count++].ns = ns;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph hgraph, const CUgraphNode *deps,
                                        size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *params)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_graph *g = fc_handle_get(FC_H_GRAPH, (uint64_t)(uintptr_t)hgraph);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!node || !params || (ndeps > 0 && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    CUfunction fn = params->func ? params->func : (CUfunction)params->kern;
    struct fc_function *f = fc_handle_get(FC_H_FUNCTION, (uint64_t)(uintptr_t)fn);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Nodes run in insertion order: a valid topological order whenever
     * dependencies only name earlier nodes, as they must. */
    if ((rc = graph_append(g, kernel_ns(f, params->kernelParams, params->extra))) != CUDA_SUCCESS)
        return rc;
    *node = (CUgraphNode)(uintptr_t)(((uint64_t)FC_H_GRAPH_NODE << 56) | g->count);
    return CUDA_SUCCESS;
}

FC_API CUresult cuGraphAddKernelNode(CUgraphNode *node, CUgraph hgraph, const CUgraphNode *deps,
                                     size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v1 *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS v2 = {
        .func = params->func, .kernelParams = params->kernelParams, .extra = params->extra,
    };
    return cuGraphAddKernelNode_v2(node, hgraph, deps, ndeps, &v2);
}

FC_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phexec, CUgraph hgraph, unsigned long long flags)
{
    (void)flags;
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_graph *g = fc_handle_get(FC_H_GRAPH, (uint64_t)(uintptr_t)hgraph);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!phexec)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_graph *exec = calloc(1, sizeof *exec);
    if (!exec)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < g->count && rc == CUDA_SUCCESS; i++)
        rc = graph_append(exec, g->kernels[i].ns);
    exec->handle = rc == CUDA_SUCCESS ? fc_handle_new(FC_H_GRAPH_EXEC, exec) : 0;
    if (!exec->handle) {
        free(exec->kernels);
        free(exec);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phexec = (CUgraphExec)(uintptr_t)exec->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGraphLaunch(CUgraphExec hexec, CUstream hstream)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_graph *exec = fc_handle_get(FC_H_GRAPH_EXEC, (uint64_t)(uintptr_t)hexec);
    if (!exec)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_stream *stream;
    if ((rc = fc_resolve_stream(hstream, &stream)) != CUDA_SUCCESS)
        return rc;
    for (size_t i = 0; i < exec->count && rc == CUDA_SUCCESS; i++) {
        struct fc_op op = {.kind = FC_OP_KERNEL, .ns = exec->kernels[i].ns};
        rc = fc_submit(stream, &op);
    }
    return rc;
}

static CUresult graph_destroy(enum fc_handle_type type, uint64_t handle)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    struct fc_graph *g = fc_handle_get(type, handle);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    fc_handle_free(type, handle);
    free(g->kernels);
    free(g);
    return CUDA_SUCCESS;
}

FC_API CUresult cuGraphExecDestroy(CUgraphExec hexec)
{
    return graph_destroy(FC_H_GRAPH_EXEC, (uint64_t)(uintptr_t)hexec);
}

FC_API CUresult cuGraphDestroy(CUgraph hgraph)
{
    return graph_destroy(FC_H_GRAPH, (uint64_t)(uintptr_t)hgraph);
}
