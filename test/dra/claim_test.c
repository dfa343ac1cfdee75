/*
 * Reading ResourceClaims (dra/kube/claim.c): a claim of 25 share and 8Gi,
 * configuration from the class overridden by the claim's, which
 * configuration applies to which request, and every refusal, each checked
 * to name the claim and the field. Then every prefix of a claim and a few
 * thousand altered claims, which must be refused or read without a crash
 * (run under ASan and UBSan in the sanitizer build).
 */
#include "check.h"
#include "kube.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UID "5d1c3f0e-8a4b-4c8e-9f6a-2b7d0e1a3c55"
#define PREFIX "claim default/quarter: "
#define CONFIG0 "status.allocation.devices.config[0].opaque.parameters"

static const struct dra_claim_ref ref = {.uid = UID, .namespace_name = "default", .name = "quarter"};

/* The claim texts built below (claim_with_status, claim_allocated,
 * config) and the last message: this single-threaded test's own, each
 * valid until the next call that builds the same kind. */
static char text[1 << 16];

/* A ResourceClaim with this status (JSON), as the API server answers it. */
static const char *claim_with_status(const char *uid, const char *status)
{
    snprintf(text, sizeof text,
             "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\","
             "\"metadata\":{\"name\":\"quarter\",\"namespace\":\"default\",\"uid\":\"%s\",\"resourceVersion\":\"7\"},"
             "\"spec\":{\"devices\":{\"requests\":[{\"name\":\"gpu\",\"exactly\":{\"deviceClassName\":\"gpuslice.io\","
             "\"capacity\":{\"requests\":{\"share\":\"25\",\"memory\":\"8Gi\"}}}}]}},"
             "\"status\":%s}",
             uid, status);
    return text;
}

/* An allocated claim: these results and config entries (JSON arrays' insides). */
static const char *claim_allocated(const char *results, const char *configs)
{
    static char status[1 << 15];
    snprintf(status, sizeof status,
             "{\"allocation\":{\"devices\":{\"results\":[%s],\"config\":[%s]},"
             "\"nodeSelector\":{\"nodeSelectorTerms\":[{\"matchFields\":[{\"key\":\"metadata.name\","
             "\"operator\":\"In\",\"values\":[\"node-a\"]}]}]}}}",
             results, configs);
    return claim_with_status(UID, status);
}

#define RESULT_QUARTER                                                                                         \
    "{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"node-a\",\"device\":\"gpu-0\","            \
    "\"shareID\":\"0f2e4d6c-1b3a-4958-8776-a5b4c3d2e1f0\",\"consumedCapacity\":{\"share\":\"25\",\"memory\":\"8Gi\"}}"

/* One opaque configuration entry of this driver with these parameters. */
static const char *config(const char *source, const char *requests, const char *parameters)
{
    static char entries[4][2048];
    static int next;
    char *entry = entries[next++ % 4];
    snprintf(entry, sizeof entries[0],
             "{\"source\":\"%s\",%s\"opaque\":{\"driver\":\"gpuslice.io\",\"parameters\":%s}}", source,
             requests, parameters);
    return entry;
}

static char error[512];

static int parse(const char *json, struct dra_claim *claim)
{
    error[0] = '\0';
    return dra_claim_parse(json, &ref, claim, error, sizeof error);
}

/* Expects a refusal whose message is want (or starts with it, when want
 * ends in "..."), naming the claim, on one line. */
static void expect_refused(const char *what, const char *json, const char *want)
{
    struct dra_claim claim;
    int rc = parse(json, &claim);
    /* A want that ends in "..." is the start of the message. */
    size_t want_length = strlen(want);
    bool exact = want_length < 3 || strcmp(want + want_length - 3, "...") != 0;
    if (!exact)
        want_length -= 3;
    bool ok = rc == KUBE_CLAIM_BAD && strncmp(error, PREFIX, strlen(PREFIX)) == 0 && !strchr(error, '\n') &&
              (exact ? strcmp(error, want) == 0 : strncmp(error, want, want_length) == 0) && claim.ndevices == 0;
    printf("%s: %s: %s\n", ok ? "ok" : "FAILED", what, error);
    if (!ok)
        printf("    want %s\n", want);
    EXPECT(ok);
}

