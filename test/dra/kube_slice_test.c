/*
 * The node's ResourceSlice body (dra/kube/slice.c): its name made a DNS
 * subdomain, the driver version as a semantic version or a string, each
 * field of a slice of two GPUs (its owner, the Node, included), and the request policies of many GPU sizes
 * and policies checked against the API's rules for a capacity's range.
 */
#include "check.h"
#include "kube_internal.h"
#include "quantity.h"
#include "test_slice_policy.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODE_UID "9a4e6f0c-31d2-4b7a-8c55-0e2f1d3b6a71"

/* obj at a dotted path ("spec.pool.name"; a number is an array index). */
static json_object *at(json_object *obj, const char *path)
{
    char copy[256];
    snprintf(copy, sizeof copy, "%s", path);
    char *save = NULL;
    for (char *part = strtok_r(copy, ".", &save); part && obj; part = strtok_r(NULL, ".", &save)) {
        json_object *next = NULL;
        if (json_object_is_type(obj, json_type_array))
            next = json_object_array_get_idx(obj, (size_t)atoi(part));
        else if (!json_object_object_get_ex(obj, part, &next))
            next = NULL;
        obj = next;
    }
    return obj;
}

static bool is_text(json_object *root, const char *path, const char *want)
{
    json_object *value = at(root, path);
    bool ok = value && json_object_is_type(value, json_type_string) && strcmp(json_object_get_string(value), want) == 0;
    if (!ok)
        printf("%s: %s, want \"%s\"\n", path, value ? json_object_to_json_string(value) : "absent", want);
    return ok;
}

static bool is_int(json_object *root, const char *path, int64_t want)
{
    json_object *value = at(root, path);
    bool ok = value && json_object_is_type(value, json_type_int) && json_object_get_int64(value) == want;
    if (!ok)
        printf("%s: %s, want %lld\n", path, value ? json_object_to_json_string(value) : "absent", (long long)want);
    return ok;
}

static uint64_t amount(json_object *capacity, const char *path)
{
    json_object *value = at(capacity, path);
    uint64_t bytes = UINT64_MAX;
    char error[128];
    if (!value || !json_object_is_type(value, json_type_string) ||
        kube_quantity_bytes(json_object_get_string(value), &bytes, error, sizeof error) != 0)
        return UINT64_MAX;
    return bytes;
}

/* The API's rules for a capacity's request policy with a range
 * (resource.k8s.io validation): min <= value, min <= default <= max <=
 * value, min + step <= value, (max - min) and (default - min) whole steps. */
static bool valid_capacity(json_object *capacity, const char *what)
{
    uint64_t value = amount(capacity, "value"), def = amount(capacity, "requestPolicy.default"),
             min = amount(capacity, "requestPolicy.validRange.min"),
             max = amount(capacity, "requestPolicy.validRange.max");
    json_object *step_text = at(capacity, "requestPolicy.validRange.step");
    uint64_t step = step_text ? amount(capacity, "requestPolicy.validRange.step") : 0;
    bool ok = value != UINT64_MAX && def != UINT64_MAX && min != UINT64_MAX && max != UINT64_MAX &&
              step != UINT64_MAX && min <= value && min <= def && def <= max && max <= value &&
              (!step || (min + step <= value && (max - min) % step == 0 && (def - min) % step == 0));
    if (!ok)
        printf("%s: capacity %s breaks the API's rules\n", what, json_object_to_json_string(capacity));
    return ok;
}

static void names(void)
{
    char name[300];
    dra_slice_name("node-a", name, sizeof name);
    EXPECT(strcmp(name, "node-a-gpuslice.io") == 0);
    dra_slice_name("Worker_7.Example.COM", name, sizeof name);
    EXPECT(strcmp(name, "worker-7.example.com-gpuslice.io") == 0);
    dra_slice_name("..-x-..y", name, sizeof name);
    EXPECT(strcmp(name, "x.y-gpuslice.io") == 0);
    dra_slice_name("", name, sizeof name);
    EXPECT(strcmp(name, "node-gpuslice.io") == 0);
    dra_slice_name(NULL, name, sizeof name);
    EXPECT(strcmp(name, "node-gpuslice.io") == 0);
    char long_a[301], long_b[301], name_b[300];
    memset(long_a, 'a', 300);
    long_a[300] = '\0';
    memcpy(long_b, long_a, sizeof long_b);
    long_b[299] = 'b';
    dra_slice_name(long_a, name, sizeof name);
    dra_slice_name(long_b, name_b, sizeof name_b);
    printf("ok: a 300-character node's slice: %.20s...%s (%zu characters)\n", name, name + strlen(name) - 25,
           strlen(name));
    EXPECT(strlen(name) == 253 && kube_is_dns_subdomain(name) && strcmp(name, name_b) != 0 &&
           strlen(name_b) == 253 && strcmp(name + 253 - strlen("-gpuslice.io"), "-gpuslice.io") == 0);
    /* Every name made is a DNS subdomain. */
    static const char *const nodes[] = {"a", "A", "-", ".", "a..b", "a.-b", "a_b.c_d", "ü-node", "x.", "9"};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        dra_slice_name(nodes[i], name, sizeof name);
        if (!kube_is_dns_subdomain(name))
            printf("node \"%s\": slice name \"%s\" is not a DNS subdomain\n", nodes[i], name);
        EXPECT(kube_is_dns_subdomain(name));
    }
    EXPECT(kube_is_dns_label("default") && !kube_is_dns_label("Default") && !kube_is_dns_label("a.b") &&
           !kube_is_dns_label("-a") && !kube_is_dns_label(""));
    EXPECT(kube_is_dns_subdomain("a.b-c.d") && !kube_is_dns_subdomain("a..b") && !kube_is_dns_subdomain("a/b") &&
           !kube_is_dns_subdomain("a.") && !kube_is_dns_subdomain("a_b"));
}

