/*
 * Fuzz target for the HTTP request parser of the /metrics listener
 * (tokenserver/metrics/http_request.c), the code that reads what any local
 * process, or the network where the listener is exposed, sends. Any input
 * must parse without reading outside it; the same input must give the
 * same answer; an accepted head must be within the input, with a path
 * that starts with '/' and a version of 1.0 or 1.1; a shorter prefix of
 * an accepted head must be incomplete; the path must parse back from a
 * request written around it; and the same bytes fed a piece at a time
 * (a byte at a time, and in pieces of lengths taken from the input), as
 * the listener reads them, must get the answer the bytes so far get at
 * once.
 *
 * Built two ways, like protocol_fuzz.c: with clang -fsanitize=fuzzer as a
 * libFuzzer target (scripts/fuzz, in CI), and with a small main() that
 * replays the files named on the command line (the meson test replays
 * test/metrics/http_corpus), where a file named valid-* must be accepted,
 * incomplete-* must need more bytes, and bad-* must be refused.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The result of the last input, for the replay; one thread only. */
static enum http_parse last;

static enum http_parse parse_copy(const uint8_t *data, size_t size, struct http_request *req)
{
    /* A copy of exactly size bytes, so that ASan sees any read past it. */
    char *copy = malloc(size ? size : 1);
    if (!copy)
        abort();
    if (size)
        memcpy(copy, data, size);
    enum http_parse r = http_parse_request(copy, size, req);
    free(copy);
    return r;
}

static bool same_request(const struct http_request *a, const struct http_request *b)
{
    return a->method == b->method && a->minor == b->minor && a->length == b->length && strcmp(a->path, b->path) == 0;
}

/* Feeds data a piece at a time into one scan, as the listener does, until
 * the parser answers; that answer must be what the bytes so far get at
 * once. Pass 0 cuts one byte at a time, pass 1 at lengths from the data. */
static void check_pieces(const uint8_t *data, size_t size, int pass)
{
    char *copy = calloc(size ? size : 1, 1);
    if (!copy)
        abort();
    if (size)
        memcpy(copy, data, size);
    struct http_scan scan = {0};
    struct http_request req, at_once;
    size_t len = 0, k = 0;
    enum http_parse r = http_parse_more(&scan, copy, 0, &req);
    while (r == HTTP_INCOMPLETE && len < size) {
        size_t step = pass == 0 ? 1 : 1 + data[k++ % size] % 97;
        len = step > size - len ? size : len + step;
        r = http_parse_more(&scan, copy, len, &req);
    }
    free(copy);
    if (parse_copy(data, len, &at_once) != r || (r == HTTP_OK && !same_request(&req, &at_once)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http_request req, again;
    enum http_parse r = parse_copy(data, size, &req);
    if (parse_copy(data, size, &again) != r)
        abort();
    last = r;
    if (r < HTTP_INCOMPLETE || r > HTTP_BAD_VERSION)
        abort();
    check_pieces(data, size, 0);
    check_pieces(data, size, 1);
    if (r == HTTP_TOO_LARGE && size < HTTP_REQUEST_MAX)
        abort();
    if (r != HTTP_OK)
        return 0;
    if (req.length == 0 || req.length > size || req.length > HTTP_REQUEST_MAX || req.path[0] != '/' ||
        !memchr(req.path, '\0', sizeof req.path) || (req.minor != 0 && req.minor != 1) ||
        !same_request(&req, &again))
        abort();
    if (parse_copy(data, req.length - 1, &again) != HTTP_INCOMPLETE)
        abort();
    char round[HTTP_PATH_MAX + 64];
    int n = snprintf(round, sizeof round, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", req.path);
    if (n < 0 || (size_t)n >= sizeof round || parse_copy((const uint8_t *)round, (size_t)n, &again) != HTTP_OK ||
        strcmp(again.path, req.path) != 0 || again.method != HTTP_GET || again.length != (size_t)n)
        abort();
    return 0;
}

#ifndef GS_LIBFUZZER
#include "fuzz_replay.h"

static const char *name_of(enum http_parse r)
{
    static const char *const names[] = {"incomplete", "ok", "bad", "uri-too-long", "too-large", "bad-version"};
    return r <= HTTP_BAD_VERSION ? names[r] : "?";
}

int main(int argc, char **argv)
{
    static uint8_t buf[HTTP_REQUEST_MAX * 2];
    int passed = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        long bytes = fuzz_replay_read(argv[i], buf, sizeof buf);
        if (bytes < 0)
            return 1;
        size_t n = (size_t)bytes;
        const char *name = fuzz_replay_name(argv[i]);
        LLVMFuzzerTestOneInput(buf, n);
        enum http_parse got = last;
        enum fuzz_want want = fuzz_replay_want(name);
        bool ok = want == FUZZ_WANT_VALID ? got == HTTP_OK
                  : strncmp(name, "incomplete-", 11) == 0 ? got == HTTP_INCOMPLETE
                  : want == FUZZ_WANT_BAD ? got != HTTP_OK && got != HTTP_INCOMPLETE
                                          : true;
        printf("%s: %s%s\n", name, name_of(got), ok ? "" : "  FAILED");
        passed += ok;
        failed += !ok;
        /* every prefix too: a request arrives a piece at a time */
        for (size_t k = 0; k < n && k < 512; k++)
            LLVMFuzzerTestOneInput(buf, k);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif
