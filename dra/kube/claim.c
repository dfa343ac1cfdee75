/*
 * Reading a ResourceClaim (resource.k8s.io/v1) as the API server answers
 * it: that it is the claim the kubelet named (metadata.uid), that it is
 * allocated, this driver's devices among status.allocation.devices.results
 * (request, pool, device, consumedCapacity share and memory) and the opaque
 * configuration (gpuslice.io/v1 SliceConfig) in
 * status.allocation.devices.config that applies to them. The JSON comes
 * from another process: every field is checked for its type, and every
 * refusal names the claim and the field.
 */
#include "kube_internal.h"
#include "quantity.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CONFIG_API_VERSION "gpuslice.io/v1"
#define CONFIG_KIND "SliceConfig"
#define LIMIT_MIN 0.001
#define LIMIT_MAX 1.0
#define PREEMPT_MS_MIN 1
#define PREEMPT_MS_MAX 1000

/* Where a claim's refusals go: every message starts "claim NS/NAME: ". */
struct claim_context {
    const char *namespace_name;
    const char *name;
    char *error;
    size_t error_size;
};

__attribute__((format(printf, 2, 3))) static int refuse(const struct claim_context *claim, const char *format, ...)
{
    if (!claim->error || claim->error_size == 0)
        return KUBE_CLAIM_BAD;
    int prefix = snprintf(claim->error, claim->error_size, "claim %s/%s: ", claim->namespace_name, claim->name);
    if (prefix >= 0 && (size_t)prefix < claim->error_size) {
        va_list args;
        va_start(args, format);
        vsnprintf(claim->error + prefix, claim->error_size - (size_t)prefix, format, args);
        va_end(args);
    }
    /* One line, whatever the JSON held. */
    for (char *c = claim->error; *c; c++) {
        if ((unsigned char)*c < ' ' || *c == 0x7f)
            *c = ' ';
    }
    return KUBE_CLAIM_BAD;
}

/* The JSON text of a value, for messages (short values only: a message is
 * one line of at most the error buffer). */
static const char *json_text(json_object *value)
{
    return value ? json_object_to_json_string_ext(value, JSON_C_TO_STRING_PLAIN) : "null";
}

/* obj[key], or NULL if absent (or obj is not an object). */
static json_object *member(json_object *obj, const char *key)
{
    json_object *value = NULL;
    if (!obj || !json_object_is_type(obj, json_type_object) || !json_object_object_get_ex(obj, key, &value))
        return NULL;
    return value;
}

/* obj[key] as an object: 0 with *out (NULL if absent and not required), or
 * a refusal. */
static int get_object(const struct claim_context *claim, json_object *obj, const char *key, const char *path,
                      bool required, json_object **out)
{
    json_object *value = member(obj, key);
    *out = NULL;
    if (!value || json_object_is_type(value, json_type_null)) {
        if (required)
            return refuse(claim, "%s.%s: missing", path, key);
        return 0;
    }
    if (!json_object_is_type(value, json_type_object))
        return refuse(claim, "%s.%s: %s is not an object", path, key, json_text(value));
    *out = value;
    return 0;
}

/* obj[key] as an array: as get_object. */
static int get_array(const struct claim_context *claim, json_object *obj, const char *key, const char *path,
                     json_object **out)
{
    json_object *value = member(obj, key);
    *out = NULL;
    if (!value || json_object_is_type(value, json_type_null))
        return 0;
    if (!json_object_is_type(value, json_type_array))
        return refuse(claim, "%s.%s: %s is not an array", path, key, json_text(value));
    *out = value;
    return 0;
}

/* obj[key] as a string, required: 0 with *out, or a refusal. */
static int get_string(const struct claim_context *claim, json_object *obj, const char *key, const char *path,
                      const char **out)
{
    json_object *value = member(obj, key);
    if (!value)
        return refuse(claim, "%s.%s: missing", path, key);
    if (!json_object_is_type(value, json_type_string))
        return refuse(claim, "%s.%s: %s is not a string", path, key, json_text(value));
    *out = json_object_get_string(value);
    return 0;
}

/* obj[key] as a string copied into out: as get_string, and refused if
 * longer than out holds. */
static int copy_string(const struct claim_context *claim, json_object *obj, const char *key, const char *path,
                       char *out, size_t out_size)
{
    const char *text;
    int rc = get_string(claim, obj, key, path, &text);
    if (rc != 0)
        return rc;
    if (strlen(text) >= out_size)
        return refuse(claim, "%s.%s: longer than %zu characters", path, key, out_size - 1);
    memcpy(out, text, strlen(text) + 1);
    return 0;
}

/* A quantity's text: the API writes quantities as strings, a JSON number
 * is read as its text too. */
static int quantity_text(const struct claim_context *claim, json_object *value, const char *path, const char *key,
                         const char **out)
{
    if (json_object_is_type(value, json_type_string) || json_object_is_type(value, json_type_int) ||
        json_object_is_type(value, json_type_double)) {
        *out = json_object_is_type(value, json_type_string) ? json_object_get_string(value) : json_text(value);
        return 0;
    }
    return refuse(claim, "%s.%s: %s is not a quantity", path, key, json_text(value));
}

/* One of this driver's results: request, pool, device, consumed share and
 * memory. */
static int parse_result(const struct claim_context *claim, json_object *result, const char *path,
                        struct dra_claim_device *device)
{
    int rc;
    if ((rc = copy_string(claim, result, "request", path, device->request, sizeof device->request)) != 0 ||
        (rc = copy_string(claim, result, "pool", path, device->pool, sizeof device->pool)) != 0 ||
        (rc = copy_string(claim, result, "device", path, device->device, sizeof device->device)) != 0)
        return rc;
    json_object *consumed;
    char consumed_path[96];
    snprintf(consumed_path, sizeof consumed_path, "%s.consumedCapacity", path);
    if ((rc = get_object(claim, result, "consumedCapacity", path, false, &consumed)) != 0)
        return rc;
    device->share = 0;
    device->memory_bytes = 0;
    json_object *share = member(consumed, "share");
    json_object *memory = member(consumed, "memory");
    const char *text;
    char why[160];
    if (share) {
        if ((rc = quantity_text(claim, share, consumed_path, "share", &text)) != 0)
            return rc;
        if (kube_quantity_double(text, &device->share, why, sizeof why) != 0)
            return refuse(claim, "%s.share: %s", consumed_path, why);
    }
    if (memory) {
        if ((rc = quantity_text(claim, memory, consumed_path, "memory", &text)) != 0)
            return rc;
        if (kube_quantity_bytes(text, &device->memory_bytes, why, sizeof why) != 0)
            return refuse(claim, "%s.memory: %s", consumed_path, why);
    }
    return 0;
}

/* Whether a configuration naming config_request applies to the result of
 * result_request: the same request, or config_request is the main request
 * of result_request's subrequest ("gpu" for "gpu/small"). */
static bool request_matches(const char *config_request, const char *result_request)
{
    size_t length = strlen(config_request);
    return strncmp(config_request, result_request, length) == 0 &&
           (result_request[length] == '\0' || result_request[length] == '/');
}

/* Whether a config entry (its requests, possibly absent) applies to one of
 * this driver's devices of the claim. */
static int config_applies(const struct claim_context *claim, json_object *entry, const char *path,
                          const struct dra_claim *parsed, bool *applies)
{
    json_object *requests;
    int rc = get_array(claim, entry, "requests", path, &requests);
    if (rc != 0)
        return rc;
    size_t count = requests ? json_object_array_length(requests) : 0;
    *applies = count == 0;
    for (size_t i = 0; i < count; i++) {
        json_object *request = json_object_array_get_idx(requests, i);
        if (!json_object_is_type(request, json_type_string))
            return refuse(claim, "%s.requests[%zu]: %s is not a string", path, i, json_text(request));
        for (int d = 0; d < parsed->ndevices; d++) {
            if (request_matches(json_object_get_string(request), parsed->devices[d].request))
                *applies = true;
        }
    }
    return 0;
}

/* The parameters of one opaque configuration of this driver: a
 * gpuslice.io/v1 SliceConfig, its fields laid over *config. */
static int parse_slice_config(const struct claim_context *claim, json_object *parameters, const char *path,
                              struct dra_claim_config *config)
{
    const char *api_version, *kind;
    if (!member(parameters, "apiVersion"))
        return refuse(claim, "%s.apiVersion: missing (%s)", path, CONFIG_API_VERSION);
    int rc = get_string(claim, parameters, "apiVersion", path, &api_version);
    if (rc != 0)
        return rc;
    if (strcmp(api_version, CONFIG_API_VERSION) != 0)
        return refuse(claim, "%s.apiVersion: \"%s\" is not %s", path, api_version, CONFIG_API_VERSION);
    if (!member(parameters, "kind"))
        return refuse(claim, "%s.kind: missing (%s)", path, CONFIG_KIND);
    if ((rc = get_string(claim, parameters, "kind", path, &kind)) != 0)
        return rc;
    if (strcmp(kind, CONFIG_KIND) != 0)
        return refuse(claim, "%s.kind: \"%s\" is not %s", path, kind, CONFIG_KIND);

