/*
 * The node's ResourceSlice (resource.k8s.io/v1): its name, its body (one
 * device per GPU with its attributes and the consumable capacities
 * "share" and "memory", their request policies made valid for the API's
 * rules), its owner (the Node, so that the API server deletes the slice
 * with its node), and publishing it: created when absent, replaced with the
 * next pool generation when its devices or owner changed, left alone when
 * they did not.
 */
#include "kube_internal.h"
#include "quantity.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLICE_NAME_SUFFIX "-" DRA_DRIVER_NAME
#define SLICE_NAME_MAX 253
/* The API's longest string and version attribute value. */
#define ATTRIBUTE_VALUE_MAX 64
/* Tries of the read-compare-write cycle when another writer wins. */
#define PUBLISH_TRIES 5
#define FIELD_MANAGER "?fieldManager=gpuslice-dra"

/* ---- names and versions ---------------------------------------------------- */

static uint32_t fnv1a(const char *text)
{
    uint32_t hash = 2166136261u;
    for (; *text; text++)
        hash = (hash ^ (unsigned char)*text) * 16777619u;
    return hash;
}

void dra_slice_name(const char *node_name, char *out, size_t out_size)
{
    char name[SLICE_NAME_MAX + 1];
    size_t length = 0;
    /* Lower case, each dot-separated label of [a-z0-9-] without a '-' at
     * either end, empty labels dropped. */
    const char *label = node_name ? node_name : "";
    while (*label) {
        size_t label_length = strcspn(label, ".");
        char part[SLICE_NAME_MAX + 1];
        size_t part_length = 0;
        for (size_t i = 0; i < label_length && part_length < SLICE_NAME_MAX; i++) {
            char c = label[i];
            if (c >= 'A' && c <= 'Z')
                c = (char)(c - 'A' + 'a');
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
                c = '-';
            part[part_length++] = c;
        }
        size_t start = 0;
        while (start < part_length && part[start] == '-')
            start++;
        while (part_length > start && part[part_length - 1] == '-')
            part_length--;
        if (part_length > start) {
            if (length > 0 && length < SLICE_NAME_MAX)
                name[length++] = '.';
            for (size_t i = start; i < part_length && length < SLICE_NAME_MAX; i++)
                name[length++] = part[i];
        }
        label += label_length;
        if (*label == '.')
            label++;
    }
    if (length == 0) {
        memcpy(name, "node", 4);
        length = 4;
    }
    name[length] = '\0';
    char hash[16] = "";
    if (length + strlen(SLICE_NAME_SUFFIX) > SLICE_NAME_MAX) {
        /* Cut, and told apart from other long names by a hash of the whole. */
        snprintf(hash, sizeof hash, "-%08" PRIx32, fnv1a(node_name ? node_name : ""));
        length = SLICE_NAME_MAX - strlen(SLICE_NAME_SUFFIX) - strlen(hash);
        while (length > 0 && (name[length - 1] == '-' || name[length - 1] == '.'))
            length--;
        name[length] = '\0';
    }
    snprintf(out, out_size, "%s%s%s", name, hash, SLICE_NAME_SUFFIX);
}

/* Parses one decimal component of a version (leading zeros allowed): its
 * end, or NULL. */
static const char *version_component(const char *p, unsigned long *value)
{
    if (*p < '0' || *p > '9')
        return NULL;
    *value = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (*value > 99999999ul)
            return NULL;
        *value = *value * 10 + (unsigned long)(*p - '0');
    }
    return p;
}

bool dra_driver_semver(const char *driver_version, char *out, size_t out_size)
{
    unsigned long parts[3] = {0, 0, 0};
    const char *p = driver_version;
    int n = 0;
    if (!p)
        return false;
    for (;;) {
        if (!(p = version_component(p, &parts[n++])))
            return false;
        if (*p == '\0')
            break;
        if (*p != '.' || n == 3)
            return false;
        p++;
    }
    if (n < 2)
        return false;
    int written = snprintf(out, out_size, "%lu.%lu.%lu", parts[0], parts[1], parts[2]);
    return written > 0 && (size_t)written < out_size;
}

/* ---- the body -------------------------------------------------------------------- */

/* Builds JSON, remembering any allocation that failed. */
struct builder {
    bool failed;
};

static json_object *put(struct builder *b, json_object *object, const char *key, json_object *value)
{
    if (!value || !object || json_object_object_add(object, key, value) != 0) {
        json_object_put(value);
        b->failed = true;
        return NULL;
    }
    return value;
}

