/*
 * Tenant configuration: one file per tenant, tenants.d/NAME.conf, of
 * "key = value" lines. Blank lines and lines starting with '#' are ignored.
 *
 *   share = 3          positive weight (default 1)
 *   limit = 0.5        largest fraction of a GPU, 0 < limit <= 1 (default 1)
 *   quantum_ms = 20    slice length in milliseconds, 1..1000 (default 20)
 *   memory = 4G        device memory cap per GPU, K/M/G/T suffixes (default none)
 *
 * Anything else is an error naming the file, the line and the reason.
 */
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool config_valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= GS_NAME_MAX || name[0] == '.' || name[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '-' && name[i] != '_' && name[i] != '.')
            return false;
    return true;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static bool parse_double(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_bytes(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*text))
        return false;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno)
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || (shift && v > (UINT64_MAX >> shift)) || v == 0)
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

int config_parse_file(const char *path, struct tenant_config *out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct tenant_config c = {.share = 1, .limit = 1, .quantum_ns = 20000000ull, .memory = 0};
    bool seen[4] = {false};
    static const char *const keys[] = {"share", "limit", "quantum_ms", "memory"};
    char line[1024];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line longer than %zu characters", path, lineno, sizeof line - 2);
            rc = -1;
            break;
        }
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected 'key = value'", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        int k = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(key, keys[i]) == 0)
                k = i;
        if (k < 0) {
            snprintf(err, errlen, "%s:%d: unknown key '%.64s' (expected share, limit, quantum_ms or memory)",
                     path, lineno, key);
            rc = -1;
            break;
        }
        if (seen[k]) {
            snprintf(err, errlen, "%s:%d: '%s' given twice", path, lineno, key);
            rc = -1;
            break;
        }
        seen[k] = true;
        double d;
        bool ok;
        switch (k) {
        case 0:
            ok = parse_double(value, &d) && d > 0 && d <= 1e6;
            c.share = d;
            if (!ok)
                snprintf(err, errlen, "%s:%d: share must be a positive number, got '%.64s'", path, lineno, value);
            break;
        case 1:
            ok = parse_double(value, &d) && d > 0 && d <= 1;
            c.limit = d;
            if (!ok)
                snprintf(err, errlen, "%s:%d: limit must be a fraction with 0 < limit <= 1, got '%.64s'", path,
                         lineno, value);
            break;
        case 2:
            ok = parse_double(value, &d) && d >= 1 && d <= 1000 && d == floor(d);
            c.quantum_ns = (uint64_t)d * 1000000ull;
            if (!ok)
                snprintf(err, errlen, "%s:%d: quantum_ms must be a whole number of milliseconds from 1 to 1000, got '%.64s'",
                         path, lineno, value);
            break;
        default:
            ok = parse_bytes(value, &c.memory);
            if (!ok)
                snprintf(err, errlen, "%s:%d: memory must be a byte count such as 4G or 512M, got '%.64s'", path,
                         lineno, value);
            break;
        }
        if (!ok) {
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -1;
    }
    fclose(f);
    if (rc == 0)
        *out = c;
    return rc;
}
