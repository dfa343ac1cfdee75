/*
 * gpuslicectl top: the status, redrawn every interval. On a terminal it
 * draws with ncurses (it adapts to the terminal's width, redraws when the
 * window is resized; `q` quits, `s` changes the order of the tenants);
 * when standard output is not a terminal it prints plain frames instead,
 * one per interval (`--once`: one; `-n N`: N); with `--json` each frame is
 * the status JSON, as `gpuslicectl status --json` prints it. Built without
 * ncurses (-Dncurses=disabled, or none found), it has the plain frames
 * only and says so when asked for the live view.
 */
#include "ctl.h"

#ifdef GPUSLICE_HAVE_NCURSES
#include <curses.h>
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PLAIN_WIDTH 120

/* One status, read into m; the error text (or NULL) for the frame. */
static const char *fetch(const struct top_options *o, struct top_model *m, char *err, size_t errlen)
{
    char *text;
    size_t len;
    top_model_free(m);
    int rc = ctl_fetch_status(o->run_dir, GS_STATUS_JSON, &text, &len, err, errlen);
    if (rc == 0 && !top_model_read(m, text, len)) {
        snprintf(err, errlen, "the server's status is not the JSON this gpuslicectl reads");
        rc = 2;
    }
    free(text);
    return rc == 0 ? NULL : err;
}

static void clock_text(char out[16])
{
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || strftime(out, 16, "%H:%M:%S", &tm) == 0)
        snprintf(out, 16, "--:--:--");
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int plain_width(void)
{
    const char *columns = getenv("COLUMNS");
    int w = columns ? atoi(columns) : 0;
    return w >= 40 && w < 1000 ? w : PLAIN_WIDTH;
}

/* Frames on standard output, without a terminal. */
static int plain(const struct top_options *o)
{
    struct top_model m = {0};
    int rc = 0;
    long frames = o->iterations ? o->iterations : o->once || o->json ? 1 : 0; /* 0: until stopped */
    for (long i = 0; frames == 0 || i < frames; i++) {
        if (i > 0)
            sleep_s(o->interval_s);
        char err[512], clock[16];
        if (o->json) {
            char *text;
            size_t len;
            rc = ctl_fetch_status(o->run_dir, GS_STATUS_JSON, &text, &len, err, sizeof err);
            if (text && fwrite(text, 1, len, stdout) != len && rc == 0) {
                snprintf(err, sizeof err, "writing the status failed");
                rc = 2;
            }
            free(text);
            if (rc) {
                fprintf(stderr, "gpuslicectl: %s\n", err);
                break;
            }
            if (fflush(stdout) != 0) {
                rc = 2;
                break;
            }
            continue;
        }
        const char *error = fetch(o, &m, err, sizeof err);
        if (error) {
            fprintf(stderr, "gpuslicectl: %s\n", error);
            rc = 2;
            break;
        }
        top_model_sort(&m, SORT_NAME);
        clock_text(clock);
        struct top_lines lines;
        top_view(&m, SORT_NAME, plain_width(), clock, NULL, &lines);
        for (size_t k = 0; k < lines.count; k++)
            printf("%s\n", lines.line[k]);
        printf("\n");
        top_lines_free(&lines);
        if (fflush(stdout) != 0) {
            rc = 2;
            break;
        }
    }
    top_model_free(&m);
    return rc;
}

#ifdef GPUSLICE_HAVE_NCURSES
static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void draw(const struct top_model *m, enum top_sort sort, const char *error)
{
    char clock[16];
    clock_text(clock);
    struct top_lines lines;
    top_view(error ? NULL : m, sort, COLS, clock, error, &lines);
    erase();
    for (size_t k = 0; k < lines.count && (int)k < LINES; k++) {
        bool heading = k == 0 || strncmp(lines.line[k], "GPU ", 4) == 0 || strncmp(lines.line[k], "TENANT ", 7) == 0;
        if (heading)
            attron(A_BOLD);
        mvaddnstr((int)k, 0, lines.line[k], COLS);
        if (heading)
            attroff(A_BOLD);
    }
    top_lines_free(&lines);
    refresh();
}

static int interactive(const struct top_options *o)
{
    if (!initscr()) {
        fprintf(stderr, "gpuslicectl: cannot start the terminal (TERM=%s)\n", getenv("TERM") ? getenv("TERM") : "");
        return 2;
    }
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    struct top_model m = {0};
    enum top_sort sort = SORT_NAME;
    char err[512];
    const char *error = fetch(o, &m, err, sizeof err);
    double next = monotonic_s() + o->interval_s;
    for (;;) {
        if (!error)
            top_model_sort(&m, sort);
        draw(&m, sort, error);
        double left = next - monotonic_s();
        timeout(left > 0 ? (int)(left * 1000) + 1 : 0);
        int ch = getch();
        if (ch == 'q' || ch == 'Q')
            break;
        if (ch == 's' || ch == 'S') {
            sort = (enum top_sort)((sort + 1) % SORT_KEYS);
            continue;
        }
        if (monotonic_s() >= next) {
            error = fetch(o, &m, err, sizeof err);
            next = monotonic_s() + o->interval_s;
        }
    }
    endwin();
    top_model_free(&m);
    return 0;
}
#else
static int interactive(const struct top_options *o)
{
    (void)o;
    fprintf(stderr, "gpuslicectl: top's live view needs ncurses, and this gpuslicectl was built without it; "
                    "use top --once, -n N or --json (plain frames), or rebuild gpuslice with ncurses "
                    "(Debian: libncurses-dev)\n");
    return 2;
}
#endif

int top_main(const struct top_options *o)
{
    if (o->once || o->json || !isatty(STDOUT_FILENO))
        return plain(o);
    return interactive(o);
}
