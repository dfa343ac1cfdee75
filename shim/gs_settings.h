/*
 * Where the shim's settings come from (gs_settings.c): the environment,
 * read only through gs_getenv.
 */
#ifndef GPUSLICE_SETTINGS_H
#define GPUSLICE_SETTINGS_H

/* The variable's value, or NULL: unset, or the process is in glibc's
 * secure-execution mode (set-uid, set-gid, file capabilities), where the
 * shim reads no environment at all. Every variable the shim reads goes
 * through this. */
const char *gs_getenv(const char *name);

#endif
