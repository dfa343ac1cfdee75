/*
 * Graph launches (gs_graph.c): a graph is admitted against its own
 * measured device time, not as one more kernel.
 */
#ifndef GPUSLICE_GRAPH_H
#define GPUSLICE_GRAPH_H

#include "gs_driver.h"

struct gs_ctx;
struct gs_dev;

/* Reads the timing events of d's finished graph launches and updates the
 * estimates (the drainer, after each round). */
void gs_graph_measure(struct gs_dev *d);
/* A context died: forget its measurements (gs_gate_lock held). */
void gs_graph_forget_ctx_locked(struct gs_ctx *ctx);
void gs_graph_after_fork_child(void);

#endif
