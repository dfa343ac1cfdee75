/*
 * A small JSON reader for gpuslicectl top, which draws the status the
 * server writes as JSON (status.c). Recursive descent into a tree of
 * nodes; depth is bounded, strings are unescaped (\uXXXX outside ASCII
 * becomes '?': tenant names are ASCII), and anything that is not exactly
 * one JSON value is refused.
 */
#include "ctl.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32

struct reader {
    const char *p, *end;
    int depth;
};

static void skip_space(struct reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static struct json *node(enum json_type type)
{
    struct json *j = calloc(1, sizeof *j);
    if (j)
        j->type = type;
    return j;
}

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string at r->p (its opening quote); NULL if malformed. */
static char *read_string(struct reader *r)
{
    if (r->p >= r->end || *r->p != '"')
        return NULL;
    r->p++;
    char *s = malloc((size_t)(r->end - r->p) + 1);
    if (!s)
        return NULL;
    size_t n = 0;
    while (r->p < r->end && *r->p != '"') {
        char c = *r->p++;
        if ((unsigned char)c < 0x20)
            goto bad;
        if (c != '\\') {
            s[n++] = c;
            continue;
        }
        if (r->p >= r->end)
            goto bad;
        c = *r->p++;
        switch (c) {
        case '"': case '\\': case '/': s[n++] = c; break;
        case 'b': s[n++] = '\b'; break;
        case 'f': s[n++] = '\f'; break;
        case 'n': s[n++] = '\n'; break;
        case 'r': s[n++] = '\r'; break;
        case 't': s[n++] = '\t'; break;
        case 'u': {
            if (r->end - r->p < 4)
                goto bad;
            int v = 0;
            for (int i = 0; i < 4; i++) {
                int h = hex(r->p[i]);
                if (h < 0)
                    goto bad;
                v = v * 16 + h;
            }
            r->p += 4;
            s[n++] = v > 0 && v < 0x80 ? (char)v : '?';
            break;
        }
        default: goto bad;
        }
    }
    if (r->p >= r->end)
        goto bad;
    r->p++;
    s[n] = '\0';
    return s;
bad:
    free(s);
    return NULL;
}

static struct json *read_value(struct reader *r);

/* An array or object: its elements in order, members with their keys. */
static struct json *read_container(struct reader *r, bool object)
{
    struct json *j = node(object ? JSON_OBJECT : JSON_ARRAY);
    if (!j || ++r->depth > MAX_DEPTH)
        goto bad;
    r->p++;
    struct json **tail = &j->child;
    skip_space(r);
    if (r->p < r->end && *r->p == (object ? '}' : ']')) {
        r->p++;
        r->depth--;
        return j;
    }
    for (;;) {
        char *key = NULL;
        skip_space(r);
        if (object) {
            key = read_string(r);
            skip_space(r);
            if (!key || r->p >= r->end || *r->p != ':') {
                free(key);
                goto bad;
            }
            r->p++;
        }
        struct json *v = read_value(r);
        if (!v) {
            free(key);
            goto bad;
        }
        v->key = key;
        *tail = v;
        tail = &v->next;
        skip_space(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == (object ? '}' : ']')) {
            r->p++;
            r->depth--;
            return j;
        }
        goto bad;
    }
bad:
    json_free(j);
    return NULL;
}

static struct json *read_number(struct reader *r)
{
    char buf[64];
    size_t n = 0;
    while (r->p + n < r->end && n < sizeof buf - 1 && strchr("+-0123456789.eE", r->p[n]) && r->p[n])
        n++;
    if (n == 0)
        return NULL;
    memcpy(buf, r->p, n);
    buf[n] = '\0';
    char *end;
    double v = strtod(buf, &end);
    if (*end)
        return NULL;
    struct json *j = node(JSON_NUMBER);
    if (j)
        j->number = v;
    r->p += n;
    return j;
}

static bool literal(struct reader *r, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return false;
    r->p += n;
    return true;
}

static struct json *read_value(struct reader *r)
{
    skip_space(r);
    if (r->p >= r->end)
        return NULL;
    switch (*r->p) {
    case '{': return read_container(r, true);
    case '[': return read_container(r, false);
    case '"': {
        char *s = read_string(r);
        struct json *j = s ? node(JSON_STRING) : NULL;
        if (!j) {
            free(s);
            return NULL;
        }
        j->string = s;
        return j;
    }
    case 't':
    case 'f': {
        bool yes = *r->p == 't';
        if (!literal(r, yes ? "true" : "false"))
            return NULL;
        struct json *j = node(JSON_BOOL);
        if (j)
            j->number = yes;
        return j;
    }
    case 'n': return literal(r, "null") ? node(JSON_NULL) : NULL;
    default: return read_number(r);
    }
}

struct json *json_parse(const char *text, size_t len)
{
    struct reader r = {.p = text, .end = text + len};
    struct json *j = read_value(&r);
    skip_space(&r);
    if (j && r.p != r.end) {
        json_free(j);
        return NULL;
    }
    return j;
}

void json_free(struct json *j)
{
    while (j) {
        struct json *next = j->next;
        json_free(j->child);
        free(j->string);
        free(j->key);
        free(j);
        j = next;
    }
}

const struct json *json_get(const struct json *object, const char *key)
{
    if (!object || object->type != JSON_OBJECT)
        return NULL;
    for (const struct json *m = object->child; m; m = m->next)
        if (m->key && strcmp(m->key, key) == 0)
            return m;
    return NULL;
}

double json_number(const struct json *object, const char *key, double fallback)
{
    const struct json *m = json_get(object, key);
    return m && m->type == JSON_NUMBER ? m->number : fallback;
}

const char *json_string(const struct json *object, const char *key, const char *fallback)
{
    const struct json *m = json_get(object, key);
    return m && m->type == JSON_STRING ? m->string : fallback;
}
