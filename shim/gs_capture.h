/*
 * Stream capture (gs_capture.c). While a stream captures a graph, work
 * pushed into it does not run: the gate neither admits nor counts it, and
 * nothing the shim does may invalidate the capture. The graph's later
 * launches are gated like any other launch (gs_graph.c).
 */
#ifndef GPUSLICE_CAPTURE_H
#define GPUSLICE_CAPTURE_H

#include "gs_driver.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Capture sequences begun through the shim and not yet ended. Zero almost
 * always: the fast path then needs no driver call to know a launch runs. */
extern _Atomic int gs_captures_active;

/* Serialises what must not interleave with a capture beginning or a
 * stream being destroyed: a shim thread checking that a stream is not
 * capturing and recording an event into it. Taken before gs_gate_lock,
 * never while holding it. */
extern pthread_mutex_t gs_capture_lock;

/* Whether work pushed into `stream` now would be captured (or refused as
 * an implicit use of the legacy stream during a capture). Asks the driver
 * only while a capture is under way. */
bool gs_capture_stream_is_capturing(CUstream stream, int ptsz);

/* Same question for the drainer, about a stream in its own current
 * context: CU_STREAM_LEGACY, or a created stream. */
bool gs_capture_unrecordable(CUstream stream);

/* Sets the calling shim thread's capture interaction mode to relaxed, so
 * that its own event waits never count against an application's global
 * capture (cuThreadExchangeStreamCaptureMode). Returns the previous mode. */
CUstreamCaptureMode gs_capture_relax_thread(void);
void gs_capture_restore_thread(CUstreamCaptureMode mode);

void gs_capture_after_fork_child(void);

#endif
