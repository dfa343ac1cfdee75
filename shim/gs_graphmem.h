/*
 * Graph allocation nodes (gs_graphmem.c): memory a CUDA graph allocates at
 * its first launch, counted against the cap before the launch.
 */
#ifndef GPUSLICE_GRAPHMEM_H
#define GPUSLICE_GRAPHMEM_H

#include "gs_dev.h"

/* cuMemAllocAsync of bytes into stream: if the stream is capturing, the
 * bytes are the graph's (taken at its first launch) and it returns true. */
bool gs_graphmem_captured(CUstream stream, int ptsz, uint64_t bytes);
/* stream began capturing into a graph of its own (cuStreamBeginCapture):
 * that graph allocates nothing yet, whatever an old graph of the same
 * handle did. */
void gs_graphmem_capture_began(CUstream stream, int ptsz);
/* Around a graph launch: the first launch of an executable graph that
 * allocates reserves what it allocates (CUDA_ERROR_OUT_OF_MEMORY past the
 * cap), then counts what the device's graph memory holds. No lock is held
 * in between (the launch may wait for admission). */
struct gs_graph_launch {
    struct gs_dev *dev;      /* NULL: nothing reserved */
    uint64_t reserved;
};
CUresult gs_graphmem_before_launch(CUgraphExec exec, CUstream stream, int ptsz, struct gs_graph_launch *l);
void gs_graphmem_after_launch(CUgraphExec exec, const struct gs_graph_launch *l, CUresult rc);
void gs_graphmem_after_fork_child(void);

#endif
