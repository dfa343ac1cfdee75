/*
 * What each executable graph costs on the device (gs_graphcost.c): its
 * measured device time, which a graph launch is admitted against (the
 * slice machine's GS_SLICE_LAUNCH, graph), and the measurements in flight,
 * which the drainer reads after each round. Guarded by the gate lock.
 */
#ifndef GPUSLICE_GRAPHCOST_H
#define GPUSLICE_GRAPHCOST_H

#include "gs_dev.h"

struct gs_ctx;

/* exec's estimated device time (0: not measured yet), its entry made on
 * first sight. */
uint64_t gs_graphcost_estimate_locked(CUgraphExec exec);
/* A launch of exec is admitted: whether to measure it (its first launches
 * and every 32nd after, while there is room); if so a use of ctx is taken,
 * given back by gs_graphcost_measured. */
bool gs_graphcost_launching_locked(CUgraphExec exec, struct gs_ctx *ctx);
/* The measured launch's events (start, end recorded around it on d's
 * stream; NULL if they could not be): kept for the drainer, or handed
 * back to ctx's pool. Takes the gate lock; gives the use of ctx back. */
void gs_graphcost_measured(struct gs_dev *d, struct gs_ctx *ctx, CUgraphExec exec, CUevent start, CUevent end);
/* exec was destroyed. */
void gs_graphcost_forget_exec_locked(CUgraphExec exec);
/* Reads the timing events of d's finished graph launches and updates the
 * estimates (the drainer, after each round; no lock held). */
void gs_graphcost_measure(struct gs_dev *d);
/* A context died: forget its measurements (gate lock held). */
void gs_graphcost_forget_ctx_locked(struct gs_ctx *ctx);
void gs_graphcost_after_fork_child(void);

#endif
