/*
 * What the fuzz targets' replay mains share: built without libFuzzer, each
 * target runs the corpus files named on its command line, and reads them
 * and judges them by name the same way.
 */
#ifndef GPUSLICE_TEST_FUZZ_REPLAY_H
#define GPUSLICE_TEST_FUZZ_REPLAY_H

#include <stdio.h>
#include <string.h>

/* What a corpus file's name asks of its input. */
enum fuzz_want {
    FUZZ_WANT_ANY,   /* only that it runs */
    FUZZ_WANT_VALID, /* "valid-...": accepted */
    FUZZ_WANT_BAD,   /* "bad-...": refused */
};

/* Reads the file at path into buf, at most cap bytes: how many, or -1
 * after saying why on stderr. */
static inline long fuzz_replay_read(const char *path, void *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t n = fread(buf, 1, cap, f);
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        fprintf(stderr, "%s: read error\n", path);
        return -1;
    }
    return (long)n;
}

/* The file's name without its directory. */
static inline const char *fuzz_replay_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static inline enum fuzz_want fuzz_replay_want(const char *name)
{
    if (strncmp(name, "valid-", 6) == 0)
        return FUZZ_WANT_VALID;
    if (strncmp(name, "bad-", 4) == 0)
        return FUZZ_WANT_BAD;
    return FUZZ_WANT_ANY;
}

#endif
