/*
 * The hook's one way to fail: one line on stderr, exit status 1. A runtime
 * that sees a hook fail does not start the container, so a container that
 * asked for a tenant never runs without gpuslice.
 */
#include "hook.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void die(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpuslice-hook: %s\n", line);
    exit(1);
}