static json_object *put_text(struct builder *b, json_object *object, const char *key, const char *text)
{
    return put(b, object, key, json_object_new_string(text));
}

static json_object *put_quantity(struct builder *b, json_object *object, const char *key, uint64_t value,
                                 bool bytes)
{
    char text[32];
    if (bytes) {
        if (!kube_quantity_format_bytes(value, text, sizeof text)) {
            b->failed = true;
            return NULL;
        }
    } else {
        snprintf(text, sizeof text, "%" PRIu64, value);
    }
    return put_text(b, object, key, text);
}

/* A string attribute's value, cut to the API's 64 bytes (not inside a
 * UTF-8 character). */
static void attribute_text(const char *text, char out[ATTRIBUTE_VALUE_MAX + 1])
{
    size_t length = strlen(text);
    if (length > ATTRIBUTE_VALUE_MAX) {
        length = ATTRIBUTE_VALUE_MAX;
        while (length > 0 && ((unsigned char)text[length] & 0xC0) == 0x80)
            length--;
    }
    memcpy(out, text, length);
    out[length] = '\0';
}

static void put_attribute(struct builder *b, json_object *attributes, const char *name, const char *type,
                          json_object *value)
{
    json_object *attribute = put(b, attributes, name, json_object_new_object());
    put(b, attribute, type, value); /* frees value if attribute is NULL */
}

/* A capacity with a range policy: value, default, min, max, step (0: no
 * step), each already valid by the API's rules. */
static void put_capacity(struct builder *b, json_object *capacities, const char *name, uint64_t value,
                         uint64_t default_value, uint64_t min, uint64_t max, uint64_t step, bool bytes)
{
    json_object *capacity = put(b, capacities, name, json_object_new_object());
    put_quantity(b, capacity, "value", value, bytes);
    json_object *policy = put(b, capacity, "requestPolicy", json_object_new_object());
    put_quantity(b, policy, "default", default_value, bytes);
    json_object *range = put(b, policy, "validRange", json_object_new_object());
    put_quantity(b, range, "min", min, bytes);
    put_quantity(b, range, "max", max, bytes);
    if (step)
        put_quantity(b, range, "step", step, bytes);
}

/* The API's rules for a range (resource.k8s.io validation): min <= max <=
 * value, min <= default <= max, and with a step min + step <= value, max
 * and default a whole number of steps above min. The policy's figures are
 * moved to the nearest values that keep them. */
struct range {
    uint64_t default_value, min, max, step;
};

static struct range valid_range(uint64_t value, uint64_t default_value, uint64_t min, uint64_t step)
{
    struct range r = {.min = min > value ? value : min, .step = step};
    if (r.step && (r.step > value || r.min > value - r.step)) {
        r.step = 0; /* not one step fits: any amount in the range */
    }
    r.max = r.step ? r.min + (value - r.min) / r.step * r.step : value;
    r.default_value = default_value < r.min ? r.min : default_value > r.max ? r.max : default_value;
    if (r.step && (r.default_value - r.min) % r.step != 0) {
        uint64_t up = r.min + ((r.default_value - r.min) / r.step + 1) * r.step;
        r.default_value = up > r.max ? r.max : up;
    }
    return r;
}

static void put_device(struct builder *b, json_object *devices, const struct dra_gpu *gpu,
                       const struct dra_slice_policy *policy)
{
    json_object *device = json_object_new_object();
    if (!device || json_object_array_add(devices, device) != 0) {
        json_object_put(device);
        b->failed = true;
        return;
    }
    char name[32], text[ATTRIBUTE_VALUE_MAX + 1], version[ATTRIBUTE_VALUE_MAX + 1];
    snprintf(name, sizeof name, "gpu-%u", gpu->index);
    put_text(b, device, "name", name);
    json_object *attributes = put(b, device, "attributes", json_object_new_object());
    attribute_text(gpu->uuid, text);
    put_attribute(b, attributes, "uuid", "string", json_object_new_string(text));
    attribute_text(gpu->product, text);
    put_attribute(b, attributes, "productName", "string", json_object_new_string(text));
    put_attribute(b, attributes, "index", "int", json_object_new_int64(gpu->index));
    if (dra_driver_semver(gpu->driver_version, version, sizeof version)) {
        put_attribute(b, attributes, "driverVersion", "version", json_object_new_string(version));
    } else {
        attribute_text(gpu->driver_version, text);
        put_attribute(b, attributes, "driverVersion", "string", json_object_new_string(text));
    }

    json_object *capacities = put(b, device, "capacity", json_object_new_object());
    uint64_t share_total = policy->share_total ? policy->share_total : 100;
    struct range share = valid_range(share_total, policy->share_default ? policy->share_default : share_total,
                                     policy->share_min ? policy->share_min : 1, 1);
    put_capacity(b, capacities, "share", share_total, share.default_value, share.min, share.max, share.step, false);
    struct range memory = valid_range(gpu->memory_bytes,
                                      policy->memory_default ? policy->memory_default : gpu->memory_bytes,
                                      policy->memory_min, policy->memory_step);
    put_capacity(b, capacities, "memory", gpu->memory_bytes, memory.default_value, memory.min, memory.max,
                 memory.step, true);
    put(b, device, "allowMultipleAllocations", json_object_new_boolean(1));
}