static void accepted(void)
{
    struct dra_claim claim;
    /* 25 share and 8Gi of one GPU, no configuration. */
    EXPECT(parse(claim_allocated(RESULT_QUARTER, ""), &claim) == 0);
    EXPECT(claim.ndevices == 1 && strcmp(claim.devices[0].request, "gpu") == 0 &&
           strcmp(claim.devices[0].pool, "node-a") == 0 && strcmp(claim.devices[0].device, "gpu-0") == 0);
    EXPECT(claim.devices[0].share == 25.0 && claim.devices[0].memory_bytes == 8ull << 30);
    EXPECT(strcmp(claim.uid, UID) == 0 && strcmp(claim.namespace_name, "default") == 0 &&
           strcmp(claim.name, "quarter") == 0);
    EXPECT(!claim.config.has_limit && !claim.config.has_class && !claim.config.has_preempt_ms);

    /* The class's configuration, then the claim's overriding part of it. */
    char configs[4096];
    snprintf(configs, sizeof configs, "%s,%s",
             config("FromClass", "",
                    "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\",\"limit\":0.5,\"class\":\"batch\","
                    "\"preempt_ms\":50}"),
             config("FromClaim", "\"requests\":[\"gpu\"],",
                    "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\",\"limit\":0.25,\"class\":\"latency\"}"));
    EXPECT(parse(claim_allocated(RESULT_QUARTER, configs), &claim) == 0);
    EXPECT(claim.config.has_limit && claim.config.limit == 0.25);
    EXPECT(claim.config.has_class && strcmp(claim.config.class_name, "latency") == 0);
    EXPECT(claim.config.has_preempt_ms && claim.config.preempt_ms == 50);
    printf("ok: class then claim: limit %g class %s preempt_ms %u\n", claim.config.limit, claim.config.class_name,
           claim.config.preempt_ms);

    /* A limit of 1 written as an integer; the bounds themselves. */
    EXPECT(parse(claim_allocated(RESULT_QUARTER,
                                 config("FromClaim", "", "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\","
                                                         "\"limit\":1,\"preempt_ms\":1000}")),
                 &claim) == 0 &&
           claim.config.limit == 1.0 && claim.config.preempt_ms == 1000);
    EXPECT(parse(claim_allocated(RESULT_QUARTER, config("FromClaim", "",
                                                        "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\","
                                                        "\"limit\":0.001,\"preempt_ms\":1}")),
                 &claim) == 0 &&
           claim.config.limit == 0.001 && claim.config.preempt_ms == 1);

    /* Configuration that is not ours, or for requests not ours, is not read
     * (however it looks); a main request's applies to its subrequests. */
    snprintf(configs, sizeof configs,
             "{\"source\":\"FromClass\",\"opaque\":{\"driver\":\"gpu.nvidia.com\",\"parameters\":{\"x\":1}}},"
             "{\"source\":\"FromClaim\",\"requests\":[\"nic\"],\"opaque\":{\"driver\":\"gpuslice.io\","
             "\"parameters\":{\"bogus\":true}}},"
             "{\"source\":\"FromClaim\",\"requests\":[\"gpu/large\"],\"opaque\":{\"driver\":\"gpuslice.io\","
             "\"parameters\":{\"bogus\":true}}},"
             "{\"source\":\"FromClaim\",\"requests\":[\"nic\",\"gpu\"],\"opaque\":{\"driver\":\"gpuslice.io\","
             "\"parameters\":{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\",\"class\":\"batch\"}}}");
    EXPECT(parse(claim_allocated("{\"request\":\"gpu/small\",\"driver\":\"gpuslice.io\",\"pool\":\"node-a\","
                                 "\"device\":\"gpu-1\",\"consumedCapacity\":{\"share\":\"10\",\"memory\":\"4Gi\"}},"
                                 "{\"request\":\"nic\",\"driver\":\"nic.example.com\",\"pool\":\"node-a\","
                                 "\"device\":\"eth1\"}",
                                 configs),
                 &claim) == 0);
    EXPECT(claim.ndevices == 1 && strcmp(claim.devices[0].request, "gpu/small") == 0 &&
           strcmp(claim.devices[0].device, "gpu-1") == 0 && claim.devices[0].share == 10.0);
    EXPECT(claim.config.has_class && strcmp(claim.config.class_name, "batch") == 0 && !claim.config.has_limit);
    /* "gpu" names no subrequest of "gpux". */
    EXPECT(parse(claim_allocated("{\"request\":\"gpux\",\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":\"gpu-0\"}",
                                 config("FromClaim", "\"requests\":[\"gpu\"],", "{\"bogus\":1}")),
                 &claim) == 0 &&
           !claim.config.has_class);

    /* No consumedCapacity: 0, the device's default (the caller's choice). */
    EXPECT(parse(claim_allocated("{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":\"gpu-0\"}",
                                 ""),
                 &claim) == 0 &&
           claim.devices[0].share == 0 && claim.devices[0].memory_bytes == 0);
    /* Fractions and other spellings of quantities. */
    EXPECT(parse(claim_allocated("{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":\"gpu-0\","
                                 "\"consumedCapacity\":{\"share\":\"12500m\",\"memory\":\"1.5Gi\"}}",
                                 ""),
                 &claim) == 0 &&
           claim.devices[0].share == 12.5 && claim.devices[0].memory_bytes == 3ull << 29);

    /* Sixteen devices, the most one claim has. */
    static char results[1 << 14];
    size_t length = 0;
    for (int i = 0; i < DRA_MAX_CLAIM_DEVICES; i++)
        length += (size_t)snprintf(results + length, sizeof results - length,
                                   "%s{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\","
                                   "\"device\":\"gpu-%d\",\"consumedCapacity\":{\"share\":\"5\",\"memory\":\"1Gi\"}}",
                                   i ? "," : "", i);
    EXPECT(parse(claim_allocated(results, ""), &claim) == 0 && claim.ndevices == DRA_MAX_CLAIM_DEVICES &&
           strcmp(claim.devices[15].device, "gpu-15") == 0);
    length += (size_t)snprintf(results + length, sizeof results - length,
                               ",{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":\"gpu-16\"}");
    expect_refused("17 devices", claim_allocated(results, ""),
                   PREFIX "17 devices of gpuslice.io allocated, more than the 16 one claim may have "
                          "(status.allocation.devices.results)");
    /* 32, the most the API allocates to one claim: the 18th and later are
     * counted, not read into the claim's 16 (claim_fuzz found them written
     * past its end: test/dra/claim_corpus/bad-eighteen-devices.json). */
    for (int i = 17; i < 32; i++)
        length += (size_t)snprintf(results + length, sizeof results - length,
                                   ",{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\","
                                   "\"device\":\"gpu-%d\",\"consumedCapacity\":{\"share\":\"1\"}}",
                                   i);
    expect_refused("32 devices", claim_allocated(results, ""),
                   PREFIX "32 devices of gpuslice.io allocated, more than the 16 one claim may have "
                          "(status.allocation.devices.results)");
}

