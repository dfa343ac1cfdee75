/*
 * fakecuda graphs: a graph is a list of nodes (kernels, copies, memsets,
 * external event records and waits) built by cuGraphAddKernelNode or by
 * stream capture; cuGraphInstantiate* copies it into an executable graph
 * and cuGraphLaunch queues its nodes on a stream, where each takes its
 * device time like the launch it was captured from. Nodes run in insertion
 * order: a valid topological order whenever dependencies only name earlier
 * nodes, as they must. Graphs are guarded by the exec lock.
 */
#include "fc_internal.h"

#include <stdlib.h>
#include <string.h>

struct fc_graph *fc_graph_new_locked(void)
{
    struct fc_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->handle = fc_handle_new(FC_H_GRAPH, g);
    if (!g->handle) {
        free(g);
        return NULL;
    }
    return g;
}

void fc_graph_free_locked(struct fc_graph *g)
{
    fc_handle_free(FC_H_GRAPH, g->handle);
    free(g->nodes);
    free(g);
}

CUresult fc_graph_append_locked(struct fc_graph *g, const struct fc_work *work, size_t *index)
{
    if (g->count == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 8;
        struct fc_work *grown = realloc(g->nodes, cap * sizeof *grown);
        if (!grown)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = grown;
        g->cap = cap;
    }
    g->nodes[g->count] = *work;
    if (index)
        *index = g->count;
    g->count++;
    return CUDA_SUCCESS;
}

CUgraphNode fc_graph_node_handle(const struct fc_graph *g, size_t index)
{
    (void)g;
    return (CUgraphNode)(uintptr_t)(((uint64_t)FC_H_GRAPH_NODE << 56) | (index + 1));
}

FC_API CUresult cuGraphCreate(CUgraph *phgraph, unsigned int flags)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phgraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_graph *g = fc_graph_new_locked();
    fc_exec_unlock();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phgraph = (CUgraph)(uintptr_t)g->handle;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *node, CUgraph hgraph, const CUgraphNode *deps,
                                        size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *params)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!node || !params || (ndeps > 0 && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    CUfunction fn = params->func ? params->func : (CUfunction)params->kern;
    const struct fc_function *f = fc_handle_use(__func__, FC_H_FUNCTION, (uint64_t)(uintptr_t)fn);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_work work = {.kind = FC_WORK_KERNEL};
    rc = fc_kernel_work(f, params->kernelParams, params->extra, &work);
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_graph *g = fc_handle_use(__func__, FC_H_GRAPH, (uint64_t)(uintptr_t)hgraph);
    size_t index = 0;
    rc = g ? fc_graph_append_locked(g, &work, &index) : CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS)
        *node = fc_graph_node_handle(g, index);
    fc_exec_unlock();
    return rc;
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

/* ---- instantiation ------------------------------------------------------ */