/* The slice as a JSON object (generation 1), owned by the Node of uid
 * node_uid if one is given: NULL if out of memory. */
static json_object *slice_object(const char *node_name, const char *node_uid, const struct dra_gpu *gpus,
                                 int ngpus, const struct dra_slice_policy *policy)
{
    static const struct dra_slice_policy no_policy = {0};
    if (!node_name || ngpus < 0 || (ngpus > 0 && !gpus))
        return NULL;
    if (!policy)
        policy = &no_policy;
    struct builder b = {false};
    char name[SLICE_NAME_MAX + 1];
    dra_slice_name(node_name, name, sizeof name);
    json_object *slice = json_object_new_object();
    if (!slice)
        return NULL;
    put_text(&b, slice, "apiVersion", "resource.k8s.io/v1");
    put_text(&b, slice, "kind", "ResourceSlice");
    json_object *metadata = put(&b, slice, "metadata", json_object_new_object());
    put_text(&b, metadata, "name", name);
    if (node_uid) {
        json_object *owners = put(&b, metadata, "ownerReferences", json_object_new_array());
        json_object *owner = json_object_new_object();
        if (owners && owner && json_object_array_add(owners, owner) == 0) {
            put_text(&b, owner, "apiVersion", "v1");
            put_text(&b, owner, "kind", "Node");
            put_text(&b, owner, "name", node_name);
            put_text(&b, owner, "uid", node_uid);
            put(&b, owner, "controller", json_object_new_boolean(1));
        } else {
            json_object_put(owner);
            b.failed = true;
        }
    }
    json_object *spec = put(&b, slice, "spec", json_object_new_object());
    put_text(&b, spec, "driver", DRA_DRIVER_NAME);
    put_text(&b, spec, "nodeName", node_name);
    json_object *pool = put(&b, spec, "pool", json_object_new_object());
    put_text(&b, pool, "name", node_name);
    put(&b, pool, "generation", json_object_new_int64(1));
    put(&b, pool, "resourceSliceCount", json_object_new_int64(1));
    json_object *devices = put(&b, spec, "devices", json_object_new_array());
    for (int i = 0; i < ngpus && devices; i++)
        put_device(&b, devices, &gpus[i], policy);
    if (b.failed) {
        json_object_put(slice);
        return NULL;
    }
    return slice;
}

static char *to_text(json_object *object)
{
    const char *text = json_object_to_json_string_ext(object, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    return text ? strdup(text) : NULL;
}

char *dra_slice_body(const char *node_name, const char *node_uid, const struct dra_gpu *gpus, int ngpus,
                     const struct dra_slice_policy *policy)
{
    json_object *slice = slice_object(node_name, node_uid, gpus, ngpus, policy);
    if (!slice)
        return NULL;
    char *text = to_text(slice);
    json_object_put(slice);
    return text;
}

/* ---- publishing -------------------------------------------------------------------- */

static json_object *member(json_object *obj, const char *key)
{
    json_object *value = NULL;
    if (!obj || !json_object_is_type(obj, json_type_object) || !json_object_object_get_ex(obj, key, &value))
        return NULL;
    return value;
}

/* Two quantities of the same amount ("3G" as the API writes back what was
 * sent as "3000000000"). */
static bool same_quantity(json_object *a, json_object *b)
{
    const char *ta = json_object_get_string(a), *tb = json_object_get_string(b);
    uint64_t ua, ub;
    double da, db;
    char ignored[128];
    return ta && tb && kube_quantity_bytes(ta, &ua, ignored, sizeof ignored) == 0 &&
           kube_quantity_bytes(tb, &ub, ignored, sizeof ignored) == 0 && ua == ub &&
           kube_quantity_double(ta, &da, ignored, sizeof ignored) == 0 &&
           kube_quantity_double(tb, &db, ignored, sizeof ignored) == 0 && da == db;
}

/* Deep equality, quantities under "capacity" compared by amount. */
static bool same_json(json_object *a, json_object *b, bool quantities)
{
    if (!a || !b)
        return a == b;
    json_type type = json_object_get_type(a);
    if (type != json_object_get_type(b))
        return false;
    switch (type) {
    case json_type_null:
        return true;
    case json_type_boolean:
        return json_object_get_boolean(a) == json_object_get_boolean(b);
    case json_type_int:
        return json_object_get_int64(a) == json_object_get_int64(b);
    case json_type_double:
        return json_object_get_double(a) == json_object_get_double(b);
    case json_type_string:
        return strcmp(json_object_get_string(a), json_object_get_string(b)) == 0 ||
               (quantities && same_quantity(a, b));
    case json_type_array: {
        size_t n = json_object_array_length(a);
        if (n != json_object_array_length(b))
            return false;
        for (size_t i = 0; i < n; i++) {
            if (!same_json(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i), quantities))
                return false;
        }
        return true;
    }
    case json_type_object: {
        if (json_object_object_length(a) != json_object_object_length(b))
            return false;
        json_object_object_foreach(a, key, value)
        {
            json_object *other = member(b, key);
            if (!other || !same_json(value, other, quantities || strcmp(key, "capacity") == 0))
                return false;
        }
        return true;
    }
    }
    return false;
}

