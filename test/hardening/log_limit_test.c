/*
 * The log's rate limit (tokenserver/log.c, slog_limited), line by line,
 * on a clock of the test's own: each kind of message (format and tag) is
 * written at most 10 times per 10 s, whatever other kinds come in between;
 * what is held back is counted and reported when the window ends; more
 * kinds than the table holds share one more window, so no mix of kinds
 * writes more than (kinds + 1) * 10 lines per window.
 *
 * Kinds here differ by tag only, with tags 2048 bytes apart: the slot the
 * limit used to keep them in was a hash of the tag's address, and these
 * all landed in one slot, where alternating kinds restarted each other's
 * count and every message was written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "server.h"

#define BURST 10
#define WINDOW_NS 10000000000ull
#define TABLE 256 /* log.c's LOG_KINDS */

/* The clock log.c reads (loop.c's in the server). */
static uint64_t fake_now = 1000000000ull;
uint64_t now_ns(void)
{
    return fake_now;
}

static char tags[400 * 2048]; /* kind i's tag: &tags[i * 2048] */
static FILE *captured;        /* stderr, where log.c writes */
static long read_to;

#define TAG(i) ((const void *)&tags[(size_t)(i) * 2048])

/* Lines written since the last call; with `like`, only those containing it;
 * *suppressed gets the sum of the counts in "N more message(s)" lines. */
static unsigned lines_since(const char *like, unsigned long *suppressed)
{
    fflush(captured);
    if (fseek(captured, read_to, SEEK_SET) != 0)
        abort();
    char line[2048];
    unsigned n = 0;
    if (suppressed)
        *suppressed = 0;
    while (fgets(line, sizeof line, captured)) {
        if (like && !strstr(line, like))
            continue;
        n++;
        const char *more = strstr(line, ": warn: ");
        unsigned long count;
        if (suppressed && more && sscanf(more, ": warn: %lu more message", &count) == 1 &&
            strstr(line, " more message"))
            *suppressed += count;
    }
    read_to = ftell(captured);
    return n;
}

static void log_kind(int i, int msg)
{
    slog_limited(TAG(i), LOG_WARN, "kind %d message %d", i, msg);
}

int main(void)
{
    captured = tmpfile();
    if (!captured || dup2(fileno(captured), STDERR_FILENO) < 0) {
        perror("tmpfile");
        return 1;
    }
    log_level = LOG_INFO;

    /* Two kinds that alternate 1000 times each: 10 lines of each. */
    for (int m = 0; m < 1000; m++) {
        log_kind(0, m);
        log_kind(1, m);
    }
    unsigned lines = lines_since(NULL, NULL);
    printf("two alternating kinds, 1000 messages each: %u lines\n", lines);
    EXPECT(lines == 2 * BURST);

    /* Nothing more within the window; after it, the counts, one line each. */
    fake_now += WINDOW_NS / 2;
    log_flush();
    log_kind(0, 1000);
    EXPECT(lines_since(NULL, NULL) == 0);
    fake_now += WINDOW_NS / 2;
    log_flush();
    unsigned long suppressed;
    lines = lines_since("more messages like \"kind ", &suppressed);
    printf("after the window: %u lines of counts, %lu suppressed\n", lines, suppressed);
    EXPECT(lines == 2 && suppressed == 2 * 1000 - 2 * BURST + 1);
    /* and a new window writes again */
    log_kind(0, 1001);
    EXPECT(lines_since("kind 0 message 1001", NULL) == 1);
    fake_now += WINDOW_NS;
    log_flush();
    lines_since(NULL, NULL);

    /* 300 kinds at once, 50 messages each, round after round: the table's
     * kinds 10 lines each, the rest 10 together; every message counted. */
    int kinds = 300, rounds = 50;
    for (int m = 0; m < rounds; m++)
        for (int i = 0; i < kinds; i++)
            log_kind(i, m);
    lines = lines_since(NULL, NULL);
    printf("%d kinds at once, %d messages each: %u lines\n", kinds, rounds, lines);
    EXPECT(lines == (TABLE + 1) * BURST);
    /* Kinds the table holds keep their place: still nothing new from them */
    for (int i = 0; i < TABLE; i++)
        log_kind(i, rounds);
    EXPECT(lines_since(NULL, NULL) == 0);
    fake_now += WINDOW_NS;
    log_flush();
    lines = lines_since(" more message", &suppressed);
    printf("after the window: %u lines of counts, %lu suppressed\n", lines, suppressed);
    EXPECT(lines == TABLE + 1);
    EXPECT(suppressed == (unsigned long)(kinds * rounds + TABLE) - (TABLE + 1) * BURST);

    /* The window over, every kind has a place again, the table's first. */
    for (int i = 0; i < 2; i++)
        log_kind(299 - i, 0);
    EXPECT(lines_since(NULL, NULL) == 2);

    /* A message below the log level is neither written nor counted. */
    log_level = LOG_ERR;
    for (int m = 0; m < 100; m++)
        log_kind(5, m);
    EXPECT(lines_since(NULL, NULL) == 0);
    return check_finish();
}
