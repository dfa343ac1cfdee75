/*
 * Kubernetes object names as the API validates them: RFC 1123 DNS labels
 * (namespaces) and DNS subdomains (claims, slices). gpuslice-dra checks
 * the names it puts into API paths with these.
 */
#include "kube_internal.h"

#include <string.h>

static bool is_lower_alphanumeric(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* One label of at most max_length characters: [a-z0-9]([-a-z0-9]*[a-z0-9])? */
static bool is_label(const char *start, size_t length, size_t max_length)
{
    if (length == 0 || length > max_length)
        return false;
    if (!is_lower_alphanumeric(start[0]) || !is_lower_alphanumeric(start[length - 1]))
        return false;
    for (size_t i = 0; i < length; i++) {
        if (!is_lower_alphanumeric(start[i]) && start[i] != '-')
            return false;
    }
    return true;
}

bool kube_is_dns_label(const char *name)
{
    return name && is_label(name, strlen(name), 63);
}

bool kube_is_dns_subdomain(const char *name)
{
    if (!name)
        return false;
    size_t length = strlen(name);
    if (length == 0 || length > 253)
        return false;
    const char *start = name;
    for (;;) {
        const char *dot = strchr(start, '.');
        size_t label_length = dot ? (size_t)(dot - start) : strlen(start);
        if (!is_label(start, label_length, 253))
            return false;
        if (!dot)
            return true;
        start = dot + 1;
    }
}