/* Whether the published slice says what want says (its owner and spec, all
 * but the pool's generation; not the metadata the API server keeps). */
static bool slice_unchanged(json_object *published, json_object *want)
{
    if (!same_json(member(member(published, "metadata"), "ownerReferences"),
                   member(member(want, "metadata"), "ownerReferences"), false))
        return false;
    json_object *p = member(published, "spec"), *w = member(want, "spec");
    static const char *const keys[] = {"driver", "nodeName", "devices"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!same_json(member(p, keys[i]), member(w, keys[i]), false))
            return false;
    }
    json_object *pp = member(p, "pool"), *wp = member(w, "pool");
    return same_json(member(pp, "name"), member(wp, "name"), false) &&
           same_json(member(pp, "resourceSliceCount"), member(wp, "resourceSliceCount"), false);
}

/* Makes want the replacement of published: its metadata (resourceVersion
 * included, the managed fields left to the API server) with want's owner,
 * and the next pool generation. false with a message if published lacks
 * them. */
static bool make_update(json_object *published, json_object *want, const char *name, char *error,
                        size_t error_size)
{
    json_object *metadata = member(published, "metadata");
    json_object *version = member(metadata, "resourceVersion");
    json_object *generation = member(member(member(published, "spec"), "pool"), "generation");
    if (!version || !json_object_is_type(version, json_type_string)) {
        snprintf(error, error_size, "ResourceSlice %s: the API's copy has no metadata.resourceVersion", name);
        return false;
    }
    int64_t next = 1;
    if (generation && json_object_is_type(generation, json_type_int) && json_object_get_int64(generation) >= 0 &&
        json_object_get_int64(generation) < INT64_MAX)
        next = json_object_get_int64(generation) + 1;
    json_object *copy = NULL;
    if (json_object_deep_copy(metadata, &copy, NULL) != 0 || !copy) {
        snprintf(error, error_size, "out of memory");
        return false;
    }
    json_object_object_del(copy, "managedFields");
    json_object_object_del(copy, "ownerReferences");
    struct builder b = {false};
    json_object *owners = member(member(want, "metadata"), "ownerReferences");
    if (owners)
        put(&b, copy, "ownerReferences", json_object_get(owners));
    put(&b, want, "metadata", copy);
    put(&b, member(member(want, "spec"), "pool"), "generation", json_object_new_int64(next));
    if (b.failed) {
        snprintf(error, error_size, "out of memory");
        return false;
    }
    return true;
}

/* The uid of the Node node_name (GET /api/v1/nodes/NAME), which owns the
 * slice: 0, or -1 with a message (the RBAC rule it needs named on a 403). */
