/*
 * Logging for libgpuslice.so: one line per message on stderr, prefixed
 * "gpuslice[PID]: ". The level comes from GPUSLICE_LOG (error, warn, info,
 * debug; default warn) and is read once, when the library loads (the
 * caller passes its value: gs_settings.c reads the environment).
 */
#ifndef GPUSLICE_LOG_H
#define GPUSLICE_LOG_H

enum gs_log_level { GS_LOG_ERROR, GS_LOG_WARN, GS_LOG_INFO, GS_LOG_DEBUG };

/* Written once by gs_log_init (the library constructor, before any caller
 * can reach the shim); read-only afterwards. */
extern int gs_log_threshold;

void gs_log_init(const char *level);
void gs_log(enum gs_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define GS_LOG_ENABLED(level) __builtin_expect(gs_log_threshold >= (level), 0)
#define GS_DEBUG(...) do { if (GS_LOG_ENABLED(GS_LOG_DEBUG)) gs_log(GS_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
