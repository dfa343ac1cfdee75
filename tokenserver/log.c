/*
 * Logging to stderr, one line per message, and the rate limit on messages
 * a tenant or a client can cause (slog_limited): each kind of message
 * (its format string and its tag, a tenant) is written at most LOG_BURST
 * times per LOG_WINDOW_NS; the rest are counted, and one line saying how
 * many were suppressed follows when the window ends (log_flush, called
 * every second). So no client can make the log grow faster than a few
 * lines a second.
 *
 * Refusals (slog_refusal: a memory cap, a limit, a protocol error) are
 * kinds of their own, told apart by their cause too, and written once per
 * REFUSAL_WINDOW_NS each, then counted the same way: every cause of every
 * tenant is in the log, once a minute at most.
 *
 * Kinds are told apart exactly (pointer comparison, and the cause's text;
 * never a hash), in a table of LOG_KINDS. A kind keeps its place until its window ends, so no
 * interleaving of kinds can restart another's count; when the table is
 * full, every further kind shares one more window (the overflow). At most
 * (LOG_KINDS + 1) * (LOG_BURST + 1) lines per window, whatever arrives.
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
#define LOG_KINDS 256
#define REFUSAL_WINDOW_NS 60000000000ull
#define CAUSE_MAX 64

int log_level = LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* One kind of message (format string, tag) and its window; fmt is NULL
 * in a free entry. The table and the overflow belong to the loop's
 * thread. */
struct log_kind {
    const char *fmt;
    const void *tag;
    char cause[CAUSE_MAX];   /* "" for slog_limited's kinds */
    int level;
    unsigned burst;          /* lines per window */
    uint64_t window_ns;
    uint64_t window_start;
    unsigned written, suppressed;
    char first_suppressed[200];
};
static struct log_kind kinds[LOG_KINDS];
static struct log_kind overflow = {.burst = LOG_BURST, .window_ns = LOG_WINDOW_NS}; /* the kinds that found the
                                                                                  table full */

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

/* Writes the count of what k suppressed in the window that ended, and
 * starts a new one. */
static void flush_kind(struct log_kind *k, uint64_t now)
{
    if (k->suppressed) {
        char text[400];
        if (k == &overflow)
            snprintf(text, sizeof text,
                     "%u more message%s suppressed in the last %llu s, of kinds beyond the %d counted one by one; "
                     "the first: \"%s\"",
                     k->suppressed, k->suppressed == 1 ? "" : "s", (unsigned long long)(k->window_ns / 1000000000ull),
                     LOG_KINDS, k->first_suppressed);
        else
            snprintf(text, sizeof text, "%u more message%s like \"%s\" suppressed in the last %llu s", k->suppressed,
                     k->suppressed == 1 ? "" : "s", k->first_suppressed,
                     (unsigned long long)(k->window_ns / 1000000000ull));
        write_line(k->level, text);
    }
    k->suppressed = 0;
    k->written = 0;
    k->window_start = now;
}

/* The entry of (fmt, tag, cause): its own, a free one, or the overflow. */
static struct log_kind *kind_of(const char *fmt, const void *tag, const char *cause, int level, unsigned burst,
                                uint64_t window_ns, uint64_t now)
{
    struct log_kind *free_entry = NULL;
    for (size_t i = 0; i < LOG_KINDS; i++) {
        struct log_kind *k = &kinds[i];
        if (k->fmt == fmt && k->tag == tag && strncmp(k->cause, cause, CAUSE_MAX - 1) == 0)
            return k;
        if (!free_entry && (!k->fmt || now - k->window_start >= k->window_ns))
            free_entry = k;
    }
    if (!free_entry)
        return &overflow;
    if (free_entry->fmt)
        flush_kind(free_entry, now); /* its window ended: its count first */
    free_entry->fmt = fmt;
    free_entry->tag = tag;
    snprintf(free_entry->cause, sizeof free_entry->cause, "%s", cause);
    free_entry->level = level;
    free_entry->burst = burst;
    free_entry->window_ns = window_ns;
    free_entry->written = free_entry->suppressed = 0;
    free_entry->window_start = now;
    return free_entry;
}

static void vlog_kind(const void *tag, const char *cause, int level, unsigned burst, uint64_t window_ns,
                      const char *fmt, va_list ap)
{
    uint64_t now = now_ns();
    struct log_kind *k = kind_of(fmt, tag, cause, level, burst, window_ns, now);
    if (k == &overflow && !overflow.fmt) {
        overflow.fmt = fmt; /* in use: its window runs */
        overflow.level = level;
        overflow.window_start = now;
    }
    if (now - k->window_start >= k->window_ns)
        flush_kind(k, now);
    if (k->written < k->burst) {
        k->written++;
        vlog(level, fmt, ap);
    } else if (k->suppressed++ == 0) {
        vsnprintf(k->first_suppressed, sizeof k->first_suppressed, fmt, ap);
    }
}

void slog_limited(const void *tag, int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog_kind(tag, "", level, LOG_BURST, LOG_WINDOW_NS, fmt, ap);
    va_end(ap);
}

void slog_refusal(const void *tag, const char *cause, const char *fmt, ...)
{
    if (LOG_WARN > log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog_kind(tag, cause, LOG_WARN, 1, REFUSAL_WINDOW_NS, fmt, ap);
    va_end(ap);
}

void log_flush(void)
{
    uint64_t now = now_ns();
    for (size_t i = 0; i < LOG_KINDS; i++)
        if (kinds[i].fmt && now - kinds[i].window_start >= kinds[i].window_ns) {
            flush_kind(&kinds[i], now);
            kinds[i].fmt = NULL;
        }
    if (overflow.fmt && now - overflow.window_start >= overflow.window_ns) {
        flush_kind(&overflow, now);
        overflow.fmt = NULL;
    }
}
