/*
 * Logging for libgpuslice.so: see gs_log.h. A message is formatted into one
 * buffer and written with a single write(2), so lines from several threads
 * never interleave.
 */
#include "gs_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int gs_log_threshold = GS_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void gs_log_init(const char *value)
{
    if (!value || !*value)
        return;
    for (int i = GS_LOG_ERROR; i <= GS_LOG_DEBUG; i++)
        if (strcasecmp(value, level_names[i]) == 0) {
            gs_log_threshold = i;
            return;
        }
    gs_log(GS_LOG_WARN, "GPUSLICE_LOG=%s is not one of error, warn, info, debug; using warn", value);
}

void gs_log(enum gs_log_level level, const char *fmt, ...)
{
    if (gs_log_threshold < (int)level)
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "gpuslice[%d]: %s: ", (int)getpid(), level_names[level]);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    if (m < 0)
        len = (size_t)n;
    line[len++] = '\n';
    ssize_t written = write(STDERR_FILENO, line, len);
    (void)written; /* nowhere left to report a failed write to stderr */
}