static void refusals(void)
{
    expect_refused("another uid", claim_with_status("0a0a0a0a-0000-4000-8000-000000000000", "{}"),
                   PREFIX "uid 0a0a0a0a-0000-4000-8000-000000000000 is not " UID
                          " (metadata.uid: not the claim the kubelet named)");
    expect_refused("not allocated", claim_with_status(UID, "{}"), PREFIX "not allocated (no status.allocation)");
    expect_refused("no status", "{\"metadata\":{\"uid\":\"" UID "\"},\"spec\":{}}",
                   PREFIX "not allocated (no status.allocation)");
    expect_refused("no result of ours",
                   claim_allocated("{\"request\":\"gpu\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"p\","
                                   "\"device\":\"gpu-0\"}",
                                   ""),
                   PREFIX "no device of gpuslice.io allocated (status.allocation.devices.results)");
    expect_refused("no results", claim_with_status(UID, "{\"allocation\":{\"devices\":{}}}"),
                   PREFIX "no device of gpuslice.io allocated (status.allocation.devices.results)");

    const char *head = "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\",";
    char parameters[512];
#define CONFIG_CASE(what, fields, want)                                                                       \
    do {                                                                                                       \
        snprintf(parameters, sizeof parameters, "%s%s}", head, fields);                                       \
        expect_refused(what, claim_allocated(RESULT_QUARTER, config("FromClaim", "", parameters)), want);      \
    } while (0)
    CONFIG_CASE("an unknown field", "\"limit\":0.5,\"limt\":0.5",
                PREFIX CONFIG0 ".limt: unknown field (a SliceConfig has apiVersion, kind, limit, class and preempt_ms)");
    CONFIG_CASE("limit 1.5", "\"limit\":1.5", PREFIX CONFIG0 ".limit: 1.5 is out of range (0.001 to 1)");
    CONFIG_CASE("limit 0", "\"limit\":0", PREFIX CONFIG0 ".limit: 0 is out of range (0.001 to 1)");
    CONFIG_CASE("limit -0.5", "\"limit\":-0.5", PREFIX CONFIG0 ".limit: -0.5 is out of range (0.001 to 1)");
    CONFIG_CASE("limit NaN", "\"limit\":NaN", PREFIX CONFIG0 ".limit: NaN is out of range (0.001 to 1)");
    CONFIG_CASE("limit Infinity", "\"limit\":Infinity", PREFIX CONFIG0 ".limit: Infinity is out of range (0.001 to 1)");
    CONFIG_CASE("limit as a string", "\"limit\":\"0.5\"", PREFIX CONFIG0 ".limit: \"0.5\" is not a number");
    CONFIG_CASE("class fast", "\"class\":\"fast\"", PREFIX CONFIG0 ".class: \"fast\" is not batch or latency");
    CONFIG_CASE("class a number", "\"class\":1", PREFIX CONFIG0 ".class: 1 is not a string");
    CONFIG_CASE("preempt_ms 0", "\"preempt_ms\":0", PREFIX CONFIG0 ".preempt_ms: 0 is out of range (1 to 1000)");
    CONFIG_CASE("preempt_ms 1001", "\"preempt_ms\":1001",
                PREFIX CONFIG0 ".preempt_ms: 1001 is out of range (1 to 1000)");
    CONFIG_CASE("preempt_ms 2.5", "\"preempt_ms\":2.5", PREFIX CONFIG0 ".preempt_ms: 2.5 is not an integer");
    CONFIG_CASE("preempt_ms huge", "\"preempt_ms\":99999999999999999999",
                PREFIX CONFIG0 ".preempt_ms: 18446744073709551615 is out of range (1 to 1000)");
    CONFIG_CASE("preempt_ms null", "\"preempt_ms\":null", PREFIX CONFIG0 ".preempt_ms: null is not an integer");
#undef CONFIG_CASE
    expect_refused("wrong apiVersion",
                   claim_allocated(RESULT_QUARTER, config("FromClaim", "",
                                                          "{\"apiVersion\":\"gpuslice.io/v2\",\"kind\":\"SliceConfig\"}")),
                   PREFIX CONFIG0 ".apiVersion: \"gpuslice.io/v2\" is not gpuslice.io/v1");
    expect_refused("wrong kind",
                   claim_allocated(RESULT_QUARTER,
                                   config("FromClaim", "", "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"Slice\"}")),
                   PREFIX CONFIG0 ".kind: \"Slice\" is not SliceConfig");
    expect_refused("no apiVersion",
                   claim_allocated(RESULT_QUARTER, config("FromClaim", "", "{\"kind\":\"SliceConfig\",\"limit\":1}")),
                   PREFIX CONFIG0 ".apiVersion: missing (gpuslice.io/v1)");
    expect_refused("no kind",
                   claim_allocated(RESULT_QUARTER, config("FromClaim", "", "{\"apiVersion\":\"gpuslice.io/v1\"}")),
                   PREFIX CONFIG0 ".kind: missing (SliceConfig)");
    expect_refused("parameters an array", claim_allocated(RESULT_QUARTER, config("FromClaim", "", "[1]")),
                   PREFIX CONFIG0 ": [1] is not an object");
    expect_refused("parameters a string", claim_allocated(RESULT_QUARTER, config("FromClaim", "", "\"limit=1\"")),
                   PREFIX CONFIG0 ": \"limit=1\" is not an object");
    /* The second entry is the one named. */
    char two[2048];
    snprintf(two, sizeof two, "%s,%s",
             config("FromClass", "", "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\",\"limit\":0.5}"),
             config("FromClaim", "\"requests\":[\"gpu\"],",
                    "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\",\"limit\":2}"));
    expect_refused("the second entry", claim_allocated(RESULT_QUARTER, two),
                   PREFIX "status.allocation.devices.config[1].opaque.parameters.limit: 2 is out of range (0.001 to 1)");
    expect_refused("requests not strings",
                   claim_allocated(RESULT_QUARTER, config("FromClaim", "\"requests\":[7],", "{}")),
                   PREFIX "status.allocation.devices.config[0].requests[0]: 7 is not a string");
    expect_refused("an opaque without driver",
                   claim_allocated(RESULT_QUARTER, "{\"source\":\"FromClaim\",\"opaque\":{\"parameters\":{}}}"),
                   PREFIX "status.allocation.devices.config[0].opaque.driver: missing");

    /* The results' fields. */
    expect_refused("share not a quantity",
                   claim_allocated("{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":\"gpu-0\","
                                   "\"consumedCapacity\":{\"share\":\"25x\"}}",
                                   ""),
                   PREFIX "status.allocation.devices.results[0].consumedCapacity.share: quantity \"25x\" has an "
                          "unknown suffix \"x\"");
    expect_refused("memory negative",
                   claim_allocated("{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":\"gpu-0\","
                                   "\"consumedCapacity\":{\"memory\":\"-8Gi\"}}",
                                   ""),
                   PREFIX "status.allocation.devices.results[0].consumedCapacity.memory: quantity \"-8Gi\" is negative");
    expect_refused("memory an object",
                   claim_allocated("{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":\"gpu-0\","
                                   "\"consumedCapacity\":{\"memory\":{}}}",
                                   ""),
                   PREFIX "status.allocation.devices.results[0].consumedCapacity.memory: {} is not a quantity");
    expect_refused("no request",
                   claim_allocated("{\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":\"gpu-0\"}", ""),
                   PREFIX "status.allocation.devices.results[0].request: missing");
    expect_refused("device a number",
                   claim_allocated("{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"p\",\"device\":0}", ""),
                   PREFIX "status.allocation.devices.results[0].device: 0 is not a string");
    expect_refused("a result not an object", claim_allocated("7", ""),
                   PREFIX "status.allocation.devices.results[0]: 7 is not an object");
    expect_refused("results not an array",
                   claim_with_status(UID, "{\"allocation\":{\"devices\":{\"results\":{}}}}"),
                   PREFIX "status.allocation.devices.results: {} is not an array");
    char long_pool[600];
    snprintf(long_pool, sizeof long_pool,
             "{\"request\":\"gpu\",\"driver\":\"gpuslice.io\",\"pool\":\"%0300d\",\"device\":\"gpu-0\"}", 0);
    expect_refused("a pool too long", claim_allocated(long_pool, ""),
                   PREFIX "status.allocation.devices.results[0].pool: longer than 255 characters");

    /* Not a claim at all. */
    expect_refused("malformed JSON", "{\"metadata\":{\"uid\":", PREFIX "malformed JSON: unexpected end of data (byte 19)");
    expect_refused("junk after the JSON", "{\"metadata\":{}} x", PREFIX "malformed JSON: unexpected character (byte 16)");
    expect_refused("empty", "", PREFIX "malformed JSON: unexpected end of data (byte 0)");
    /* json-c reads single-quoted strings even when strict: such a claim is
     * then judged by its fields. */
    expect_refused("single quotes", "{'metadata':{}}", PREFIX "metadata.uid: missing");
    expect_refused("an array", "[]", PREFIX "not a JSON object (array)");
    expect_refused("null", "null", PREFIX "not a JSON object (null)");
    expect_refused("no metadata", "{}", PREFIX "metadata: missing or not an object");
    expect_refused("uid a number", "{\"metadata\":{\"uid\":1}}", PREFIX "metadata.uid: 1 is not a string");
    static char deep[20001];
    memset(deep, '[', sizeof deep - 1);
    expect_refused("nested 20000 deep", deep, PREFIX "malformed JSON: nesting too deep...");
    expect_refused("invalid UTF-8", "{\"metadata\":{\"uid\":\"\xff\"}}", PREFIX "malformed JSON: invalid utf-8 string...");

    struct dra_claim claim;
    EXPECT(dra_claim_parse(NULL, &ref, &claim, error, sizeof error) == KUBE_CLAIM_BAD);
    EXPECT(dra_claim_parse("{}", NULL, &claim, error, sizeof error) == KUBE_CLAIM_BAD &&
           strncmp(error, "claim ?/?: ", 11) == 0);
}

