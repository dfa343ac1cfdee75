/*
 * The Kubernetes names of a container, by its ID: namespace, pod and
 * container, for the labels of per-process metrics (dcgm-exporter's
 * "namespace", "pod", "container").
 *
 * A process's cgroup names its container ID and pod UID, never a name
 * (peers.c). The kubelet, though, links every container's log as
 * /var/log/containers/POD_NAMESPACE_CONTAINER-ID.log (log collectors read
 * the names from there), and pod, namespace and container names cannot
 * hold '_'. So the names come from the kubelet's own file names in that
 * directory (--pod-log-dir), read as names only: nothing is opened or
 * followed there. Without the directory (not a Kubernetes node, or not
 * mounted) the names are left out, and the pod UID and container ID say
 * who a process is.
 *
 * The directory is listed again when an ID is not found, at most once
 * every RESCAN_NS (a container's link appears just after it starts).
 * At most MAX_ENTRIES containers are kept.
 */
#include "server.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESCAN_NS 5000000000ull
#define MAX_ENTRIES 16384

struct pod_entry {
    char id[PEER_CONTAINER_ID_MAX];
    char names[POD_NAMES_MAX]; /* "namespace\0pod\0container\0" */
};

/* The last listing, sorted by ID, and when it was taken; owned by the
 * loop's thread. */
static struct pod_entry *entries;
static size_t nentries;
static uint64_t listed_at;
static bool ever_listed;

static int by_id(const void *a, const void *b)
{
    return strcmp(((const struct pod_entry *)a)->id, ((const struct pod_entry *)b)->id);
}

static bool dns_name(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '.'))
            return false;
    return true;
}

/* POD_NAMESPACE_CONTAINER-ID.log into e; false if the name is not one. */
static bool parse_name(const char *file, struct pod_entry *e)
{
    size_t len = strlen(file);
    if (len < 4 || strcmp(file + len - 4, ".log") != 0)
        return false;
    const char *first = strchr(file, '_'), *second = first ? strchr(first + 1, '_') : NULL;
    const char *dash = file + len - 4;
    while (dash > file && *dash != '-')
        dash--;
    if (!second || strchr(second + 1, '_') || dash <= second + 1)
        return false;
    size_t id_len = (size_t)(file + len - 4 - (dash + 1));
    if (id_len == 0 || id_len >= sizeof e->id)
        return false;
    for (const char *p = dash + 1; p < file + len - 4; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    size_t pod = (size_t)(first - file), ns = (size_t)(second - first - 1), ctr = (size_t)(dash - second - 1);
    if (!dns_name(file, pod) || !dns_name(first + 1, ns) || !dns_name(second + 1, ctr) ||
        pod + ns + ctr + 3 > sizeof e->names)
        return false;
    memcpy(e->id, dash + 1, id_len);
    e->id[id_len] = '\0';
    char *out = e->names;
    memcpy(out, first + 1, ns);
    out[ns] = '\0';
    memcpy(out + ns + 1, file, pod);
    out[ns + 1 + pod] = '\0';
    memcpy(out + ns + pod + 2, second + 1, ctr);
    out[ns + pod + 2 + ctr] = '\0';
    return true;
}

static void list_again(void)
{
    DIR *dir = opendir(options.pod_log_dir);
    if (!dir) {
        nentries = 0;
        return;
    }
    if (!entries && !(entries = malloc(MAX_ENTRIES * sizeof *entries))) {
        closedir(dir);
        return;
    }
    nentries = 0;
    struct dirent *d;
    while ((d = readdir(dir)) && nentries < MAX_ENTRIES)
        if (parse_name(d->d_name, &entries[nentries]))
            nentries++;
    if (closedir(dir) != 0)
        slog(LOG_WARN, "closedir: %s", strerror(errno));
    qsort(entries, nentries, sizeof *entries, by_id);
}

static const struct pod_entry *find(const char *id)
{
    struct pod_entry key;
    snprintf(key.id, sizeof key.id, "%s", id);
    return nentries ? bsearch(&key, entries, nentries, sizeof *entries, by_id) : NULL;
}

bool pod_names_of(const char *container_id, const char **ns, const char **pod, const char **container, uint64_t now)
{
    if (!options.pod_log_dir[0] || !container_id[0])
        return false;
    const struct pod_entry *e = find(container_id);
    if (!e && (!ever_listed || now - listed_at >= RESCAN_NS)) {
        list_again();
        listed_at = now;
        ever_listed = true;
        e = find(container_id);
    }
    if (!e)
        return false;
    *ns = e->names;
    *pod = *ns + strlen(*ns) + 1;
    *container = *pod + strlen(*pod) + 1;
    return true;
}