    struct dra_claim_config next = *config;
    json_object_object_foreach(parameters, key, value)
    {
        if (strcmp(key, "apiVersion") == 0 || strcmp(key, "kind") == 0)
            continue;
        if (strcmp(key, "limit") == 0) {
            if (!json_object_is_type(value, json_type_double) && !json_object_is_type(value, json_type_int))
                return refuse(claim, "%s.limit: %s is not a number", path, json_text(value));
            double limit = json_object_get_double(value);
            if (!(limit >= LIMIT_MIN && limit <= LIMIT_MAX))
                return refuse(claim, "%s.limit: %s is out of range (%g to %g)", path, json_text(value), LIMIT_MIN,
                              LIMIT_MAX);
            next.has_limit = true;
            next.limit = limit;
        } else if (strcmp(key, "class") == 0) {
            const char *name = json_object_is_type(value, json_type_string) ? json_object_get_string(value) : NULL;
            if (!name)
                return refuse(claim, "%s.class: %s is not a string", path, json_text(value));
            if (strcmp(name, "batch") != 0 && strcmp(name, "latency") != 0)
                return refuse(claim, "%s.class: %s is not batch or latency", path, json_text(value));
            next.has_class = true;
            snprintf(next.class_name, sizeof next.class_name, "%s", name);
        } else if (strcmp(key, "preempt_ms") == 0) {
            if (!json_object_is_type(value, json_type_int))
                return refuse(claim, "%s.preempt_ms: %s is not an integer", path, json_text(value));
            int64_t preempt_ms = json_object_get_int64(value);
            if (preempt_ms < PREEMPT_MS_MIN || preempt_ms > PREEMPT_MS_MAX)
                return refuse(claim, "%s.preempt_ms: %s is out of range (%d to %d)", path, json_text(value),
                              PREEMPT_MS_MIN, PREEMPT_MS_MAX);
            next.has_preempt_ms = true;
            next.preempt_ms = (unsigned)preempt_ms;
        } else {
            return refuse(claim, "%s.%s: unknown field (a %s has apiVersion, kind, limit, class and preempt_ms)",
                          path, key, CONFIG_KIND);
        }
    }
    *config = next;
    return 0;
}

/* status.allocation.devices.config: the entries of this driver that apply
 * to its devices, in order (the class's before the claim's: a later one
 * overrides an earlier one). The claim keeps one configuration: an entry
 * that applies to any of its requests applies to all of this driver's
 * devices in it. */
static int parse_configs(const struct claim_context *claim, json_object *devices, struct dra_claim *parsed)
{
    json_object *configs;
    int rc = get_array(claim, devices, "config", "status.allocation.devices", &configs);
    if (rc != 0 || !configs)
        return rc;
    size_t count = json_object_array_length(configs);
    for (size_t i = 0; i < count; i++) {
        char path[96], opaque_path[112], parameters_path[128];
        snprintf(path, sizeof path, "status.allocation.devices.config[%zu]", i);
        json_object *entry = json_object_array_get_idx(configs, i);
        if (!json_object_is_type(entry, json_type_object))
            return refuse(claim, "%s: %s is not an object", path, json_text(entry));
        json_object *opaque;
        if ((rc = get_object(claim, entry, "opaque", path, false, &opaque)) != 0)
            return rc;
        if (!opaque)
            continue;
        snprintf(opaque_path, sizeof opaque_path, "%s.opaque", path);
        const char *driver;
        if ((rc = get_string(claim, opaque, "driver", opaque_path, &driver)) != 0)
            return rc;
        if (strcmp(driver, DRA_DRIVER_NAME) != 0)
            continue;
        bool applies;
        if ((rc = config_applies(claim, entry, path, parsed, &applies)) != 0)
            return rc;
        if (!applies)
            continue;
        json_object *parameters = member(opaque, "parameters");
        snprintf(parameters_path, sizeof parameters_path, "%s.parameters", opaque_path);
        if (!parameters)
            return refuse(claim, "%s: missing", parameters_path);
        if (!json_object_is_type(parameters, json_type_object))
            return refuse(claim, "%s: %s is not an object", parameters_path, json_text(parameters));
        if ((rc = parse_slice_config(claim, parameters, parameters_path, &parsed->config)) != 0)
            return rc;
    }
    return 0;
}

static int parse_claim(const struct claim_context *claim, json_object *root, const struct dra_claim_ref *ref,
                       struct dra_claim *out)
{
    if (!root || !json_object_is_type(root, json_type_object))
        return refuse(claim, "not a JSON object (%s)", json_type_to_name(json_object_get_type(root)));
    json_object *metadata;
    const char *uid;
    int rc = get_object(claim, root, "metadata", "claim", true, &metadata);
    if (rc != 0)
        return refuse(claim, "metadata: missing or not an object");
    if ((rc = get_string(claim, metadata, "uid", "metadata", &uid)) != 0)
        return rc;
    if (strcmp(uid, ref->uid) != 0)
        return refuse(claim, "uid %s is not %s (metadata.uid: not the claim the kubelet named)", uid, ref->uid);

