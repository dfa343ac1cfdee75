/*
 * The rules of gpuslice/rules.h: tenant names and byte counts.
 */
#include "gpuslice/rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuslice/protocol.h"

static bool ascii_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool gs_tenant_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= GS_NAME_MAX || name[0] == '.' || name[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!ascii_alnum(name[i]) && name[i] != '-' && name[i] != '_' && name[i] != '.')
            return false;
    return true;
}

bool gs_parse_bytes(const char *text, uint64_t *out)
{
    size_t n = 0;
    while (text[n] >= '0' && text[n] <= '9')
        n++;
    if (n == 0 || n > 20)
        return false;
    errno = 0;
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno)
        return false;
    const char *end = text + n;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v == 0 || (shift && v > (UINT64_MAX >> shift)))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

const char *gs_bytes_text(uint64_t bytes, char out[32])
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v == (double)(uint64_t)v)
        snprintf(out, 32, "%.0f %s", v, units[u]);
    else
        snprintf(out, 32, "%.1f %s", v, units[u]);
    return out;
}
