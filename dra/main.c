/*
 * gpuslice-dra: the kubelet plugin that lets pods ask for a slice of a GPU
 * with a ResourceClaim. Its options, the node's ResourceSlice (published at
 * start and kept up to date from the serving thread's tick), and the
 * kubelet side's serving loop, which stops on SIGTERM or SIGINT.
 */
#include "dra.h"
#include "kube/kube.h"
#include "kube/quantity.h"
#include "kubelet/kubelet.h"
#include "prepare.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GPUS 64
/* How often the slice is compared with the GPUs NVML lists, and how long
 * a failed publication waits before the next try. */
#define REPUBLISH_S 60
#define RETRY_S 5

static const char usage[] =
    "Usage: gpuslice-dra [OPTIONS]\n"
    "\n"
    "The kubelet plugin of Dynamic Resource Allocation for gpuslice: publishes\n"
    "the node's GPUs as one ResourceSlice (driver gpuslice.io, one device per\n"
    "GPU with capacities share and memory that many claims consume), and\n"
    "prepares each claim the kubelet names as one gpuslice tenant: the file\n"
    "CLAIMS_DIR/claim-UID.conf with the share and memory the claim consumed and\n"
    "the limit, class and preempt_ms of its SliceConfig. gpuslice-server must\n"
    "read CLAIMS_DIR (one of its --config-dir). Unprepare removes the file.\n"
    "\n"
    "Options:\n"
    "  -n, --node-name NAME     this node (default $NODE_NAME)\n"
    "      --kubelet-dir DIR    the kubelet's directory (default /var/lib/kubelet):\n"
    "                           registers at DIR/plugins_registry/gpuslice.io-reg.sock,\n"
    "                           serves DIR/plugins/gpuslice.io/dra.sock\n"
    "  -c, --claims-dir DIR     the claims' tenant files (default\n"
    "                           /var/lib/gpuslice/claims.d)\n"
    "      --cdi-dir DIR        where gpuslice-server writes its CDI spec (default\n"
    "                           /var/run/cdi); prepare waits until the tenant is in it\n"
    "      --server-wait-ms MS  how long prepare waits for it (default 10000)\n"
    "      --gpu-cdi KIND       also answer the GPU's own CDI device, KIND=INDEX\n"
    "                           (default nvidia.com/gpu, as NVIDIA's Container\n"
    "                           Toolkit names them; 'none': only the tenant's)\n"
    "      --api-server URL     the Kubernetes API (default https://\n"
    "                           $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)\n"
    "      --token-file FILE    bearer token (default the pod's service account's)\n"
    "      --ca-file FILE       the API's CA (default the service account's ca.crt)\n"
    "      --share-default N    share of a claim that asks for none (default 10 of 100)\n"
    "      --share-min N        the least share a claim may ask for (default 1)\n"
    "      --memory-default Q   memory of a claim that asks for none (default 1Gi)\n"
    "      --memory-min Q       the least memory a claim may ask for (default 64Mi)\n"
    "      --memory-step Q      memory is given in steps of this (default 1Mi)\n"
    "  -h, --help               show this help\n"
    "  -V, --version            show the version\n"
    "\n"
    "Exit status: 0 after SIGTERM or SIGINT, 2 on a bad option or a socket that\n"
    "cannot be made.\n";

/* Set by the signal handler, read by the serving loop. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* The slice's publisher: the serving thread's only (main, then tick). */
struct publisher {
    struct kube_api *api;
    const char *node_name;
    const struct dra_slice_policy *policy;
    time_t next_at;
    char last_error[512];
};

