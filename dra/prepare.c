/*
 * Preparing and unpreparing claims: one tenant per ResourceClaim, kept as
 * the tenant file CLAIMS_DIR/claim-UID.conf that gpuslice-server reads
 * (its --config-dir). The file is the checkpoint: a restarted plugin
 * finds what it prepared by the claim's UID, and unprepare removes exactly
 * that file. A claim shared by several pods is one tenant.
 *
 * Prepare reads the claim from the API (kube/), checks that this node was
 * allocated its devices, writes the file (a temporary file, then rename,
 * so the server never reads half of one) unless it already says the same,
 * and waits until the server's CDI spec has the tenant's device: the
 * container runtime resolves the CDI IDs answered as soon as the kubelet
 * has them. If the server does not take a tenant this call created, the
 * file is removed again: an error leaves nothing behind.
 */
#include "dra.h"
#include "prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CDI_SPEC_NAME "gpuslice.json"
#define TENANT_KIND "gpuslice.io/tenant"
#define UID_MAX 63
#define FILE_TEXT_MAX 1024

/* Set once by main (dra_prepare_configure) before serving starts; read by
 * the serving thread only. */
static struct dra_prepare_settings settings;

void dra_prepare_configure(const struct dra_prepare_settings *s)
{
    settings = *s;
}

static void say(char *error, size_t size, const struct dra_claim_ref *ref, const char *fmt, ...)
{
    int n = snprintf(error, size, "claim %s/%s: ", ref->namespace_name ? ref->namespace_name : "?",
                     ref->name ? ref->name : "?");
    if (n < 0 || (size_t)n >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error + n, size - (size_t)n, fmt, ap);
    va_end(ap);
}

/* A Kubernetes UID as a tenant name's tail: lower-case letters, digits and
 * '-', as the API server makes them. */
