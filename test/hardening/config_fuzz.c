/*
 * Fuzz target for the tenant file parser (tokenserver/config.c), the code
 * that reads what a file in the configuration directory says. Any input
 * must parse without reading out of bounds; what it accepts must be within
 * the documented ranges (share, limit and quantum finite and in range, so
 * that the scheduler never divides into inf or nan); what it refuses must
 * come with a message naming the file; and the same input must always give
 * the same answer.
 *
 * Built two ways, like protocol_fuzz.c: with clang -fsanitize=fuzzer as a
 * libFuzzer target (CI runs it, scripts/fuzz), and with a small main()
 * that replays the files named on the command line (the meson test
 * replays test/hardening/config_corpus), where a file named valid-* must be
 * accepted and one named bad-* refused.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The message of the last input refused, for the replay to print; one
 * thread only. */
static char last_error[600];

static int check(const char *text, size_t size)
{
    struct tenant_config c, again;
    char err[600], err2[600];
    memset(&c, 0xa5, sizeof c);
    int rc = config_parse_text(text, size, "fuzz.conf", &c, err, sizeof err);
    int rc2 = config_parse_text(text, size, "fuzz.conf", &again, err2, sizeof err2);
    if (rc != rc2)
        abort();
    if (rc == 0) {
        if (!(c.share >= SHARE_MIN && c.share <= SHARE_MAX) || !(c.limit >= LIMIT_MIN && c.limit <= 1) ||
            c.quantum_ns < 1000000ull || c.quantum_ns > QUANTUM_MS_MAX * 1000000ull || c.quantum_ns % 1000000ull ||
            !isfinite(1.0 / c.share) || !isfinite(1.0 / c.limit) ||
            (c.gang != GANG_AUTO && c.gang != GANG_ON && c.gang != GANG_OFF) ||
            (c.on_server_down != ON_DOWN_DEFAULT && c.on_server_down != ON_DOWN_WAIT &&
             c.on_server_down != ON_DOWN_OPEN) || c.share != again.share ||
            c.limit != again.limit || c.quantum_ns != again.quantum_ns || c.memory != again.memory ||
            c.gang != again.gang || c.on_server_down != again.on_server_down) /* field by field: not padding */
            abort();
    } else {
        if (rc != CONFIG_BAD || !memchr(err, '\0', sizeof err) || strncmp(err, "fuzz.conf:", 10) != 0 ||
            strcmp(err, err2) != 0)
            abort();
        memcpy(last_error, err, sizeof last_error);
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so that ASan sees any read past it. */
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    if (size)
        memcpy(text, data, size);
    int rc = check(text, size);
    free(text);
    return rc;
}

#ifndef GS_LIBFUZZER
#include "fuzz_replay.h"

int main(int argc, char **argv)
{
    static uint8_t buf[CONFIG_MAX_BYTES + 1];
    int passed = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        long bytes = fuzz_replay_read(argv[i], buf, sizeof buf);
        if (bytes < 0)
            return 1;
        size_t n = (size_t)bytes;
        const char *name = fuzz_replay_name(argv[i]);
        int rc = LLVMFuzzerTestOneInput(buf, n);
        printf("%s: %s\n", name, rc == 0 ? "accepted" : last_error);
        bool want_ok = fuzz_replay_want(name) == FUZZ_WANT_VALID, want_bad = fuzz_replay_want(name) == FUZZ_WANT_BAD;
        if ((want_ok && rc != 0) || (want_bad && rc == 0)) {
            printf("FAILED: %s should have been %s\n", name, want_ok ? "accepted" : "refused");
            failed++;
        } else {
            passed++;
        }
        /* every prefix too: a file is often read half-written */
        for (size_t k = 0; k < n && k < 256; k++)
            LLVMFuzzerTestOneInput(buf, k);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif
