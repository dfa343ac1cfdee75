/*
 * Tenant configuration: the text of one file, tenants.d/NAME.conf, of
 * "key = value" lines. Blank lines and lines starting with '#' are ignored.
 * The keys, their values and defaults: config_keys below, the one list the
 * parser, its unknown-key message, gpuslice-server --help and
 * --help-tenant-file (and the page gpuslice-tenant(5) made from it) read.
 *
 * Numbers are decimal only ("0x10", "inf", "nan" are errors), and the
 * ranges keep every later computation finite: the scheduler divides by
 * share and by limit. Anything else is an error naming the file, the line
 * and the reason. A UTF-8 byte order mark at the start (as some Windows
 * editors write) and CRLF line ends are accepted. Pure text in, settings out: no I/O here (config_file.c
 * reads the file; the config fuzz target calls this directly).
 */
#include "server.h"

#include "gpuslice/rules.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_CHARS 1022

const char *config_gang_name(enum gang_mode g)
{
    return g == GANG_ON ? "on" : g == GANG_OFF ? "off" : "auto";
}

const char *config_on_server_down_name(enum on_server_down p)
{
    return p == ON_DOWN_WAIT ? "wait" : p == ON_DOWN_OPEN ? "open" : "default";
}

const char *config_class_name(enum tenant_class c)
{
    return c == CLASS_LATENCY ? "latency" : "batch";
}

bool config_valid_name(const char *name)
{
    return gs_tenant_name_valid(name);
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

/* A copy of s for a message: at most 64 characters, each unprintable one
 * shown as '?'. */
static const char *shown(const char *s, char out[68])
{
    size_t i = 0;
    for (; s[i] && i < 64; i++)
        out[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (s[i])
        out[i++] = '.', out[i++] = '.';
    out[i] = '\0';
    return out;
}

static size_t digits(const char *s)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    return n;
}

/* DIGITS[.DIGITS][e[+-]DIGITS] or .DIGITS[...]: what people write, and
 * nothing strtod would also take (hex, inf, nan, signs, spaces). */
static bool parse_decimal(const char *text, double *out)
{
    const char *p = text;
    size_t whole = digits(p);
    p += whole;
    size_t frac = 0;
    if (*p == '.') {
        p++;
        frac = digits(p);
        p += frac;
    }
    if (whole + frac == 0)
        return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        size_t exp = digits(p);
        if (exp == 0 || exp > 3)
            return false;
        p += exp;
    }
    if (*p)
        return false;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end != p || (errno && errno != ERANGE))
        return false;
    *out = v; /* ERANGE: 0 or HUGE_VAL, which the range checks refuse */
    return true;
}

static bool parse_whole(const char *text, unsigned long long max, unsigned long long *out)
{
    size_t n = digits(text);
    if (n == 0 || text[n] || n > 19)
        return false;
    unsigned long long v = strtoull(text, NULL, 10);
    if (v > max)
        return false;
    *out = v;
    return true;
}


/* What each key says, in the order of the enum below (its index is the
 * key's number). Descriptions are one sentence or more, unwrapped: the
 * printers wrap them. */
const struct config_key config_keys[] = {
    {"share", "3", "weight, a decimal number from 0.001 to 1000000 (default 1): busy tenants split each GPU in "
                   "proportion to their shares"},
    {"limit", "0.5", "largest fraction of a GPU, 0.001 <= limit <= 1 (default 1)"},
    {"quantum_ms", "20", "slice length in whole milliseconds, 1 to 1000 (default 20)"},
    {"memory", "4G", "device memory cap per GPU, summed over the tenant's processes, with a K, M, G or T suffix, or "
                     "none (the default); 0 is refused, since it would allow no memory at all"},
    {"gang", "auto", "auto, on or off. A gang (auto, the default, or on, once its processes use two GPUs or more) "
                     "gets its slices on all its GPUs at once and gives them back together, so that the ranks of a "
                     "collective (NCCL) run together; off: each GPU is granted on its own (independent work per "
                     "GPU)"},
    {"on_server_down", "wait", "wait or open: what the tenant's processes in containers do while no server "
                               "answers (default: the server's --on-server-down)"},
    {"class", "batch", "batch or latency: a latency tenant that asks for a GPU a batch tenant holds, and is next "
                       "by its share, has that slice revoked at once (default batch)"},
    {"preempt_ms", "2", "for a latency tenant: the most estimated device time a batch holder of its GPUs admits "
                        "ahead of the GPU, 1 to 1000 (default: the server's --preempt-ms)"},
};
enum { KEY_SHARE, KEY_LIMIT, KEY_QUANTUM, KEY_MEMORY, KEY_GANG, KEY_ON_SERVER_DOWN, KEY_CLASS, KEY_PREEMPT, NKEYS };
_Static_assert(sizeof config_keys / sizeof config_keys[0] == NKEYS, "one config_keys entry per key");
const unsigned config_nkeys = NKEYS;

size_t config_key_list(char *out, size_t outlen, const char *last_sep)
{
    size_t n = 0;
    if (outlen)
        out[0] = '\0';
    for (unsigned i = 0; i < NKEYS; i++) {
        const char *sep = i == 0 ? "" : i == NKEYS - 1 ? last_sep : ", ";
        int w = snprintf(out + n, outlen > n ? outlen - n : 0, "%s%s", sep, config_keys[i].name);
        if (w > 0)
            n += (size_t)w;
    }
    return n;
}