static void versions(void)
{
    static const struct {
        const char *driver;
        const char *semver; /* NULL: not a semantic version */
    } cases[] = {
        {"580.95.05", "580.95.5"}, {"535.104.05", "535.104.5"}, {"550.54", "550.54.0"}, {"1.0.0", "1.0.0"},
        {"fakecuda", NULL},        {"", NULL},                  {"580", NULL},          {"1.2.3.4", NULL},
        {"1..2", NULL},            {"1.2.", NULL},              {"580.95.05-rc1", NULL}, {"999999999999.1", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[64] = "";
        bool ok = dra_driver_semver(cases[i].driver, out, sizeof out);
        bool right = cases[i].semver ? ok && strcmp(out, cases[i].semver) == 0 : !ok;
        if (!right)
            printf("driver version \"%s\": %s \"%s\"\n", cases[i].driver, ok ? "semver" : "not semver", out);
        EXPECT(right);
    }
}

static void body(void)
{
    const struct dra_gpu gpus[] = {
        {.index = 0,
         .uuid = "GPU-1b2c3d4e-0000-1111-2222-333344445555",
         .product = "NVIDIA H100 80GB HBM3",
         .memory_bytes = 80ull << 30,
         .driver_version = "580.95.05"},
        {.index = 3,
         .uuid = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
         .product = "A product name far longer than the sixty-four bytes a string attribute may have",
         .memory_bytes = 85520809984ull,
         .driver_version = "fakecuda"},
    };
    const struct dra_slice_policy policy = test_slice_policy;
    char *text = dra_slice_body("node-a", NODE_UID, gpus, 2, &policy);
    EXPECT(text != NULL);
    json_object *slice = text ? json_tokener_parse(text) : NULL;
    EXPECT(slice != NULL);
    printf("ok: the body: %.300s...\n", text ? text : "");
    EXPECT(is_text(slice, "apiVersion", "resource.k8s.io/v1") && is_text(slice, "kind", "ResourceSlice"));
    EXPECT(is_text(slice, "metadata.name", "node-a-gpuslice.io"));
    EXPECT(json_object_array_length(at(slice, "metadata.ownerReferences")) == 1 &&
           is_text(slice, "metadata.ownerReferences.0.apiVersion", "v1") &&
           is_text(slice, "metadata.ownerReferences.0.kind", "Node") &&
           is_text(slice, "metadata.ownerReferences.0.name", "node-a") &&
           is_text(slice, "metadata.ownerReferences.0.uid", NODE_UID) &&
           json_object_get_boolean(at(slice, "metadata.ownerReferences.0.controller")) &&
           !at(slice, "metadata.ownerReferences.0.blockOwnerDeletion"));
    EXPECT(is_text(slice, "spec.driver", "gpuslice.io") && is_text(slice, "spec.nodeName", "node-a"));
    EXPECT(is_text(slice, "spec.pool.name", "node-a") && is_int(slice, "spec.pool.generation", 1) &&
           is_int(slice, "spec.pool.resourceSliceCount", 1));
    EXPECT(json_object_array_length(at(slice, "spec.devices")) == 2);
    EXPECT(is_text(slice, "spec.devices.0.name", "gpu-0") && is_text(slice, "spec.devices.1.name", "gpu-3"));
    EXPECT(is_text(slice, "spec.devices.0.attributes.uuid.string", "GPU-1b2c3d4e-0000-1111-2222-333344445555"));
    EXPECT(is_text(slice, "spec.devices.0.attributes.productName.string", "NVIDIA H100 80GB HBM3"));
    EXPECT(is_int(slice, "spec.devices.0.attributes.index.int", 0) &&
           is_int(slice, "spec.devices.1.attributes.index.int", 3));
    EXPECT(is_text(slice, "spec.devices.0.attributes.driverVersion.version", "580.95.5"));
    EXPECT(is_text(slice, "spec.devices.1.attributes.driverVersion.string", "fakecuda") &&
           !at(slice, "spec.devices.1.attributes.driverVersion.version"));
    EXPECT(strlen(json_object_get_string(at(slice, "spec.devices.1.attributes.productName.string"))) == 64);
    EXPECT(json_object_get_boolean(at(slice, "spec.devices.0.allowMultipleAllocations")) &&
           json_object_is_type(at(slice, "spec.devices.0.allowMultipleAllocations"), json_type_boolean));
    EXPECT(is_text(slice, "spec.devices.0.capacity.share.value", "100") &&
           is_text(slice, "spec.devices.0.capacity.share.requestPolicy.default", "10") &&
           is_text(slice, "spec.devices.0.capacity.share.requestPolicy.validRange.min", "1") &&
           is_text(slice, "spec.devices.0.capacity.share.requestPolicy.validRange.max", "100") &&
           is_text(slice, "spec.devices.0.capacity.share.requestPolicy.validRange.step", "1"));
    EXPECT(is_text(slice, "spec.devices.0.capacity.memory.value", "80Gi") &&
           is_text(slice, "spec.devices.0.capacity.memory.requestPolicy.default", "1Gi") &&
           is_text(slice, "spec.devices.0.capacity.memory.requestPolicy.validRange.min", "256Mi") &&
           is_text(slice, "spec.devices.0.capacity.memory.requestPolicy.validRange.max", "80Gi") &&
           is_text(slice, "spec.devices.0.capacity.memory.requestPolicy.validRange.step", "256Mi"));
    /* 81559Mi is no whole number of 256Mi steps: the range ends at the last. */
    EXPECT(is_text(slice, "spec.devices.1.capacity.memory.value", "81559Mi") &&
           is_text(slice, "spec.devices.1.capacity.memory.requestPolicy.validRange.max", "81408Mi"));
    EXPECT(!at(slice, "spec.devices.0.attributes.memory") && !at(slice, "status"));
    json_object_put(slice);
    free(text);

    /* No policy: the whole GPU for a request that names nothing; no owner. */
    text = dra_slice_body("node-a", NULL, gpus, 1, NULL);
    slice = text ? json_tokener_parse(text) : NULL;
    EXPECT(is_text(slice, "spec.devices.0.capacity.share.requestPolicy.default", "100") &&
           is_text(slice, "spec.devices.0.capacity.share.requestPolicy.validRange.min", "1") &&
           is_text(slice, "spec.devices.0.capacity.memory.requestPolicy.default", "80Gi") &&
           is_text(slice, "spec.devices.0.capacity.memory.requestPolicy.validRange.min", "0") &&
           !at(slice, "spec.devices.0.capacity.memory.requestPolicy.validRange.step") &&
           !at(slice, "metadata.ownerReferences"));
    json_object_put(slice);
    free(text);

    /* No GPUs: a slice with no devices. */
    text = dra_slice_body("node-a", NODE_UID, NULL, 0, &policy);
    slice = text ? json_tokener_parse(text) : NULL;
    EXPECT(slice && json_object_array_length(at(slice, "spec.devices")) == 0);
    json_object_put(slice);
    free(text);
    EXPECT(dra_slice_body(NULL, NODE_UID, gpus, 1, &policy) == NULL &&
           dra_slice_body("node-a", NODE_UID, NULL, 1, &policy) == NULL);
}

/* Request policies for many sizes and policies all keep the API's rules. */
static void policies(void)
{
    static const uint64_t memories[] = {100, 1ull << 20, 255ull << 20, 256ull << 20, 257ull << 20, 3000000000ull,
                                        16ull << 30, 85520809984ull, 141ull << 30};
    static const struct dra_slice_policy policies[] = {
        {100, 10, 1, 1ull << 30, 256ull << 20, 256ull << 20},
        {100, 0, 0, 0, 0, 0},
        {100, 1000, 200, 1000ull << 20, 256ull << 20, 256ull << 20},
        {100, 5, 5, 0, 1ull << 30, 1000},
        {50, 100, 60, 100ull << 40, 1ull << 40, 3},
        {1, 1, 1, 1, 1, 1},
    };
    int checked = 0;
    for (size_t m = 0; m < sizeof memories / sizeof memories[0]; m++) {
        for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
            struct dra_gpu gpu = {.index = 0, .uuid = "GPU-x", .product = "p", .memory_bytes = memories[m],
                                  .driver_version = "1.2.3"};
            char *text = dra_slice_body("n", NULL, &gpu, 1, &policies[p]);
            json_object *slice = text ? json_tokener_parse(text) : NULL;
            char what[64];
            snprintf(what, sizeof what, "memory %llu policy %zu", (unsigned long long)memories[m], p);
            EXPECT(slice && valid_capacity(at(slice, "spec.devices.0.capacity.share"), what) &&
                   valid_capacity(at(slice, "spec.devices.0.capacity.memory"), what));
            checked++;
            json_object_put(slice);
            free(text);
        }
    }
    printf("ok: %d request policies keep the API's rules for a range\n", checked);
}

int main(void)
{
    names();
    versions();
    body();
    policies();
    return check_finish();
}
