/*
 * kube_client: the Kubernetes API side of gpuslice-dra (dra_kube_lib) run
 * by hand or by tests against test/dra/apiserver.py.
 *
 *   kube_client [OPTIONS] claim NS NAME UID
 *       fetches and reads the claim: prints it as one JSON line; exit 0,
 *       1 (KUBE_CLAIM_BAD) or 2 (KUBE_CLAIM_UNREACHABLE), the message on
 *       stderr
 *   kube_client [OPTIONS] claims NS NAME UID
 *       the same once for every line read from standard input (one client,
 *       so one process that rereads its token file), one line of output
 *       each ("ok JSON", "bad MESSAGE" or "unreachable MESSAGE")
 *   kube_client [OPTIONS] gpus
 *       the GPUs NVML lists, as one JSON line
 *   kube_client [OPTIONS] publish NODE
 *       discovers the GPUs and publishes the node's ResourceSlice (exit 0
 *       or 1)
 *
 * OPTIONS: --server URL (else KUBERNETES_SERVICE_HOST and _PORT), --token
 * FILE, --ca FILE, --timeout-ms N.
 */
#include "kube.h"
#include "test_slice_policy.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: kube_client [--server URL] [--token FILE] [--ca FILE] [--timeout-ms N]\n"
                    "                   claim NS NAME UID | claims NS NAME UID | gpus | publish NODE\n");
    return 3;
}

/* Adds key: value to obj; false if out of memory. */
static bool add(json_object *obj, const char *key, json_object *value)
{
    if (!value || json_object_object_add(obj, key, value) != 0) {
        json_object_put(value);
        return false;
    }
    return true;
}

/* Prints a claim as one JSON line (prefix first): false if out of memory. */
static bool print_claim(const char *prefix, const struct dra_claim *claim)
{
    json_object *root = json_object_new_object(), *devices = json_object_new_array(),
                *config = json_object_new_object();
    bool ok = root && devices && config && add(root, "uid", json_object_new_string(claim->uid)) &&
              add(root, "namespace", json_object_new_string(claim->namespace_name)) &&
              add(root, "name", json_object_new_string(claim->name));
    for (int i = 0; ok && i < claim->ndevices; i++) {
        const struct dra_claim_device *d = &claim->devices[i];
        json_object *device = json_object_new_object();
        ok = device && json_object_array_add(devices, device) == 0;
        if (!ok) {
            json_object_put(device);
            break;
        }
        ok = add(device, "request", json_object_new_string(d->request)) &&
             add(device, "pool", json_object_new_string(d->pool)) &&
             add(device, "device", json_object_new_string(d->device)) &&
             add(device, "share", json_object_new_double(d->share)) &&
             add(device, "memory", json_object_new_int64((int64_t)d->memory_bytes));
    }
    if (ok && claim->config.has_limit)
        ok = add(config, "limit", json_object_new_double(claim->config.limit));
    if (ok && claim->config.has_class)
        ok = add(config, "class", json_object_new_string(claim->config.class_name));
    if (ok && claim->config.has_preempt_ms)
        ok = add(config, "preempt_ms", json_object_new_int64(claim->config.preempt_ms));
    ok = ok && add(root, "devices", devices);
    devices = NULL;
    ok = ok && add(root, "config", config);
    config = NULL;
    if (ok)
        printf("%s%s\n", prefix, json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
    json_object_put(root);
    json_object_put(devices);
    json_object_put(config);
    return ok;
}

static int claim_once(struct kube_api *api, const struct dra_claim_ref *ref)
{
    struct dra_claim claim;
    char error[1024];
    int rc = kube_claim_get(api, ref, &claim, error, sizeof error);
    if (rc != 0) {
        fprintf(stderr, "%s\n", error);
        return rc == KUBE_CLAIM_UNREACHABLE ? 2 : 1;
    }
    return print_claim("", &claim) ? 0 : 3;
}

static int claim_per_line(struct kube_api *api, const struct dra_claim_ref *ref)
{
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        struct dra_claim claim;
        char error[1024];
        int rc = kube_claim_get(api, ref, &claim, error, sizeof error);
        if (rc == 0) {
            if (!print_claim("ok ", &claim))
                return 3;
        } else {
            printf("%s %s\n", rc == KUBE_CLAIM_UNREACHABLE ? "unreachable" : "bad", error);
        }
        fflush(stdout);
    }
    return 0;
}

static int gpus(void)
{
    struct dra_gpu list[16];
    char error[512];
    int n = dra_gpus_discover(list, 16, error, sizeof error);
    if (n < 0) {
        fprintf(stderr, "%s\n", error);
        return 1;
    }
    json_object *array = json_object_new_array();
    bool ok = array != NULL;
    for (int i = 0; ok && i < n; i++) {
        json_object *gpu = json_object_new_object();
        ok = gpu && json_object_array_add(array, gpu) == 0;
        if (!ok) {
            json_object_put(gpu);
            break;
        }
        ok = add(gpu, "index", json_object_new_int64(list[i].index)) &&
             add(gpu, "uuid", json_object_new_string(list[i].uuid)) &&
             add(gpu, "product", json_object_new_string(list[i].product)) &&
             add(gpu, "memory", json_object_new_int64((int64_t)list[i].memory_bytes)) &&
             add(gpu, "driverVersion", json_object_new_string(list[i].driver_version));
    }
    if (ok)
        printf("%s\n", json_object_to_json_string_ext(array, JSON_C_TO_STRING_PLAIN));
    json_object_put(array);
    return ok ? 0 : 3;
}

static int publish(struct kube_api *api, const char *node)
{
    struct dra_gpu list[16];
    char error[1024];
    int n = dra_gpus_discover(list, 16, error, sizeof error);
    if (n < 0 || kube_slice_publish(api, node, list, n, &test_slice_policy, error, sizeof error) != 0) {
        fprintf(stderr, "%s\n", error);
        return 1;
    }
    printf("published %d GPUs of %s\n", n, node);
    return 0;
}

int main(int argc, char **argv)
{
    struct kube_api_options options = {0};
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--server") == 0)
            options.server = argv[i + 1];
        else if (strcmp(argv[i], "--token") == 0)
            options.token_file = argv[i + 1];
        else if (strcmp(argv[i], "--ca") == 0)
            options.ca_file = argv[i + 1];
        else if (strcmp(argv[i], "--timeout-ms") == 0)
            options.timeout_ms = strtol(argv[i + 1], NULL, 10);
        else
            return usage();
    }
    if (i >= argc)
        return usage();
    const char *command = argv[i];
    if (strcmp(command, "gpus") == 0 && i + 1 == argc)
        return gpus();
    bool is_claim = strcmp(command, "claim") == 0 || strcmp(command, "claims") == 0;
    if (!(is_claim && i + 4 == argc) && !(strcmp(command, "publish") == 0 && i + 2 == argc))
        return usage();

    char error[1024];
    struct kube_api *api = kube_api_open(&options, error, sizeof error);
    if (!api) {
        fprintf(stderr, "%s\n", error);
        return 3;
    }
    int rc;
    if (is_claim) {
        struct dra_claim_ref ref = {.uid = argv[i + 3], .namespace_name = argv[i + 1], .name = argv[i + 2]};
        rc = strcmp(command, "claim") == 0 ? claim_once(api, &ref) : claim_per_line(api, &ref);
    } else {
        rc = publish(api, argv[i + 1]);
    }
    kube_api_close(api);
    return rc;
}