static int node_uid(struct kube_api *api, const char *node_name, char *uid, size_t uid_size, char *error,
                    size_t error_size)
{
    char path[SLICE_NAME_MAX + 32];
    snprintf(path, sizeof path, "/api/v1/nodes/%s", node_name);
    char *answer = NULL;
    int status = kube_api_request_retrying(api, "GET", path, NULL, NULL, &answer, error, error_size);
    int rc = -1;
    if (status == 200) {
        json_object *node = json_tokener_parse(answer);
        json_object *metadata = member(node, "metadata");
        json_object *name = member(metadata, "name"), *value = member(metadata, "uid");
        if (!value || !json_object_is_type(value, json_type_string) || json_object_get_string_len(value) == 0 ||
            (size_t)json_object_get_string_len(value) >= uid_size)
            snprintf(error, error_size, "GET %s: the answer has no metadata.uid of at most %zu characters", path,
                     uid_size - 1);
        else if (!name || !json_object_is_type(name, json_type_string) ||
                 strcmp(json_object_get_string(name), node_name) != 0)
            snprintf(error, error_size, "GET %s: the answer is not of node %s", path, node_name);
        else {
            snprintf(uid, uid_size, "%s", json_object_get_string(value));
            rc = 0;
        }
        json_object_put(node);
    } else if (status >= 0) {
        char message[320];
        kube_api_answer_message(answer, message, sizeof message);
        snprintf(error, error_size, "GET %s (the slice's owner): HTTP %d: %s%s", path, status, message,
                 status == 403 ? " (gpuslice-dra needs \"get\" on nodes: deploy/kubernetes/dra-rbac.yaml)" : "");
    }
    free(answer);
    return rc;
}

/* One write (POST or PUT) of want: the HTTP status, or -1 with a message. */
static int write_slice(struct kube_api *api, const char *method, const char *path, json_object *want,
                       char *error, size_t error_size)
{
    char *body = to_text(want);
    if (!body) {
        snprintf(error, error_size, "out of memory");
        return -1;
    }
    char *answer = NULL;
    int status = kube_api_request_retrying(api, method, path, "application/json", body, &answer, error,
                                           error_size);
    free(body);
    if (status >= 0 && status != 200 && status != 201 && status != 409) {
        char message[320];
        kube_api_answer_message(answer, message, sizeof message);
        snprintf(error, error_size, "%s %s: HTTP %d: %s", method, path, status, message);
    }
    free(answer);
    return status;
}

int kube_slice_publish(struct kube_api *api, const char *node_name, const struct dra_gpu *gpus, int ngpus,
                       const struct dra_slice_policy *policy, char *error, size_t error_size)
{
    if (!kube_is_dns_subdomain(node_name)) {
        snprintf(error, error_size, "node name \"%.253s\" is not a DNS subdomain", node_name ? node_name : "");
        return -1;
    }
    char name[SLICE_NAME_MAX + 1];
    dra_slice_name(node_name, name, sizeof name);
    char path[SLICE_NAME_MAX + 128], collection[128];
    snprintf(path, sizeof path, KUBE_RESOURCE_API "/resourceslices/%s", name);
    snprintf(collection, sizeof collection, KUBE_RESOURCE_API "/resourceslices" FIELD_MANAGER);
    char update_path[sizeof path + sizeof FIELD_MANAGER];
    snprintf(update_path, sizeof update_path, "%s" FIELD_MANAGER, path);

    char owner[128];
    if (node_uid(api, node_name, owner, sizeof owner, error, error_size) != 0)
        return -1;
    for (int attempt = 0; attempt < PUBLISH_TRIES; attempt++) {
        json_object *want = slice_object(node_name, owner, gpus, ngpus, policy);
        if (!want) {
            snprintf(error, error_size, "ResourceSlice %s: cannot build it (out of memory, or no GPUs given)", name);
            return -1;
        }
        char *answer = NULL;
        int status = kube_api_request_retrying(api, "GET", path, NULL, NULL, &answer, error, error_size);
        int written;
        if (status == 404) {
            written = write_slice(api, "POST", collection, want, error, error_size);
        } else if (status == 200) {
            json_object *published = json_tokener_parse(answer);
            if (!published || !json_object_is_type(published, json_type_object)) {
                snprintf(error, error_size, "GET %s: the answer is not a JSON object", path);
                written = -1;
            } else if (slice_unchanged(published, want)) {
                written = 200; /* nothing to write */
            } else if (!make_update(published, want, name, error, error_size)) {
                written = -1;
            } else {
                written = write_slice(api, "PUT", update_path, want, error, error_size);
            }
            json_object_put(published);
        } else {
            if (status >= 0) {
                char message[320];
                kube_api_answer_message(answer, message, sizeof message);
                snprintf(error, error_size, "GET %s: HTTP %d: %s", path, status, message);
            }
            written = -1;
        }
        free(answer);
        json_object_put(want);
        if (written == 200 || written == 201)
            return 0;
        if (written != 409)
            return -1;
        /* Another writer came between: read it again. */
    }
    snprintf(error, error_size, "ResourceSlice %s: another writer changed it on each of %d tries", name,
             PUBLISH_TRIES);
    return -1;
}
