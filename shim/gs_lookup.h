/*
 * Which GPU a call concerns (gs_lookup.c): a launch's stream gives its
 * context (a created stream's own, or for the default streams the calling
 * thread's current one), the context its device ordinal, the ordinal its
 * UUID, and the UUID the process's entry in gs_devs, made on first use
 * (its drainer and the gate thread started, its slice machine told).
 */
#ifndef GPUSLICE_LOOKUP_H
#define GPUSLICE_LOOKUP_H

#include "gs_dev.h"

/* The GPU of the stream a call names (ptsz: a _ptsz variant). */
CUresult gs_lookup_stream(CUstream stream, int ptsz, struct gs_launch_target *t);
/* The GPU of the calling thread's current context (cached per thread until
 * gs_lookup_forget_current), or of a device by ordinal. */
CUresult gs_lookup_current(struct gs_dev **out);
CUresult gs_lookup_ordinal(CUdevice ordinal, struct gs_dev **out);
/* The calling thread's cached current GPU, NULL if none is known (no
 * lookup made). */
struct gs_dev *gs_lookup_current_known(void);
/* The GPU a synchronization on `stream` concerns, for a thread that has
 * not launched into it: the GPU of the stream's context (any_stream, or a
 * default stream: the calling thread's current context), if the process
 * has one for it already; NULL otherwise. Makes no entry and caches
 * nothing: one driver call and the gate lock. */
struct gs_dev *gs_lookup_known(bool any_stream, CUstream stream);
/* The calling thread's current context may have changed. */
void gs_lookup_forget_current(void);

#endif
