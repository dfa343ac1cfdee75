/*
 * Logging to stderr, one line per message, and the rate limit on messages
 * a tenant or a client can cause (slog_limited): each kind of message,
 * per tenant, is written at most LOG_BURST times per LOG_WINDOW_NS; the
 * rest are counted, and one line saying how many were suppressed follows
 * when the window ends (log_flush, called every second). So no client can
 * make the log grow faster than a few lines a second.
 */
#include "server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define LOG_BURST 10
#define LOG_WINDOW_NS 10000000000ull
#define LOG_SLOTS 128

int log_level = LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* One kind of message (format string, tenant) and its window. The table
 * belongs to the loop's thread; two kinds that hash to one slot share it
 * (the older one's count is flushed first). */
struct log_slot {
    const char *fmt;
    const void *tag;
    int level;
    uint64_t window_start;
    unsigned written, suppressed;
    char first_suppressed[200];
};
static struct log_slot slots[LOG_SLOTS];

const char *log_level_name(int level)
{
    return level >= 0 && level <= LOG_DEBUG ? level_names[level] : "?";
}

int log_level_parse(const char *name)
{
    for (int i = 0; i <= LOG_DEBUG; i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

static void write_line(int level, const char *text)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || !gmtime_r(&ts.tv_sec, &tm))
        memset(&tm, 0, sizeof tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ gpuslice-server: %s: %s\n",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[level], text);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (len && line[len - 1] != '\n')
        line[len - 1] = '\n'; /* cut: keep one line */
    /* Nowhere to report a failed write to stderr: the line is lost. */
    while (write(STDERR_FILENO, line, len) < 0 && errno == EINTR) {
    }
}

static void vlog(int level, const char *fmt, va_list ap)
{
    char text[900];
    vsnprintf(text, sizeof text, fmt, ap);
    write_line(level, text);
}

void slog(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

static void flush_slot(struct log_slot *s)
{
    if (s->suppressed) {
        char text[400];
        snprintf(text, sizeof text, "%u more message%s like \"%s\" suppressed in the last %llu s",
                 s->suppressed, s->suppressed == 1 ? "" : "s", s->first_suppressed,
                 (unsigned long long)(LOG_WINDOW_NS / 1000000000ull));
        write_line(s->level, text);
    }
    s->suppressed = 0;
    s->written = 0;
}

void slog_limited(const void *tag, int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    uintptr_t h = ((uintptr_t)fmt >> 3) * 31u + ((uintptr_t)tag >> 4);
    struct log_slot *s = &slots[h % LOG_SLOTS];
    uint64_t now = now_ns();
    if (s->fmt != fmt || s->tag != tag) {
        flush_slot(s);
        s->fmt = fmt;
        s->tag = tag;
        s->level = level;
        s->window_start = now;
    } else if (now - s->window_start >= LOG_WINDOW_NS) {
        flush_slot(s);
        s->window_start = now;
    }
    va_list ap;
    va_start(ap, fmt);
    if (s->written < LOG_BURST) {
        s->written++;
        vlog(level, fmt, ap);
    } else if (s->suppressed++ == 0) {
        vsnprintf(s->first_suppressed, sizeof s->first_suppressed, fmt, ap);
    }
    va_end(ap);
}

void log_flush(void)
{
    uint64_t now = now_ns();
    for (size_t i = 0; i < LOG_SLOTS; i++)
        if (slots[i].fmt && now - slots[i].window_start >= LOG_WINDOW_NS) {
            flush_slot(&slots[i]);
            slots[i].fmt = NULL;
        }
}