/* Every prefix of a valid claim with configuration, and claims with bytes
 * changed (a fixed pseudo-random sequence): refused or read, never a crash;
 * a message always names the claim and is one line. */
static void robustness(void)
{
    char configs[2048];
    snprintf(configs, sizeof configs, "%s",
             config("FromClaim", "\"requests\":[\"gpu\"],",
                    "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"SliceConfig\",\"limit\":0.5,\"class\":\"batch\","
                    "\"preempt_ms\":20}"));
    static char valid[1 << 14], changed[1 << 14];
    snprintf(valid, sizeof valid, "%s", claim_allocated(RESULT_QUARTER, configs));
    size_t length = strlen(valid);
    struct dra_claim claim;
    int prefixes_refused = 0, messages_ok = 0, tries = 0;
    for (size_t n = 0; n < length; n++) {
        memcpy(changed, valid, n);
        changed[n] = '\0';
        prefixes_refused += parse(changed, &claim) == KUBE_CLAIM_BAD;
        messages_ok += strncmp(error, PREFIX, strlen(PREFIX)) == 0 && !strchr(error, '\n');
        tries++;
    }
    EXPECT(prefixes_refused == (int)length);
    uint32_t seed = 12345;
    int read = 0;
    static const char replacements[] = "{}[]\",:0123456789.-eE tfnul\\x\x01\xc3";
    for (int i = 0; i < 5000; i++) {
        memcpy(changed, valid, length + 1);
        for (int k = 0; k < 1 + i % 3; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % length;
            seed = seed * 1103515245u + 12345u;
            changed[at] = replacements[(seed >> 8) % (sizeof replacements - 1)];
        }
        int rc = parse(changed, &claim);
        read += rc == 0;
        if (rc != 0)
            messages_ok += strncmp(error, PREFIX, strlen(PREFIX)) == 0 && !strchr(error, '\n');
        else
            messages_ok += claim.ndevices == 1;
        tries++;
    }
    printf("ok: %zu prefixes refused, %d of 5000 altered claims still read, %d of %d answers well formed\n",
           length, read, messages_ok, tries);
    EXPECT(messages_ok == tries);
}

int main(void)
{
    accepted();
    refusals();
    robustness();
    return check_finish();
}