    json_object *status, *allocation, *devices, *results;
    if ((rc = get_object(claim, root, "status", "claim", false, &status)) != 0)
        return refuse(claim, "status: not an object");
    if (status && (rc = get_object(claim, status, "allocation", "status", false, &allocation)) != 0)
        return rc;
    if (!status || !allocation)
        return refuse(claim, "not allocated (no status.allocation)");
    if ((rc = get_object(claim, allocation, "devices", "status.allocation", false, &devices)) != 0 ||
        (rc = get_array(claim, devices, "results", "status.allocation.devices", &results)) != 0)
        return rc;

    size_t count = results ? json_object_array_length(results) : 0;
    int ours = 0;
    for (size_t i = 0; i < count; i++) {
        char path[64];
        snprintf(path, sizeof path, "status.allocation.devices.results[%zu]", i);
        json_object *result = json_object_array_get_idx(results, i);
        if (!json_object_is_type(result, json_type_object))
            return refuse(claim, "%s: %s is not an object", path, json_text(result));
        const char *driver;
        if ((rc = get_string(claim, result, "driver", path, &driver)) != 0)
            return rc;
        if (strcmp(driver, DRA_DRIVER_NAME) != 0)
            continue;
        if (ours >= DRA_MAX_CLAIM_DEVICES) {
            ours++;
            continue; /* counted for the message below, never read into out */
        }
        if ((rc = parse_result(claim, result, path, &out->devices[ours])) != 0)
            return rc;
        ours++;
    }
    if (ours > DRA_MAX_CLAIM_DEVICES) {
        int total = 0;
        for (size_t i = 0; i < count; i++) {
            json_object *driver = member(json_object_array_get_idx(results, i), "driver");
            total += driver && strcmp(json_object_get_string(driver), DRA_DRIVER_NAME) == 0;
        }
        return refuse(claim, "%d devices of %s allocated, more than the %d one claim may have "
                             "(status.allocation.devices.results)",
                      total, DRA_DRIVER_NAME, DRA_MAX_CLAIM_DEVICES);
    }
    if (ours == 0)
        return refuse(claim, "no device of %s allocated (status.allocation.devices.results)", DRA_DRIVER_NAME);
    out->ndevices = ours;
    return parse_configs(claim, devices, out);
}

int dra_claim_parse(const char *json, const struct dra_claim_ref *ref, struct dra_claim *out, char *error,
                    size_t error_size)
{
    struct claim_context claim = {
        .namespace_name = ref && ref->namespace_name ? ref->namespace_name : "?",
        .name = ref && ref->name ? ref->name : "?",
        .error = error,
        .error_size = error_size,
    };
    if (!ref || !ref->uid || !ref->namespace_name || !ref->name || !out)
        return refuse(&claim, "no claim named (uid, namespace and name)");
    memset(out, 0, sizeof *out);
    if (strlen(ref->uid) >= sizeof out->uid || strlen(ref->namespace_name) >= sizeof out->namespace_name ||
        strlen(ref->name) >= sizeof out->name)
        return refuse(&claim, "uid, namespace or name too long");
    if (!json)
        return refuse(&claim, "no JSON");
    size_t length = strlen(json);
    if (length >= INT_MAX)
        return refuse(&claim, "JSON too long");

    json_tokener *tokener = json_tokener_new();
    if (!tokener)
        return refuse(&claim, "out of memory");
    json_tokener_set_flags(tokener, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    /* The terminating NUL is passed too: it ends a top-level literal
     * ("null", "5") that would otherwise wait for more. */
    json_object *root = json_tokener_parse_ex(tokener, json, (int)length + 1);
    enum json_tokener_error parse_error = json_tokener_get_error(tokener);
    size_t parse_end = json_tokener_get_parse_end(tokener);
    json_tokener_free(tokener);
    int rc;
    if (parse_error != json_tokener_success) {
        rc = refuse(&claim, "malformed JSON: %s (byte %zu)",
                    parse_error == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(parse_error),
                    parse_end);
    } else if (parse_end < length && json[parse_end + strspn(json + parse_end, " \t\r\n")] != '\0') {
        rc = refuse(&claim, "malformed JSON: more after the object (byte %zu)", parse_end);
    } else {
        rc = parse_claim(&claim, root, ref, out);
    }
    json_object_put(root);
    if (rc == 0) {
        memcpy(out->uid, ref->uid, strlen(ref->uid) + 1);
        memcpy(out->namespace_name, ref->namespace_name, strlen(ref->namespace_name) + 1);
        memcpy(out->name, ref->name, strlen(ref->name) + 1);
    } else {
        memset(out, 0, sizeof *out);
    }
    return rc;
}
