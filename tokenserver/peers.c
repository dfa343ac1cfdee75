/*
 * Who a client is, from the kernel rather than from anything it says: its
 * PID and uid from SO_PEERCRED (in the server's PID namespace, so the
 * host's PID, not the one a container shows), and, from /proc/PID/cgroup,
 * the container it runs in and, under Kubernetes, its pod. Read once, when
 * the client connects; shown by gpuslicectl status.
 *
 * Cgroup paths name containers in a few ways, the 64-hex container ID
 * always among them:
 *   docker      /docker/ID, /system.slice/docker-ID.scope
 *   podman      /libpod_parent/libpod-ID, /machine.slice/libpod-ID.scope
 *   containerd  /kubepods/besteffort/podUID/ID,
 *               /kubepods.slice/.../kubepods-besteffort-podUID.slice/cri-containerd-ID.scope
 *   CRI-O       .../crio-ID.scope, .../podUID/crio-ID
 * A pod's UID is the text after "pod", with '_' for '-' under the systemd
 * cgroup driver.
 */
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool hex_run(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return false;
    return true;
}

/* The last 64-hex run in path that stands alone between separators. */
static bool find_container_id(const char *path, size_t len, char out[PEER_CONTAINER_ID_MAX])
{
    bool found = false;
    for (size_t i = 0; i + 64 <= len; i++) {
        if (i > 0 && path[i - 1] != '/' && path[i - 1] != '-' && path[i - 1] != ':')
            continue;
        if (!hex_run(path + i, 64))
            continue;
        char after = i + 64 < len ? path[i + 64] : '\0';
        if (after != '\0' && after != '/' && after != '.')
            continue;
        memcpy(out, path + i, 64);
        out[64] = '\0';
        found = true;
    }
    return found;
}

/* The last "pod" + UID (8-4-4-4-12 hex, '-' or '_' between) in path. */
static bool find_pod_uid(const char *path, size_t len, char out[PEER_POD_UID_MAX])
{
    static const size_t dash[] = {8, 13, 18, 23};
    bool found = false;
    for (size_t i = 0; i + 3 + 36 <= len; i++) {
        if (memcmp(path + i, "pod", 3) != 0)
            continue;
        const char *u = path + i + 3;
        bool ok = true;
        for (size_t k = 0, d = 0; k < 36 && ok; k++) {
            if (d < 4 && k == dash[d]) {
                ok = u[k] == '-' || u[k] == '_';
                d++;
            } else {
                ok = hex_run(u + k, 1);
            }
        }
        char after = i + 39 < len ? path[i + 39] : '\0';
        if (!ok || (after != '\0' && after != '/' && after != '.'))
            continue;
        for (size_t k = 0; k < 36; k++)
            out[k] = u[k] == '_' ? '-' : u[k];
        out[36] = '\0';
        found = true;
    }
    return found;
}

void peer_parse_cgroup(const char *text, struct peer *p)
{
    p->container_id[0] = '\0';
    p->pod_uid[0] = '\0';
    /* Lines are "hierarchy:controllers:path"; the unified one ("0::")
     * wins, but on cgroup v1 it may be empty or missing. */
    for (int pass = 0; pass < 2 && !p->container_id[0]; pass++) {
        for (const char *line = text; *line;) {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            const char *c1 = memchr(line, ':', len);
            const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
            bool unified = len >= 3 && memcmp(line, "0::", 3) == 0;
            if (c2 && (pass == 1 || unified)) {
                const char *path = c2 + 1;
                size_t plen = len - (size_t)(path - line);
                if (find_container_id(path, plen, p->container_id)) {
                    find_pod_uid(path, plen, p->pod_uid);
                    return;
                }
                if (!p->pod_uid[0])
                    find_pod_uid(path, plen, p->pod_uid);
            }
            line += len + (end ? 1 : 0);
        }
    }
}

void peer_identify(int fd, struct peer *p)
{
    memset(p, 0, sizeof *p);
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred || cred.pid <= 0)
        return; /* a peer in a PID namespace the server cannot see has pid 0 */
    p->pid = (uint32_t)cred.pid;
    p->uid = (uint32_t)cred.uid;
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/%d/cgroup", cred.pid);
    int cfd = open(path, O_RDONLY | O_CLOEXEC);
    if (cfd < 0)
        return;
    size_t got = 0;
    for (;;) {
        ssize_t n = read(cfd, text + got, sizeof text - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == sizeof text - 1)
            break;
    }
    close(cfd);
    text[got] = '\0';
    peer_parse_cgroup(text, p);
}
