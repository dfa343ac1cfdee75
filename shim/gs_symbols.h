/*
 * Symbol lookups (gs_symbols.c): which names the shim wraps, and with
 * what; the lookups (dlsym in gs_dlsym.c, cuGetProcAddress in gs_symbols.c)
 * hand out these wrappers in place of the real library's functions.
 */
#ifndef GPUSLICE_SYMBOLS_H
#define GPUSLICE_SYMBOLS_H

#include "gs_driver.h"

/* The shim's wrapper of driver entry `index` (GS_IDX_*), NULL for an entry
 * the shim only calls. */
gs_entry gs_symbols_driver_wrapper(int index);
/* Whether `name` is one of the driver's exact symbols the shim wraps. */
bool gs_symbols_driver_wrapped(const char *name);

/* dlsym of an NVML name that found `found`: the shim's wrapper if the
 * name is one it wraps (whatever was found), else `found`. */
void *gs_symbols_nvml_lookup(const char *name, void *found);
bool gs_symbols_nvml_wrapped(const char *name);

#endif
