/*
 * Where the shim's settings come from.
 *
 * The environment: every variable is read through gs_getenv, which is
 * secure_getenv. In glibc's secure-execution mode (a set-uid or set-gid
 * program, or one gaining file capabilities) the environment is that of
 * whoever started the program, not of whom it runs as, so none of it is
 * read: GPUSLICE_REAL_LIBCUDA there would name a library to load with the
 * program's privileges, GPUSLICE_SOCKET a socket to talk to with them.
 * Such a process takes every default.
 */
#include "gs_settings.h"

#include <stdlib.h>

const char *gs_getenv(const char *name)
{
    return secure_getenv(name);
}
