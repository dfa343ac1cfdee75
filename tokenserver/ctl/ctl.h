/*
 * gpuslicectl's parts:
 *
 *   gpuslicectl.c  the command line: status, top
 *   ctl_status.c   asking the server for its status over the admin socket
 *   ctl_json.c     a small JSON reader, for the status gpuslicectl top draws
 *   top_model.c    the status as rows for top, and their order
 *   top_view.c     one frame of top as lines of text, for any width
 *   top.c          top's loop: ncurses on a terminal, plain frames elsewhere
 */
#ifndef GPUSLICE_CTL_H
#define GPUSLICE_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpuslice/protocol.h"

/* ---- ctl_status.c ------------------------------------------------------------ */

/* The whole status in the given format, NUL-terminated, in *out (to be
 * freed). 0, or 2 with a message in err (what arrived is in *out). */
int ctl_fetch_status(const char *run_dir, enum gs_status_format format, char **out, size_t *len, char *err,
                     size_t errlen);

/* ---- ctl_json.c ------------------------------------------------------------------- */

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
    enum json_type type;
    double number;           /* JSON_NUMBER; JSON_BOOL: 0 or 1 */
    char *string;            /* JSON_STRING */
    char *key;               /* a member of an object: its name */
    struct json *child;      /* JSON_ARRAY, JSON_OBJECT: the first element */
    struct json *next;       /* the next element of the parent */
};

/* Parses text (len bytes); NULL if it is not one JSON value. */
struct json *json_parse(const char *text, size_t len);
void json_free(struct json *j);
/* The member `key` of an object, or NULL. */
const struct json *json_get(const struct json *object, const char *key);
double json_number(const struct json *object, const char *key, double fallback);
const char *json_string(const struct json *object, const char *key, const char *fallback);

/* ---- top_model.c --------------------------------------------------------------------- */

struct top_gpu {
    char uuid[48];
    char state[16];
    char holder[GS_NAME_MAX];   /* "" if none */
    char queue[256];
    unsigned processes;
};

struct top_row {                /* one tenant on one GPU (or on none yet) */
    char tenant[GS_NAME_MAX];
    char uuid[48];              /* "" if the tenant uses no GPU yet */
    double share, limit, achieved, target;
    double wait_s;
    uint64_t mem_used, mem_cap; /* bytes; cap 0: none */
    unsigned processes;
};

enum top_sort { SORT_NAME, SORT_ACHIEVED, SORT_WAIT, SORT_MEMORY, SORT_KEYS };

struct top_model {
    struct top_gpu *gpus;
    struct top_row *rows;
    size_t ngpus, nrows;
    unsigned ntenants, connections;
};

/* Reads the status JSON into m; false if it is not a status. */
bool top_model_read(struct top_model *m, const char *json, size_t len);
void top_model_free(struct top_model *m);
void top_model_sort(struct top_model *m, enum top_sort key);
const char *top_sort_name(enum top_sort key);

/* ---- top_view.c ------------------------------------------------------------------------ */

struct top_lines {
    char **line;
    size_t count;
};

/* The frame for a terminal `width` columns wide; `error`, if not NULL,
 * replaces the tables (the server cannot be reached). */
void top_view(const struct top_model *m, enum top_sort sort, int width, const char *clock, const char *error,
              struct top_lines *out);
void top_lines_free(struct top_lines *l);

/* ---- top.c ---------------------------------------------------------------------------------- */

struct top_options {
    const char *run_dir;
    double interval_s;
    long iterations;            /* plain frames to print; 0: until stopped */
    bool once, json;
};
int top_main(const struct top_options *o);

#endif