static bool valid_uid(const char *uid)
{
    size_t len = uid ? strlen(uid) : 0;
    if (len == 0 || len > UID_MAX - sizeof DRA_TENANT_PREFIX)
        return false;
    for (const char *p = uid; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
            return false;
    return true;
}

static void tenant_name(const char *uid, char *out, size_t size)
{
    snprintf(out, size, "%s%s", DRA_TENANT_PREFIX, uid);
}

/* A decimal with at most three places, without trailing zeros ("25",
 * "12.5"): the tenant file's numbers. */
static void format_decimal(double v, char *out, size_t size)
{
    snprintf(out, size, "%.3f", v);
    char *dot = strchr(out, '.');
    if (!dot)
        return;
    char *end = out + strlen(out) - 1;
    while (end > dot && *end == '0')
        *end-- = '\0';
    if (end == dot)
        *end = '\0';
}

/* The tenant file's text for the claim, or -1 with a message. What the
 * claim consumes of a GPU is the sum of its results there: two requests
 * may each take a share of one GPU (each result its own shareID), and the
 * scheduler counted both against its capacity. One tenant has one share
 * and one cap on every GPU, so each GPU's sum must be the same. */
static int tenant_text(const struct dra_claim *claim, const struct dra_claim_ref *ref, char *text, size_t size,
                       char *error, size_t error_size)
{
    const struct dra_slice_policy *policy = settings.policy;
    double share = 0;
    uint64_t memory = 0;
    const char *first = NULL;
    for (int i = 0; i < claim->ndevices; i++) {
        const struct dra_claim_device *d = &claim->devices[i];
        if (settings.node_name && strcmp(d->pool, settings.node_name) != 0) {
            say(error, error_size, ref, "device %s is in pool %s, not this node's (%s)", d->device, d->pool,
                settings.node_name);
            return -1;
        }
        bool summed = false; /* an earlier result on this GPU summed it */
        for (int j = 0; j < i && !summed; j++)
            summed = strcmp(claim->devices[j].device, d->device) == 0;
        if (summed)
            continue;
        double s = 0;
        uint64_t m = 0;
        for (int j = i; j < claim->ndevices; j++) {
            const struct dra_claim_device *e = &claim->devices[j];
            if (strcmp(e->device, d->device) != 0)
                continue;
            uint64_t bytes = e->memory_bytes > 0 ? e->memory_bytes : policy->memory_default;
            if (bytes > UINT64_MAX - m) {
                say(error, error_size, ref, "the memory its results consume of %s does not fit in 64 bits",
                    d->device);
                return -1;
            }
            s += e->share > 0 ? e->share : policy->share_default;
            m += bytes;
        }
        if (first && (s != share || m != memory)) {
            say(error, error_size, ref,
                "its devices consume different capacities (%s and %s): one tenant has one share and one memory "
                "cap on every GPU",
                first, d->device);
            return -1;
        }
        first = d->device;
        share = s;
        memory = m;
    }
    if (!(share >= 0.001 && share <= 1000000)) {
        say(error, error_size, ref, "consumedCapacity share %g is out of range (0.001 to 1000000)", share);
        return -1;
    }
    if (memory == 0) {
        say(error, error_size, ref, "consumedCapacity memory is 0, which would allow no memory at all");
        return -1;
    }
    char share_text[32];
    format_decimal(share, share_text, sizeof share_text);
    int n = snprintf(text, size,
                     "# ResourceClaim %s/%s (uid %s), prepared by gpuslice-dra: removed when it is unprepared\n"
                     "share = %s\nmemory = %llu\n",
                     claim->namespace_name, claim->name, claim->uid, share_text, (unsigned long long)memory);
    const struct dra_claim_config *c = &claim->config;
    if (n >= 0 && (size_t)n < size && c->has_limit) {
        char limit_text[32];
        format_decimal(c->limit, limit_text, sizeof limit_text);
        n += snprintf(text + n, size - (size_t)n, "limit = %s\n", limit_text);
    }
    if (n >= 0 && (size_t)n < size && c->has_class)
        n += snprintf(text + n, size - (size_t)n, "class = %s\n", c->class_name);
    if (n >= 0 && (size_t)n < size && c->has_preempt_ms)
        n += snprintf(text + n, size - (size_t)n, "preempt_ms = %u\n", c->preempt_ms);
    if (n < 0 || (size_t)n >= size) {
        say(error, error_size, ref, "its tenant file would be too long");
        return -1;
    }
    return 0;
}

/* The file's text in buf (NUL-terminated): its length, or -1 (errno set;
 * ENOENT: no file). */
static ssize_t read_small_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    size_t len = 0;
    while (len + 1 < size) {
        ssize_t n = read(fd, buf + len, size - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved = errno;
            (void)close(fd);
            errno = saved;
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (close(fd) != 0)
        return -1;
    return (ssize_t)len;
}

static int write_all(int fd, const char *text, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, text, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        text += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Writes the tenant file by a temporary file and a rename, flushed to
 * disk with its directory: 0, or -1 with a message. */
static int write_tenant_file(const char *path, const char *tmp, const char *text, const struct dra_claim_ref *ref,
                             char *error, size_t error_size)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        say(error, error_size, ref, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
        say(error, error_size, ref, "cannot write %s: %s", tmp, strerror(errno));
        (void)close(fd);
        (void)unlink(tmp);
        return -1;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        say(error, error_size, ref, "cannot write %s: %s", path, strerror(errno));
        (void)unlink(tmp);
        return -1;
    }
    int dir = open(settings.claims_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        if (fsync(dir) != 0)
            fprintf(stderr, "gpuslice-dra: fsync %s: %s\n", settings.claims_dir, strerror(errno));
        if (close(dir) != 0)
            fprintf(stderr, "gpuslice-dra: close %s: %s\n", settings.claims_dir, strerror(errno));
    }
    return 0;
}

/* Whether the server's CDI spec has a device of the tenant's name. */
static bool cdi_spec_has(const char *tenant)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", settings.cdi_dir, CDI_SPEC_NAME);
    json_object *spec = json_object_from_file(path);
    if (!spec)
        return false;
    bool found = false;
    json_object *devices;
    if (json_object_object_get_ex(spec, "devices", &devices) && json_object_is_type(devices, json_type_array)) {
        size_t n = json_object_array_length(devices);
        for (size_t i = 0; i < n && !found; i++) {
            json_object *name;
            if (json_object_object_get_ex(json_object_array_get_idx(devices, i), "name", &name) &&
                json_object_is_type(name, json_type_string) && strcmp(json_object_get_string(name), tenant) == 0)
                found = true;
        }
    }
    json_object_put(spec);
    return found;
}

static bool wait_for_server(const char *tenant)
{
    if (!settings.cdi_dir || !settings.cdi_dir[0])
        return true;
    struct timespec step = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    for (long waited = 0;; waited += 20) {
        if (cdi_spec_has(tenant))
            return true;
        if (waited >= settings.server_wait_ms)
            return false;
        while (nanosleep(&step, &step) != 0 && errno == EINTR)
            ;
        step.tv_nsec = 20 * 1000 * 1000;
    }
}

/* The answer: each device with the tenant's CDI device, and the GPU's own
 * where one is configured (KIND=INDEX, from the device's name gpu-INDEX). */
static void answer(const struct dra_claim *claim, const char *tenant, struct dra_prepared *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < claim->ndevices; i++) {
        const struct dra_claim_device *d = &claim->devices[i];
        struct dra_prepared_device *p = &out->devices[out->ndevices++];
        snprintf(p->request, sizeof p->request, "%s", d->request);
        snprintf(p->pool, sizeof p->pool, "%s", d->pool);
        snprintf(p->device, sizeof p->device, "%s", d->device);
        snprintf(p->cdi_ids[p->ncdi_ids++], sizeof p->cdi_ids[0], "%s=%s", TENANT_KIND, tenant);
        unsigned index;
        char tail;
        if (settings.gpu_cdi_kind && sscanf(d->device, "gpu-%u%c", &index, &tail) == 1)
            snprintf(p->cdi_ids[p->ncdi_ids++], sizeof p->cdi_ids[0], "%s=%u", settings.gpu_cdi_kind, index);
    }
}

