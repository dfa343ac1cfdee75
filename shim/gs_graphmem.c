/*
 * Graph allocation nodes: memory a CUDA graph allocates at its first
 * launch and keeps (and the device keeps cached for graphs after the
 * graph is destroyed) until cuDeviceGraphMemTrim.
 *
 * The shim learns what a graph allocates when it is captured: a
 * cuMemAllocAsync into a capturing stream is an allocation node of the
 * graph being captured (cuStreamGetCaptureInfo_v2 names it). An executable
 * graph instantiated from it inherits the sum. Before its first launch that
 * sum is reserved against the cap, so a launch whose nodes would take the
 * tenant past its cap fails with CUDA_ERROR_OUT_OF_MEMORY before the driver
 * allocates; after it, the count per device is settled to what the driver
 * reports the device's graph memory holds (CU_GRAPH_MEM_ATTR_
 * RESERVED_MEM_CURRENT), and again after cuDeviceGraphMemTrim.
 * Allocation nodes added with cuGraphAddMemAllocNode are not seen.
 *
 * A first launch reserves before the launch and settles after it, without
 * the graphs lock in between (the reservation may ask the server, the
 * launch may wait for admission); an executable graph whose first launch
 * is under way reserves nothing for another launch meanwhile (what that
 * one adds, the settling finds in the device's graph memory).
 *
 * This file owns `graphs`, `execs` and `counted`, all guarded by the
 * graphs lock (gs_locks.h).
 */
#include "gs_graphmem.h"
#include "gs_lease.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_lookup.h"
#include "gs_reserve.h"

#include <stdlib.h>

struct sized { uint64_t key, bytes; bool launched, launching; };

static struct sized *graphs, *execs;  /* by CUgraph, by CUgraphExec */
static size_t ngraphs, nexecs, graphs_cap, execs_cap;
static uint64_t counted[GS_MAX_DEVICES]; /* graph memory counted per device slot */

static struct sized *find_locked(struct sized *v, size_t n, uint64_t key)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].key == key)
            return &v[i];
    return NULL;
}

static struct sized *find_or_add_locked(struct sized **v, size_t *n, size_t *cap, uint64_t key)
{
    struct sized *e = find_locked(*v, *n, key);
    if (e)
        return e;
    if (*n == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 64;
        struct sized *grown = realloc(*v, grown_cap * sizeof *grown);
        if (!grown)
            return NULL;
        *v = grown;
        *cap = grown_cap;
    }
    (*v)[*n] = (struct sized){key, 0, false, false};
    return &(*v)[(*n)++];
}

/* The graph a stream is capturing into, or NULL. */
static CUgraph capturing_graph(CUstream stream, int ptsz)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph graph = NULL;
    if (!GS_REAL(cuStreamGetCaptureInfo_v2) || !GS_REAL(cuStreamGetCaptureInfo_v2_ptsz))
        return NULL; /* a driver older than graphs that allocate */
    CUresult rc = ptsz ? GS_REAL(cuStreamGetCaptureInfo_v2_ptsz)(stream, &status, NULL, &graph, NULL, NULL)
                       : GS_REAL(cuStreamGetCaptureInfo_v2)(stream, &status, NULL, &graph, NULL, NULL);
    return rc == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? graph : NULL;
}

void gs_graphmem_capture_began(CUstream stream, int ptsz)
{
    /* A capture that makes its own graph starts from nothing: a destroyed
     * graph's handle, which the driver may give out again, must not lend
     * it the old graph's allocations. */
    CUgraph graph = capturing_graph(stream, ptsz);
    if (!graph)
        return;
    gs_lock(GS_LOCK_GRAPHS);
    struct sized *g = find_locked(graphs, ngraphs, (uint64_t)(uintptr_t)graph);
    if (g)
        g->bytes = 0;
    gs_unlock(GS_LOCK_GRAPHS);
}

bool gs_graphmem_captured(CUstream stream, int ptsz, uint64_t bytes)
{
    CUgraph graph = capturing_graph(stream, ptsz);
    if (!graph)
        return false;
    gs_lock(GS_LOCK_GRAPHS);
    struct sized *g = find_or_add_locked(&graphs, &ngraphs, &graphs_cap, (uint64_t)(uintptr_t)graph);
    if (g)
        g->bytes += bytes;
    gs_unlock(GS_LOCK_GRAPHS);
    if (!g)
        gs_log(GS_LOG_ERROR, "out of memory for the graph table: a graph's %llu bytes go uncounted",
               (unsigned long long)bytes);
    return true;
}

/* An executable graph was made from graph: it allocates what graph does. */
static void instantiated(CUresult rc, CUgraphExec *exec, CUgraph graph)
{
    if (rc != CUDA_SUCCESS || !exec)
        return;
    gs_lock(GS_LOCK_GRAPHS);
    struct sized *g = find_locked(graphs, ngraphs, (uint64_t)(uintptr_t)graph);
    struct sized *e = find_or_add_locked(&execs, &nexecs, &execs_cap, (uint64_t)(uintptr_t)*exec);
    if (e) { /* a handle the driver hands out again is a new graph */
        e->bytes = g ? g->bytes : 0;
        e->launched = e->launching = false;
    }
    gs_unlock(GS_LOCK_GRAPHS);
}