/* Applies one "key = value" line to c; false with a message in err. */
static bool parse_line(char *s, const char *path, int lineno, bool seen[NKEYS], struct tenant_config *c,
                       char *err, size_t errlen)
{
    char a[68], b[68];
    char *eq = strchr(s, '=');
    if (!eq) {
        snprintf(err, errlen, "%s:%d: expected 'key = value'", path, lineno);
        return false;
    }
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    int k = -1;
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(key, config_keys[i].name) == 0)
            k = i;
    if (k < 0) {
        char known[160];
        config_key_list(known, sizeof known, " or ");
        snprintf(err, errlen, "%s:%d: unknown key '%s' (expected %s)", path, lineno, shown(key, a), known);
        return false;
    }
    if (seen[k]) {
        snprintf(err, errlen, "%s:%d: '%s' given twice", path, lineno, key);
        return false;
    }
    seen[k] = true;
    double d = 0;
    unsigned long long ms = 0;
    switch (k) {
    case KEY_SHARE:
        if (parse_decimal(value, &d) && d >= SHARE_MIN && d <= SHARE_MAX) {
            c->share = d;
            return true;
        }
        snprintf(err, errlen, "%s:%d: share must be a decimal number from %g to %.0f, got '%s'", path, lineno,
                 SHARE_MIN, SHARE_MAX, shown(value, b));
        return false;
    case KEY_LIMIT:
        if (parse_decimal(value, &d) && d >= LIMIT_MIN && d <= 1) {
            c->limit = d;
            return true;
        }
        snprintf(err, errlen, "%s:%d: limit must be a fraction with %g <= limit <= 1, got '%s'", path, lineno,
                 LIMIT_MIN, shown(value, b));
        return false;
    case KEY_QUANTUM:
        if (parse_whole(value, QUANTUM_MS_MAX, &ms) && ms >= 1) {
            c->quantum_ns = ms * 1000000ull;
            return true;
        }
        snprintf(err, errlen, "%s:%d: quantum_ms must be a whole number of milliseconds from 1 to %d, got '%s'",
                 path, lineno, QUANTUM_MS_MAX, shown(value, b));
        return false;
    case KEY_GANG:
        for (int g = GANG_AUTO; g <= GANG_OFF; g++)
            if (strcmp(value, config_gang_name((enum gang_mode)g)) == 0) {
                c->gang = (enum gang_mode)g;
                return true;
            }
        snprintf(err, errlen, "%s:%d: gang must be auto, on or off, got '%s'", path, lineno, shown(value, b));
        return false;
    case KEY_CLASS:
        for (int k2 = CLASS_BATCH; k2 <= CLASS_LATENCY; k2++)
            if (strcmp(value, config_class_name((enum tenant_class)k2)) == 0) {
                c->class = (enum tenant_class)k2;
                return true;
            }
        snprintf(err, errlen, "%s:%d: class must be batch or latency, got '%s'", path, lineno, shown(value, b));
        return false;
    case KEY_PREEMPT:
        if (parse_whole(value, PREEMPT_MS_MAX, &ms) && ms >= 1) {
            c->preempt_ns = ms * 1000000ull;
            return true;
        }
        snprintf(err, errlen, "%s:%d: preempt_ms must be a whole number of milliseconds from 1 to %d, got '%s'",
                 path, lineno, PREEMPT_MS_MAX, shown(value, b));
        return false;
    case KEY_ON_SERVER_DOWN:
        for (int p = ON_DOWN_WAIT; p <= ON_DOWN_OPEN; p++)
            if (strcmp(value, config_on_server_down_name((enum on_server_down)p)) == 0) {
                c->on_server_down = (enum on_server_down)p;
                return true;
            }
        snprintf(err, errlen, "%s:%d: on_server_down must be wait or open, got '%s'", path, lineno,
                 shown(value, b));
        return false;
    default:
        if (strcmp(value, "none") == 0) {
            c->memory = 0;
            return true;
        }
        if (gs_parse_bytes(value, &c->memory))
            return true;
        if (digits(value) > 0 && strspn(value, "0") == digits(value))
            snprintf(err, errlen, "%s:%d: memory = %s would allow no device memory at all, so it is refused; for no "
                     "cap leave 'memory' out or write 'memory = none'", path, lineno, shown(value, b));
        else
            snprintf(err, errlen, "%s:%d: memory must be a byte count such as 4G or 512M, or none, got '%s'", path,
                     lineno, shown(value, b));
        return false;
    }
}

int config_parse_text(const char *text, size_t len, const char *path, struct tenant_config *out, char *err,
                      size_t errlen)
{
    struct tenant_config c = {.share = 1, .limit = 1, .quantum_ns = 20000000ull, .memory = 0, .gang = GANG_AUTO,
                             .on_server_down = ON_DOWN_DEFAULT};
    bool seen[NKEYS] = {false};
    char line[LINE_MAX_CHARS + 2];
    int lineno = 0;
    size_t pos = 0;
    if (errlen)
        err[0] = '\0';
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        pos = 3; /* a UTF-8 byte order mark */
    while (pos < len) {
        lineno++;
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - start) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (memchr(start, '\0', n)) {
            snprintf(err, errlen, "%s:%d: NUL byte: not a text file", path, lineno);
            return CONFIG_BAD;
        }
        if (n > LINE_MAX_CHARS) {
            snprintf(err, errlen, "%s:%d: line longer than %d characters", path, lineno, LINE_MAX_CHARS);
            return CONFIG_BAD;
        }
        memcpy(line, start, n);
        line[n] = '\0';
        char *comment = strchr(line, '#'); /* to the end of the line; no value has a '#' */
        if (comment)
            *comment = '\0';
        char *s = trim(line);
        if (*s == '\0')
            continue;
        if (!parse_line(s, path, lineno, seen, &c, err, errlen))
            return CONFIG_BAD;
    }
    *out = c;
    return 0;
}