static CUresult instantiate(const char *call, CUgraphExec *phexec, CUgraph hgraph)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!phexec)
        return CUDA_ERROR_INVALID_VALUE;
    fc_exec_lock();
    struct fc_graph *g = fc_handle_use(call, FC_H_GRAPH, (uint64_t)(uintptr_t)hgraph);
    struct fc_graph *exec = NULL;
    if (!g)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (g->capturing)
        rc = CUDA_ERROR_INVALID_VALUE; /* not instantiable before cuStreamEndCapture */
    else if (!(exec = calloc(1, sizeof *exec)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < g->count; i++) {
        rc = fc_graph_append_locked(exec, &g->nodes[i], NULL);
        if (g->nodes[i].kind == FC_WORK_MEMALLOC)
            exec->mem_bytes += g->nodes[i].bytes;
    }
    if (rc == CUDA_SUCCESS && !(exec->handle = fc_handle_new(FC_H_GRAPH_EXEC, exec)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS && exec) {
        free(exec->nodes);
        free(exec);
    } else if (rc == CUDA_SUCCESS) {
        *phexec = (CUgraphExec)(uintptr_t)exec->handle;
    }
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phexec, CUgraph hgraph, unsigned long long flags)
{
    (void)flags;
    return instantiate(__func__, phexec, hgraph);
}

FC_API CUresult cuGraphInstantiate(CUgraphExec *phexec, CUgraph hgraph, CUgraphNode *err_node, char *log,
                                   size_t log_size)
{
    if (err_node)
        *err_node = NULL;
    if (log && log_size > 0)
        log[0] = '\0';
    return instantiate(__func__, phexec, hgraph);
}

FC_API CUresult cuGraphInstantiate_v2(CUgraphExec *phexec, CUgraph hgraph, CUgraphNode *err_node, char *log,
                                      size_t log_size)
{
    return cuGraphInstantiate(phexec, hgraph, err_node, log, log_size);
}

static CUresult instantiate_with_params(const char *call, CUgraphExec *phexec, CUgraph hgraph,
                                        CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = instantiate(call, phexec, hgraph);
    params->hErrNode_out = NULL;
    params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

FC_API CUresult cuGraphInstantiateWithParams(CUgraphExec *phexec, CUgraph hgraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    return instantiate_with_params(__func__, phexec, hgraph, params);
}

FC_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phexec, CUgraph hgraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    return instantiate_with_params(__func__, phexec, hgraph, params);
}

/* ---- launch ------------------------------------------------------------- */

/* Queues one node of an executable graph on a stream that is not
 * capturing. */
static CUresult launch_node_locked(struct fc_stream *stream, const struct fc_work *node)
{
    if (node->kind == FC_WORK_RECORD || node->kind == FC_WORK_WAIT) {
        /* External event nodes: a destroyed event leaves nothing to do
         * (the application named it at capture, not now). */
        struct fc_event *event = fc_handle_get(FC_H_EVENT, node->event);
        if (!event)
            return CUDA_SUCCESS;
        if (node->kind == FC_WORK_WAIT)
            return fc_enqueue_locked(stream, node, event->fence, NULL);
        struct fc_fence *fence = NULL;
        CUresult rc = fc_enqueue_locked(stream, node, NULL, &fence);
        if (rc == CUDA_SUCCESS) {
            fc_fence_unref(event->fence);
            event->fence = fence;
            event->capture_id = 0;
        }
        return rc;
    }
    if (node->kind == FC_WORK_MEMALLOC)
        return CUDA_SUCCESS; /* taken at the first launch (fc_graph_launch) */
    /* Memory freed since the capture is not touched. */
    size_t bytes = node->kind == FC_WORK_SET ? node->bytes * node->elem_size : node->bytes;
    if ((node->dst_device && !fc_mem_range_valid((CUdeviceptr)(uintptr_t)node->dst, bytes)) ||
        (node->src_device && !fc_mem_range_valid((CUdeviceptr)(uintptr_t)node->src, bytes)))
        return CUDA_ERROR_INVALID_VALUE;
    return fc_enqueue_locked(stream, node, NULL, NULL);
}

CUresult fc_graph_launch(const char *call, CUgraphExec hexec, CUstream hstream, enum fc_null_stream null_means)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_graph *exec = fc_handle_use(call, FC_H_GRAPH_EXEC, (uint64_t)(uintptr_t)hexec);
    struct fc_stream *stream = NULL;
    if (!exec)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = fc_resolve_stream_locked(call, hstream, null_means, &stream);
    if (rc == CUDA_SUCCESS)
        rc = fc_capture_check_legacy_locked(call, stream);
    /* The first launch takes the allocation nodes' memory ("cuGraphLaunch":
     * CUDA_ERROR_OUT_OF_MEMORY when it cannot). */
    if (rc == CUDA_SUCCESS && !stream->capture && exec->mem_bytes && !exec->mem_backed &&
        (rc = fc_graphmem_back(stream->ctx->device, exec->mem_bytes)) == CUDA_SUCCESS) {
        exec->mem_backed = true;
        exec->mem_device = stream->ctx->device;
    }
    for (size_t i = 0; rc == CUDA_SUCCESS && i < exec->count; i++) {
        if (stream->capture) /* launched into a capture: its nodes are captured */
            rc = fc_stream_submit_locked(call, stream, &exec->nodes[i]);
        else
            rc = launch_node_locked(stream, &exec->nodes[i]);
    }
    fc_exec_unlock();
    return rc;
}

FC_API CUresult cuGraphLaunch(CUgraphExec hexec, CUstream hstream)
{
    return fc_graph_launch(__func__, hexec, hstream, FC_NULL_LEGACY);
}

/* ---- destruction -------------------------------------------------------- */

FC_API CUresult cuGraphExecDestroy(CUgraphExec hexec)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_graph *exec = fc_handle_use(__func__, FC_H_GRAPH_EXEC, (uint64_t)(uintptr_t)hexec);
    if (exec) {
        fc_handle_free(FC_H_GRAPH_EXEC, exec->handle);
        if (exec->mem_backed)
            fc_graphmem_unback(exec->mem_device, exec->mem_bytes);
        free(exec->nodes);
        free(exec);
    }
    fc_exec_unlock();
    return exec ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FC_API CUresult cuGraphDestroy(CUgraph hgraph)
{
    CUresult rc = fc_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    fc_exec_lock();
    struct fc_graph *g = fc_handle_use(__func__, FC_H_GRAPH, (uint64_t)(uintptr_t)hgraph);
    if (!g || g->capturing)
        rc = CUDA_ERROR_INVALID_VALUE; /* a graph being captured into cannot be destroyed */
    else
        fc_graph_free_locked(g);
    fc_exec_unlock();
    return rc;
}
