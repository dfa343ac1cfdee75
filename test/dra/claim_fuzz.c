/*
 * Fuzz target for the ResourceClaim reader of gpuslice-dra
 * (dra/kube/claim.c), the code that reads what the API server answers for
 * a claim the kubelet names. Any input must be read without touching
 * memory out of bounds; what it accepts must be within what the plugin
 * later writes into a tenant file (one to DRA_MAX_CLAIM_DEVICES devices,
 * each name a string of its field, a finite share, a SliceConfig's limit,
 * class and preempt_ms in their ranges) and name the claim asked for; what
 * it refuses must come with one line that names the claim, and leave
 * nothing read; the same input must always give the same answer.
 *
 * Built two ways, like test/hardening/config_fuzz.c: with clang
 * -fsanitize=fuzzer as a libFuzzer target (scripts/fuzz), and with a small
 * main() that replays the files named on the command line (the meson test
 * replays test/dra/claim_corpus), where a file named valid-* must be
 * accepted and one named bad-* refused.
 */
#include "kube.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The uid, namespace and name the corpus's claims carry. */
static const struct dra_claim_ref ref = {
    .uid = "5d1c3f0e-8a4b-4c8e-9f6a-2b7d0e1a3c55", .namespace_name = "default", .name = "quarter"};
#define PREFIX "claim default/quarter: "

/* The message of the last input refused, for the replay to print; one
 * thread only. */
static char last_error[512];

static bool terminated(const char *field, size_t size)
{
    return memchr(field, '\0', size) != NULL;
}

static bool accepted_well(const struct dra_claim *c)
{
    if (c->ndevices < 1 || c->ndevices > DRA_MAX_CLAIM_DEVICES || strcmp(c->uid, ref.uid) != 0 ||
        strcmp(c->namespace_name, ref.namespace_name) != 0 || strcmp(c->name, ref.name) != 0)
        return false;
    for (int d = 0; d < c->ndevices; d++) {
        const struct dra_claim_device *dev = &c->devices[d];
        if (!terminated(dev->request, sizeof dev->request) || !terminated(dev->pool, sizeof dev->pool) ||
            !terminated(dev->device, sizeof dev->device) || !isfinite(dev->share))
            return false;
    }
    const struct dra_claim_config *config = &c->config;
    if (config->has_limit && !(config->limit >= 0.001 && config->limit <= 1.0))
        return false;
    if (config->has_class && strcmp(config->class_name, "batch") != 0 && strcmp(config->class_name, "latency") != 0)
        return false;
    if (config->has_preempt_ms && (config->preempt_ms < 1 || config->preempt_ms > 1000))
        return false;
    return true;
}

static bool refused_well(int rc, const char *error, const struct dra_claim *c)
{
    static const struct dra_claim nothing;
    if (rc != KUBE_CLAIM_BAD || !terminated(error, sizeof last_error) ||
        strncmp(error, PREFIX, strlen(PREFIX)) != 0 || memcmp(c, &nothing, sizeof *c) != 0)
        return false;
    for (const char *p = error; *p; p++) {
        if ((unsigned char)*p < ' ' || *p == 0x7f)
            return false;
    }
    return true;
}

static int check(const char *json)
{
    static struct dra_claim claim, again;
    char error[sizeof last_error], error_again[sizeof last_error];
    memset(&claim, 0xa5, sizeof claim);
    memset(error, 0xa5, sizeof error);
    int rc = dra_claim_parse(json, &ref, &claim, error, sizeof error);
    int rc_again = dra_claim_parse(json, &ref, &again, error_again, sizeof error_again);
    if (rc != rc_again || memcmp(&claim, &again, sizeof claim) != 0)
        abort();
    if (rc == 0) {
        if (!accepted_well(&claim))
            abort();
    } else {
        if (!refused_well(rc, error, &claim) || strcmp(error, error_again) != 0)
            abort();
        memcpy(last_error, error, sizeof last_error);
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly the input and its NUL, so that ASan sees any read
     * past it (the reader takes a C string: a NUL inside ends it). */
    char *json = malloc(size + 1);
    if (!json)
        return 0;
    memcpy(json, data, size);
    json[size] = '\0';
    check(json);
    free(json);
    return 0;
}

#ifndef GS_LIBFUZZER
#include "fuzz_replay.h"

int main(int argc, char **argv)
{
    static char buf[1 << 16];
    int passed = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        long bytes = fuzz_replay_read(argv[i], buf, sizeof buf - 1);
        if (bytes < 0)
            return 1;
        buf[bytes] = '\0';
        const char *base = fuzz_replay_name(argv[i]);
        last_error[0] = '\0';
        int rc = check(buf);
        bool want_valid = fuzz_replay_want(base) == FUZZ_WANT_VALID, want_bad = fuzz_replay_want(base) == FUZZ_WANT_BAD;
        if ((want_valid && rc != 0) || (want_bad && rc == 0)) {
            printf("not ok: %s: %s%s\n", base, rc == 0 ? "accepted" : "refused: ", rc == 0 ? "" : last_error);
            failed++;
        } else {
            printf("ok: %s%s%s\n", base, rc == 0 ? "" : ": ", rc == 0 ? "" : last_error);
            passed++;
        }
    }
    printf("%d inputs, %d failed\n", passed + failed, failed);
    return failed ? 1 : 0;
}
#endif