GS_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    GS_PROLOGUE(cuGraphInstantiateWithFlags);
    CUresult rc = GS_REAL(cuGraphInstantiateWithFlags)(exec, graph, flags);
    instantiated(rc, exec, graph);
    return rc;
}

GS_EXPORT CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, CUgraphNode *err, char *log, size_t size)
{
    GS_PROLOGUE(cuGraphInstantiate);
    CUresult rc = GS_REAL(cuGraphInstantiate)(exec, graph, err, log, size);
    instantiated(rc, exec, graph);
    return rc;
}

GS_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *err, char *log, size_t size)
{
    GS_PROLOGUE(cuGraphInstantiate_v2);
    CUresult rc = GS_REAL(cuGraphInstantiate_v2)(exec, graph, err, log, size);
    instantiated(rc, exec, graph);
    return rc;
}

GS_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    GS_PROLOGUE(cuGraphInstantiateWithParams);
    CUresult rc = GS_REAL(cuGraphInstantiateWithParams)(exec, graph, params);
    instantiated(rc, exec, graph);
    return rc;
}

GS_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph graph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    GS_PROLOGUE(cuGraphInstantiateWithParams_ptsz);
    CUresult rc = GS_REAL(cuGraphInstantiateWithParams_ptsz)(exec, graph, params);
    instantiated(rc, exec, graph);
    return rc;
}

/* What the device's graph memory holds now, or `fallback`. */
static uint64_t reserved_on(const struct gs_dev *d, uint64_t fallback)
{
    cuuint64_t value;
    if (!GS_REAL(cuDeviceGetGraphMemAttribute) ||
        GS_REAL(cuDeviceGetGraphMemAttribute)(d->ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &value) != CUDA_SUCCESS)
        return fallback;
    return value;
}

CUresult gs_graphmem_before_launch(CUgraphExec exec, CUstream stream, int ptsz, struct gs_graph_launch *l)
{
    *l = (struct gs_graph_launch){0};
    gs_lock(GS_LOCK_GRAPHS);
    struct sized *e = find_locked(execs, nexecs, (uint64_t)(uintptr_t)exec);
    bool first = e && !e->launched && !e->launching && e->bytes > 0;
    uint64_t bytes = first ? e->bytes : 0;
    if (first)
        e->launching = true;
    gs_unlock(GS_LOCK_GRAPHS);
    if (!first)
        return CUDA_SUCCESS;
    struct gs_launch_target t;
    bool known = gs_lookup_stream(stream, ptsz, &t) == CUDA_SUCCESS; /* else the driver answers the launch */
    CUresult rc = known ? gs_reserve(t.dev, bytes, "a graph launch's memory nodes", bytes) : CUDA_SUCCESS;
    if (known && rc == CUDA_SUCCESS) {
        l->dev = t.dev;
        l->reserved = bytes;
        return CUDA_SUCCESS;
    }
    gs_lock(GS_LOCK_GRAPHS);
    if ((e = find_locked(execs, nexecs, (uint64_t)(uintptr_t)exec)))
        e->launching = false;
    gs_unlock(GS_LOCK_GRAPHS);
    return rc;
}

void gs_graphmem_after_launch(CUgraphExec exec, const struct gs_graph_launch *l, CUresult rc)
{
    if (!l->dev)
        return;
    struct gs_dev *d = l->dev;
    gs_lock(GS_LOCK_GRAPHS);
    struct sized *e = find_locked(execs, nexecs, (uint64_t)(uintptr_t)exec);
    if (e) {
        e->launching = false;
        e->launched |= rc == CUDA_SUCCESS;
    }
    uint64_t now = reserved_on(d, counted[d->slot] + (rc == CUDA_SUCCESS ? l->reserved : 0));
    uint64_t growth = now > counted[d->slot] ? now - counted[d->slot] : 0;
    uint64_t shrink = now < counted[d->slot] ? counted[d->slot] - now : 0;
    if (growth <= l->reserved)
        gs_lease_give(d, l->reserved - growth + shrink);
    else
        gs_lease_take_anyway(d, growth - l->reserved);
    counted[d->slot] = now;
    gs_unlock(GS_LOCK_GRAPHS);
}

GS_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    GS_PROLOGUE(cuDeviceGraphMemTrim);
    CUresult rc = GS_REAL(cuDeviceGraphMemTrim)(device);
    struct gs_dev *d;
    if (rc != CUDA_SUCCESS || gs_lookup_ordinal(device, &d) != CUDA_SUCCESS)
        return rc;
    gs_lock(GS_LOCK_GRAPHS);
    uint64_t now = reserved_on(d, counted[d->slot]);
    if (now < counted[d->slot])
        gs_lease_give(d, counted[d->slot] - now);
    else if (now > counted[d->slot])
        gs_lease_take_anyway(d, now - counted[d->slot]);
    counted[d->slot] = now;
    gs_unlock(GS_LOCK_GRAPHS);
    return rc;
}

void gs_graphmem_after_fork_child(void)
{
    /* The child has none of the parent's graphs. */
    ngraphs = nexecs = 0;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        counted[i] = 0;
}
