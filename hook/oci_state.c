/*
 * What the hook knows about the container: the OCI state the runtime
 * writes on the hook's stdin (pid, bundle, annotations) and, from the
 * bundle's config.json, the root (path, readonly), the cgroup path and the
 * annotations again (older runtimes leave them out of the state). Parsed
 * with json-c.
 */
#include "hook.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuslice/containers.h"

#define JSON_MAX (4u << 20) /* a config.json is a few KiB; refuse anything huge */

/* Reads all of fd into a NUL-terminated malloc'd buffer; NULL with errno. */
static char *read_all(int fd, size_t *len_out)
{
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    for (;;) {
        if (len + 1 == cap) {
            if (cap >= JSON_MAX) {
                free(buf);
                errno = EFBIG;
                return NULL;
            }
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved = errno;
            free(buf);
            errno = saved;
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    *len_out = len;
    return buf;
}

static json_object *parse(const char *text, size_t len, const char *what)
{
    json_tokener *tok = json_tokener_new();
    if (!tok)
        die("out of memory");
    json_object *obj = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    json_tokener_free(tok);
    if (jerr != json_tokener_success || !json_object_is_type(obj, json_type_object))
        die("%s is not a JSON object: %s", what,
            jerr == json_tokener_continue  ? "it ends too early"
            : jerr != json_tokener_success ? json_tokener_error_desc(jerr)
                                           : "wrong type");
    return obj;
}

/* The string member key of obj copied into out, or "" if absent; dies if
 * it is there but not a string or too long. */
static void get_string(json_object *obj, const char *key, char *out, size_t cap, const char *what)
{
    out[0] = '\0';
    json_object *v;
    if (!obj || !json_object_object_get_ex(obj, key, &v) || json_object_is_type(v, json_type_null))
        return;
    if (!json_object_is_type(v, json_type_string))
        die("%s: \"%s\" is not a string", what, key);
    const char *s = json_object_get_string(v);
    size_t n = strlen(s);
    if (n >= cap || (size_t)json_object_get_string_len(v) != n)
        die("%s: \"%s\" is too long or holds a NUL", what, key);
    memcpy(out, s, n + 1);
}

static json_object *get_object(json_object *obj, const char *key, const char *what)
{
    json_object *v;
    if (!obj || !json_object_object_get_ex(obj, key, &v) || json_object_is_type(v, json_type_null))
        return NULL;
    if (!json_object_is_type(v, json_type_object))
        die("%s: \"%s\" is not an object", what, key);
    return v;
}

void oci_read(int state_fd, struct oci_container *c)
{
    memset(c, 0, sizeof *c);
    size_t len;
    char *text = read_all(state_fd, &len);
    if (!text)
        die("cannot read the container state on stdin: %s", strerror(errno));
    json_object *state = parse(text, len, "the container state on stdin");
    free(text);

    json_object *pid;
    if (!json_object_object_get_ex(state, "pid", &pid) || !json_object_is_type(pid, json_type_int) ||
        json_object_get_int64(pid) <= 0 || json_object_get_int64(pid) > 0x3fffffff)
        die("the container state has no valid \"pid\"");
    c->pid = (pid_t)json_object_get_int64(pid);
    get_string(state, "id", c->id, sizeof c->id, "the container state");
    get_string(state, "bundle", c->bundle, sizeof c->bundle, "the container state");
    if (c->bundle[0] != '/')
        die("the container state has no absolute \"bundle\"");
    get_string(get_object(state, "annotations", "the container state"), GS_TENANT_ANNOTATION, c->tenant,
               sizeof c->tenant, "the container state's annotations");

    char path[4096 + 16];
    snprintf(path, sizeof path, "%s/config.json", c->bundle);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die("cannot open %s: %s", path, strerror(errno));
    text = read_all(fd, &len);
    int saved = errno;
    close(fd);
    if (!text)
        die("cannot read %s: %s", path, strerror(saved));
    json_object *config = parse(text, len, path);
    free(text);

    json_object *root = get_object(config, "root", path);
    char root_path[4096];
    get_string(root, "path", root_path, sizeof root_path, path);
    if (!root_path[0])
        die("%s has no root.path", path);
    int n = root_path[0] == '/' ? snprintf(c->root, sizeof c->root, "%s", root_path)
                                : snprintf(c->root, sizeof c->root, "%s/%s", c->bundle, root_path);
    if (n < 0 || (size_t)n >= sizeof c->root)
        die("%s: root.path is too long", path);
    json_object *ro;
    c->root_readonly = json_object_object_get_ex(root, "readonly", &ro) && json_object_get_boolean(ro);
    /* Set by the runtime (podman's --cgroup-parent, the kubelet's pod
     * cgroup), never by an image. */
    get_string(get_object(config, "linux", path), "cgroupsPath", c->cgroups_path, sizeof c->cgroups_path, path);
    if (!c->tenant[0])
        get_string(get_object(config, "annotations", path), GS_TENANT_ANNOTATION, c->tenant, sizeof c->tenant,
                   "config.json's annotations");
    json_object_put(config);
    json_object_put(state);
}
