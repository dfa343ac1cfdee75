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
    /* One line, whatever a container's annotation or image put in it:
     * control bytes are shown as \xNN. */
    char shown[4 * sizeof line];
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)line; *c && n + 5 < sizeof shown; c++) {
        if (*c < 0x20 || *c == 0x7f)
            n += (size_t)snprintf(shown + n, sizeof shown - n, "\\x%02x", *c);
        else
            shown[n++] = (char)*c;
    }
    shown[n] = '\0';
    fprintf(stderr, "gpuslice-hook: %s\n", shown);
    exit(1);
}
