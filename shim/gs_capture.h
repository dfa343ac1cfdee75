/*
 * Stream capture, as the shim knows it (gs_capture.c). While a stream
 * captures a graph, work pushed into it does not run: the gate neither
 * admits nor counts it, and nothing the shim does may invalidate the
 * capture. The graph's later launches are gated like any other launch
 * (gs_graph.c). The wrappers of the capture calls are gs_streams.c's.
 */
#ifndef GPUSLICE_CAPTURE_H
#define GPUSLICE_CAPTURE_H

#include "gs_driver.h"

#include <stdatomic.h>
#include <stdbool.h>

/* Capture sequences begun through the shim and not yet ended. Zero almost
 * always: the fast path then needs no driver call to know a launch runs. */
extern _Atomic int gs_captures_active;

/* Whether work pushed into `stream` now would be captured (or refused as
 * an implicit use of the legacy stream during a capture). Asks the driver
 * only while a capture is under way. */
bool gs_capture_stream_is_capturing(CUstream stream, int ptsz);

/* Same question for a shim thread about to record an event into a stream
 * of its own current context (CU_STREAM_LEGACY, or a created stream);
 * asked with the capture lock held (gs_locks.h), which keeps a capture
 * from beginning before the record. */
bool gs_capture_unrecordable(CUstream stream);

/* Sets the calling shim thread's capture interaction mode to relaxed, so
 * that its own event waits never count against an application's global
 * capture (cuThreadExchangeStreamCaptureMode). Returns the previous mode. */
CUstreamCaptureMode gs_capture_relax_thread(void);
void gs_capture_restore_thread(CUstreamCaptureMode mode);

/* The capture's bookkeeping, with the capture lock held: one begins (the
 * count goes up before the real call, so that no launch meanwhile takes
 * the fast path), its real call returned rc, one may have ended. Returns
 * whether a capture began (or ended). */
void gs_capture_beginning_locked(void);
bool gs_capture_began_locked(CUstream stream, int ptsz, CUresult rc);
bool gs_capture_ended_locked(CUstream stream, int ptsz);

void gs_capture_after_fork_child(void);

#endif