int dra_prepare(const struct dra_claim_ref *ref, struct dra_prepared *out, char *error, size_t error_size)
{
    if (!valid_uid(ref->uid)) {
        say(error, error_size, ref, "uid '%s' is not a Kubernetes UID", ref->uid ? ref->uid : "");
        return -1;
    }
    static struct dra_claim claim; /* large; the serving thread's only */
    int rc = kube_claim_get(settings.api, ref, &claim, error, error_size);
    if (rc != 0)
        return -1;
    char text[FILE_TEXT_MAX], old[FILE_TEXT_MAX + 1];
    if (tenant_text(&claim, ref, text, sizeof text, error, error_size) != 0)
        return -1;
    char tenant[UID_MAX + 1], path[4200], tmp[4200];
    tenant_name(ref->uid, tenant, sizeof tenant);
    snprintf(path, sizeof path, "%s/%s.conf", settings.claims_dir, tenant);
    snprintf(tmp, sizeof tmp, "%s/.%s.conf.tmp", settings.claims_dir, tenant);
    ssize_t old_len = read_small_file(path, old, sizeof old);
    if (old_len < 0 && errno != ENOENT) {
        say(error, error_size, ref, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    bool existed = old_len >= 0;
    if (!existed || strcmp(old, text) != 0) {
        if (write_tenant_file(path, tmp, text, ref, error, error_size) != 0)
            return -1;
        fprintf(stderr, "gpuslice-dra: claim %s/%s: tenant %s %s\n", ref->namespace_name, ref->name, tenant,
                existed ? "updated" : "created");
    }
    if (!wait_for_server(tenant)) {
        if (!existed && unlink(path) != 0 && errno != ENOENT)
            fprintf(stderr, "gpuslice-dra: cannot remove %s: %s\n", path, strerror(errno));
        say(error, error_size, ref,
            "gpuslice-server did not take tenant %s within %ld ms: its CDI spec %s/%s has no such device (is the "
            "server running, with --config-dir %s?)%s",
            tenant, settings.server_wait_ms, settings.cdi_dir, CDI_SPEC_NAME, settings.claims_dir,
            existed ? "" : "; the tenant file is removed again");
        return -1;
    }
    answer(&claim, tenant, out);
    return 0;
}

int dra_unprepare(const struct dra_claim_ref *ref, char *error, size_t error_size)
{
    if (!valid_uid(ref->uid)) {
        say(error, error_size, ref, "uid '%s' is not a Kubernetes UID", ref->uid ? ref->uid : "");
        return -1;
    }
    char tenant[UID_MAX + 1], path[4200];
    tenant_name(ref->uid, tenant, sizeof tenant);
    snprintf(path, sizeof path, "%s/%s.conf", settings.claims_dir, tenant);
    if (unlink(path) != 0) {
        if (errno == ENOENT)
            return 0; /* never prepared here, or already unprepared */
        say(error, error_size, ref, "cannot remove %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(stderr, "gpuslice-dra: claim %s/%s: tenant %s removed\n", ref->namespace_name, ref->name, tenant);
    return 0;
}