static void publish(struct publisher *p)
{
    static struct dra_gpu gpus[MAX_GPUS];
    char error[512];
    int n = dra_gpus_discover(gpus, MAX_GPUS, error, sizeof error);
    if (n >= 0 && kube_slice_publish(p->api, p->node_name, gpus, n, p->policy, error, sizeof error) == 0) {
        if (p->last_error[0] || p->next_at == 0)
            fprintf(stderr, "gpuslice-dra: ResourceSlice of node %s published: %d GPU%s\n", p->node_name, n,
                    n == 1 ? "" : "s");
        p->last_error[0] = '\0';
        p->next_at = time(NULL) + REPUBLISH_S;
        return;
    }
    if (strcmp(error, p->last_error) != 0)
        fprintf(stderr, "gpuslice-dra: cannot publish the ResourceSlice (trying again every %d s): %s\n", RETRY_S,
                error);
    snprintf(p->last_error, sizeof p->last_error, "%s", error);
    p->next_at = time(NULL) + RETRY_S;
}

static void tick(void *arg)
{
    struct publisher *p = arg;
    if (time(NULL) >= p->next_at)
        publish(p);
}

static int parse_count(const char *text, const char *option, unsigned min, unsigned max, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v < min || v > max) {
        fprintf(stderr, "gpuslice-dra: %s: '%s' is not a whole number from %u to %u\n", option, text, min, max);
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

static int parse_bytes(const char *text, const char *option, uint64_t *out)
{
    char error[256];
    uint64_t bytes = 0;
    if (kube_quantity_bytes(text, &bytes, error, sizeof error) != 0) {
        fprintf(stderr, "gpuslice-dra: %s: %s\n", option, error);
        return -1;
    }
    if (bytes == 0) {
        fprintf(stderr, "gpuslice-dra: %s: must be more than 0\n", option);
        return -1;
    }
    *out = bytes;
    return 0;
}

int main(int argc, char **argv)
{
    const char *kubelet_dir = "/var/lib/kubelet", *gpu_cdi = "nvidia.com/gpu";
    struct dra_prepare_settings s = {
        .node_name = getenv("NODE_NAME"),
        .claims_dir = "/var/lib/gpuslice/claims.d",
        .cdi_dir = "/var/run/cdi",
        .server_wait_ms = 10000,
    };
    struct kube_api_options api_options = {0};
    struct dra_slice_policy policy = {
        .share_total = 100,
        .share_default = 10,
        .share_min = 1,
        .memory_default = 1ull << 30,
        .memory_min = 64ull << 20,
        .memory_step = 1ull << 20,
    };
    enum { OPT_KUBELET = 256, OPT_CDI, OPT_WAIT, OPT_GPU_CDI, OPT_API, OPT_TOKEN, OPT_CA, OPT_SHARE_DEFAULT,
           OPT_SHARE_MIN, OPT_MEMORY_DEFAULT, OPT_MEMORY_MIN, OPT_MEMORY_STEP };
    static const struct option long_options[] = {
        {"node-name", required_argument, NULL, 'n'},
        {"kubelet-dir", required_argument, NULL, OPT_KUBELET},
        {"claims-dir", required_argument, NULL, 'c'},
        {"cdi-dir", required_argument, NULL, OPT_CDI},
        {"server-wait-ms", required_argument, NULL, OPT_WAIT},
        {"gpu-cdi", required_argument, NULL, OPT_GPU_CDI},
        {"api-server", required_argument, NULL, OPT_API},
        {"token-file", required_argument, NULL, OPT_TOKEN},
        {"ca-file", required_argument, NULL, OPT_CA},
        {"share-default", required_argument, NULL, OPT_SHARE_DEFAULT},
        {"share-min", required_argument, NULL, OPT_SHARE_MIN},
        {"memory-default", required_argument, NULL, OPT_MEMORY_DEFAULT},
        {"memory-min", required_argument, NULL, OPT_MEMORY_MIN},
        {"memory-step", required_argument, NULL, OPT_MEMORY_STEP},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    unsigned wait_ms = 10000;
    int opt;
    while ((opt = getopt_long(argc, argv, "n:c:hV", long_options, NULL)) != -1) {
        int rc = 0;
        switch (opt) {
        case 'n': s.node_name = optarg; break;
        case 'c': s.claims_dir = optarg; break;
        case OPT_KUBELET: kubelet_dir = optarg; break;
        case OPT_CDI: s.cdi_dir = optarg; break;
        case OPT_WAIT: rc = parse_count(optarg, "--server-wait-ms", 0, 600000, &wait_ms); break;
        case OPT_GPU_CDI: gpu_cdi = optarg; break;
        case OPT_API: api_options.server = optarg; break;
        case OPT_TOKEN: api_options.token_file = optarg; break;
        case OPT_CA: api_options.ca_file = optarg; break;
        case OPT_SHARE_DEFAULT: rc = parse_count(optarg, "--share-default", 1, 100, &policy.share_default); break;
        case OPT_SHARE_MIN: rc = parse_count(optarg, "--share-min", 1, 100, &policy.share_min); break;
        case OPT_MEMORY_DEFAULT: rc = parse_bytes(optarg, "--memory-default", &policy.memory_default); break;
        case OPT_MEMORY_MIN: rc = parse_bytes(optarg, "--memory-min", &policy.memory_min); break;
        case OPT_MEMORY_STEP: rc = parse_bytes(optarg, "--memory-step", &policy.memory_step); break;
        case 'h': fputs(usage, stdout); return 0;
        case 'V': printf("gpuslice-dra %s\n", GPUSLICE_VERSION); return 0;
        default: fprintf(stderr, "gpuslice-dra: see gpuslice-dra --help\n"); return 2;
        }
        if (rc != 0)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "gpuslice-dra: unexpected argument '%s' (see gpuslice-dra --help)\n", argv[optind]);
        return 2;
    }
    if (!s.node_name || !s.node_name[0]) {
        fprintf(stderr, "gpuslice-dra: no node name: give --node-name or set NODE_NAME (the pod's spec.nodeName)\n");
        return 2;
    }
    if (policy.share_min > policy.share_default) {
        fprintf(stderr, "gpuslice-dra: --share-min %u is above --share-default %u\n", policy.share_min,
                policy.share_default);
        return 2;
    }
    if (policy.memory_min > policy.memory_default) {
        fprintf(stderr, "gpuslice-dra: --memory-min is above --memory-default\n");
        return 2;
    }
    s.server_wait_ms = wait_ms;
    s.gpu_cdi_kind = strcmp(gpu_cdi, "none") == 0 ? NULL : gpu_cdi;
    s.policy = &policy;

    char error[512];
    struct kube_api *api = kube_api_open(&api_options, error, sizeof error);
    if (!api) {
        fprintf(stderr, "gpuslice-dra: %s\n", error);
        return 2;
    }
    s.api = api;
    dra_prepare_configure(&s);

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) {
        fprintf(stderr, "gpuslice-dra: sigaction: %s\n", strerror(errno));
        kube_api_close(api);
        return 2;
    }
    struct publisher publisher = {.api = api, .node_name = s.node_name, .policy = &policy};
    publish(&publisher);

    char registration[4200], plugin[4200];
    snprintf(registration, sizeof registration, "%s/plugins_registry/%s-reg.sock", kubelet_dir, DRA_DRIVER_NAME);
    snprintf(plugin, sizeof plugin, "%s/plugins/%s/dra.sock", kubelet_dir, DRA_DRIVER_NAME);
    struct dra_kubelet_options k = {
        .driver_name = DRA_DRIVER_NAME,
        .registration_socket = registration,
        .plugin_socket = plugin,
        .tick = tick,
        .tick_arg = &publisher,
    };
    fprintf(stderr, "gpuslice-dra %s: node %s, claims in %s, serving %s\n", GPUSLICE_VERSION, s.node_name,
            s.claims_dir, plugin);
    int rc = dra_kubelet_serve(&k, &stop_requested, error, sizeof error);
    if (rc != 0)
        fprintf(stderr, "gpuslice-dra: %s\n", error);
    kube_api_close(api);
    return rc == 0 ? 0 : 2;
}
