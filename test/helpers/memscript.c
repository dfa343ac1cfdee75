/*
 * memscript: a test helper that makes the device memory calls a test names,
 * one per line of standard input, and answers each with one line:
 * "rc=NAME" and, for some, "key=value" pairs. Objects are numbered by the
 * test (0 to 255 per kind). Commands:
 *
 *   init                      cuInit, retain device 0's primary context, make it current
 *   alloc ID BYTES            cuMemAlloc_v2          managed ID BYTES   cuMemAllocManaged
 *   pitch ID WIDTH HEIGHT     cuMemAllocPitch_v2     free ID            cuMemFree_v2
 *   pool ID THRESHOLD         cuMemPoolCreate on device 0 with that release threshold ("max": UINT64_MAX)
 *   default_threshold T       the default pool's release threshold
 *   pool_destroy ID           trim ID KEEP           cuMemPoolTrimTo
 *   reserved ID               the pool's RESERVED_MEM_CURRENT (-1: the default pool)
 *   async ID BYTES POOL       cuMemAllocAsync (POOL -1) or cuMemAllocFromPoolAsync, legacy stream
 *   free_async ID             cuMemFreeAsync         sync               cuCtxSynchronize
 *   vmm ID BYTES              cuMemCreate            release ID         cuMemRelease
 *   map ID                    reserve an address range, cuMemMap and cuMemSetAccess
 *   unmap ID                  cuMemUnmap and cuMemAddressFree
 *   ctx ID                    cuCtxCreate_v2 (current afterwards)
 *   ctx_destroy ID            cuCtxDestroy_v2, then the primary context is made current
 *   reset                     cuDevicePrimaryCtxReset (then `init` again)
 *   graph ID BYTES            capture into a stream an allocation of BYTES and its free,
 *                             and instantiate the graph as executable graph ID
 *   launch ID                 cuGraphLaunch of executable graph ID, then cuStreamSynchronize
 *   exec_destroy ID           cuGraphExecDestroy   graph_trim    cuDeviceGraphMemTrim
 *   graph_reserved            CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT of device 0
 *   info                      cuMemGetInfo_v2: free=F total=T
 *   grab ID                   cuMemAlloc_v2 of all the free memory cuMemGetInfo_v2 reports
 *   quit
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 256

static CUdevice dev;
static CUcontext primary;
static CUdeviceptr ptrs[N];
static CUmemoryPool pools[N];
static CUmemGenericAllocationHandle handles[N];
static size_t handle_bytes[N];
static CUdeviceptr mapped_at[N];
static CUcontext ctxs[N];
static CUgraphExec execs[N];
static CUstream graph_stream;

static const char *name_of(CUresult rc)
{
    const char *name = NULL;
    return cuGetErrorName(rc, &name) == CUDA_SUCCESS && name ? name : "UNKNOWN";
}

static uint64_t bytes_arg(const char *s)
{
    return strcmp(s, "max") == 0 ? UINT64_MAX : strtoull(s, NULL, 0);
}

static CUresult map_handle(int id)
{
    CUdeviceptr va;
    CUresult rc = cuMemAddressReserve(&va, handle_bytes[id], 0, 0, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((rc = cuMemMap(va, handle_bytes[id], 0, handles[id], 0)) != CUDA_SUCCESS) {
        cuMemAddressFree(va, handle_bytes[id]);
        return rc;
    }
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if ((rc = cuMemSetAccess(va, handle_bytes[id], &access, 1)) != CUDA_SUCCESS)
        return rc;
    mapped_at[id] = va;
    return CUDA_SUCCESS;
}

int main(void)
{
    char line[256], cmd[32], a1[64], a2[64], a3[64];
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        a1[0] = a2[0] = a3[0] = 0;
        if (sscanf(line, "%31s %63s %63s %63s", cmd, a1, a2, a3) < 1)
            continue;
        int id = atoi(a1);
        if (id < 0 || id >= N)
            id = 0;
        CUresult rc = CUDA_SUCCESS;
        char extra[128] = "";
        if (strcmp(cmd, "quit") == 0) {
            break;
        } else if (strcmp(cmd, "init") == 0) {
            if ((rc = cuInit(0)) == CUDA_SUCCESS && (rc = cuDeviceGet(&dev, 0)) == CUDA_SUCCESS &&
                (rc = cuDevicePrimaryCtxRetain(&primary, dev)) == CUDA_SUCCESS)
                rc = cuCtxSetCurrent(primary);
        } else if (strcmp(cmd, "alloc") == 0) {
            rc = cuMemAlloc_v2(&ptrs[id], (size_t)bytes_arg(a2));
        } else if (strcmp(cmd, "managed") == 0) {
            rc = cuMemAllocManaged(&ptrs[id], (size_t)bytes_arg(a2), CU_MEM_ATTACH_GLOBAL);
        } else if (strcmp(cmd, "pitch") == 0) {
            size_t pitch = 0;
            rc = cuMemAllocPitch_v2(&ptrs[id], &pitch, (size_t)bytes_arg(a2), (size_t)bytes_arg(a3), 4);
            snprintf(extra, sizeof extra, " pitch=%zu", pitch);
        } else if (strcmp(cmd, "free") == 0) {
            rc = cuMemFree_v2(ptrs[id]);
        } else if (strcmp(cmd, "pool") == 0) {
            CUmemPoolProps props = {0};
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = 0;
            cuuint64_t threshold = bytes_arg(a2);
            if ((rc = cuMemPoolCreate(&pools[id], &props)) == CUDA_SUCCESS)
                rc = cuMemPoolSetAttribute(pools[id], CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
        } else if (strcmp(cmd, "default_threshold") == 0) {
            CUmemoryPool pool;
            cuuint64_t threshold = bytes_arg(a1);
            if ((rc = cuDeviceGetDefaultMemPool(&pool, dev)) == CUDA_SUCCESS)
                rc = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
        } else if (strcmp(cmd, "pool_destroy") == 0) {
            rc = cuMemPoolDestroy(pools[id]);
        } else if (strcmp(cmd, "trim") == 0) {
            CUmemoryPool pool = pools[id];
            if (atoi(a1) < 0)
                rc = cuDeviceGetDefaultMemPool(&pool, dev);
            if (rc == CUDA_SUCCESS)
                rc = cuMemPoolTrimTo(pool, (size_t)bytes_arg(a2));
        } else if (strcmp(cmd, "reserved") == 0) {
            CUmemoryPool pool = pools[id];
            cuuint64_t value = 0;
            if (atoi(a1) < 0)
                rc = cuDeviceGetDefaultMemPool(&pool, dev);
            if (rc == CUDA_SUCCESS)
                rc = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value);
            snprintf(extra, sizeof extra, " reserved=%" PRIu64, (uint64_t)value);
        } else if (strcmp(cmd, "async") == 0) {
            int pool = atoi(a3);
            rc = pool < 0 ? cuMemAllocAsync(&ptrs[id], (size_t)bytes_arg(a2), CU_STREAM_LEGACY)
                          : cuMemAllocFromPoolAsync(&ptrs[id], (size_t)bytes_arg(a2), pools[pool % N], CU_STREAM_LEGACY);
        } else if (strcmp(cmd, "free_async") == 0) {
            rc = cuMemFreeAsync(ptrs[id], CU_STREAM_LEGACY);
        } else if (strcmp(cmd, "sync") == 0) {
            rc = cuCtxSynchronize();
        } else if (strcmp(cmd, "vmm") == 0) {
            CUmemAllocationProp prop = {0};
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prop.location.id = 0;
            handle_bytes[id] = (size_t)bytes_arg(a2);
            rc = cuMemCreate(&handles[id], handle_bytes[id], &prop, 0);
        } else if (strcmp(cmd, "release") == 0) {
            rc = cuMemRelease(handles[id]);
        } else if (strcmp(cmd, "map") == 0) {
            rc = map_handle(id);
        } else if (strcmp(cmd, "unmap") == 0) {
            if ((rc = cuMemUnmap(mapped_at[id], handle_bytes[id])) == CUDA_SUCCESS)
                rc = cuMemAddressFree(mapped_at[id], handle_bytes[id]);
        } else if (strcmp(cmd, "ctx") == 0) {
            rc = cuCtxCreate_v2(&ctxs[id], 0, dev);
        } else if (strcmp(cmd, "ctx_destroy") == 0) {
            if ((rc = cuCtxDestroy_v2(ctxs[id])) == CUDA_SUCCESS)
                rc = cuCtxSetCurrent(primary);
        } else if (strcmp(cmd, "reset") == 0) {
            rc = cuDevicePrimaryCtxReset_v2(dev);
        } else if (strcmp(cmd, "graph") == 0) {
            CUdeviceptr p;
            CUgraph graph = NULL;
            if (!graph_stream)
                rc = cuStreamCreate(&graph_stream, CU_STREAM_NON_BLOCKING);
            if (rc == CUDA_SUCCESS)
                rc = cuStreamBeginCapture_v2(graph_stream, CU_STREAM_CAPTURE_MODE_RELAXED);
            if (rc == CUDA_SUCCESS) {
                CUresult alloc = cuMemAllocAsync(&p, (size_t)bytes_arg(a2), graph_stream);
                if (alloc == CUDA_SUCCESS)
                    alloc = cuMemFreeAsync(p, graph_stream);
                rc = cuStreamEndCapture(graph_stream, &graph);
                if (alloc != CUDA_SUCCESS)
                    rc = alloc;
            }
            if (rc == CUDA_SUCCESS)
                rc = cuGraphInstantiateWithFlags(&execs[id], graph, 0);
        } else if (strcmp(cmd, "launch") == 0) {
            if ((rc = cuGraphLaunch(execs[id], graph_stream)) == CUDA_SUCCESS)
                rc = cuStreamSynchronize(graph_stream);
        } else if (strcmp(cmd, "exec_destroy") == 0) {
            rc = cuGraphExecDestroy(execs[id]);
        } else if (strcmp(cmd, "graph_trim") == 0) {
            rc = cuDeviceGraphMemTrim(dev);
        } else if (strcmp(cmd, "graph_reserved") == 0) {
            cuuint64_t value = 0;
            rc = cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &value);
            snprintf(extra, sizeof extra, " reserved=%" PRIu64, (uint64_t)value);
        } else if (strcmp(cmd, "info") == 0 || strcmp(cmd, "grab") == 0) {
            size_t free_b = 0, total_b = 0;
            rc = cuMemGetInfo_v2(&free_b, &total_b);
            if (rc == CUDA_SUCCESS && cmd[0] == 'g')
                rc = cuMemAlloc_v2(&ptrs[id], free_b);
            snprintf(extra, sizeof extra, " free=%zu total=%zu", free_b, total_b);
        } else {
            printf("rc=UNKNOWN_COMMAND\n");
            continue;
        }
        printf("rc=%s%s\n", name_of(rc), extra);
    }
    return 0;
}
