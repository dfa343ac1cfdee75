/*
 * Parsing an HTTP/1.x request head (RFC 9112) for the /metrics listener:
 * the request line and the header fields, up to the empty line that ends
 * them. It is strict where leniency would be a risk and small: tokens
 * must be tokens, a line ends in CRLF (or a bare LF), no obsolete line
 * folding, no NUL; HTTP/1.1 needs a Host; a request that announces a
 * body (Content-Length other than 0, Transfer-Encoding) is refused, so
 * that no byte after the head is ever read as a request. Only the method,
 * the version and the path are kept. A head that arrives a byte at a time
 * costs no more than one that arrives at once: the search for its end
 * goes on where it stopped.
 */
#include "http_request.h"

#include <string.h>
#include <strings.h>

#define TARGET_MAX 2048

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The end of the head: the index just past its empty line, or 0 if it is
 * not in buf yet. It is searched for from *from, and *from is moved to
 * where the next search starts (no earlier byte can end the head). */
static size_t head_end(const char *buf, size_t *from, size_t len)
{
    size_t i = *from;
    for (; i + 1 < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (buf[i + 1] == '\r') {
            if (i + 2 >= len)
                break; /* LF CR and no more yet: look here again */
            if (buf[i + 2] == '\n')
                return i + 3;
        }
    }
    *from = i;
    return 0;
}

/* The line at *pos (ending before CRLF or LF, within end); moves *pos past
 * it. -1 if a CR is not followed by LF, or there is no line end. */
static long next_line(const char *buf, size_t end, size_t *pos)
{
    size_t start = *pos;
    for (size_t i = start; i < end; i++) {
        if (buf[i] == '\n') {
            *pos = i + 1;
            return (long)(i - start);
        }
        if (buf[i] == '\r') {
            if (i + 1 >= end || buf[i + 1] != '\n')
                return -1;
            *pos = i + 2;
            return (long)(i - start);
        }
    }
    return -1;
}

static enum http_parse parse_request_line(const char *line, size_t n, struct http_request *req)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i >= n || line[i] != ' ')
        return HTTP_BAD;
    req->method = i == 3 && memcmp(line, "GET", 3) == 0    ? HTTP_GET
                  : i == 4 && memcmp(line, "HEAD", 4) == 0 ? HTTP_HEAD
                                                           : HTTP_OTHER_METHOD;
    size_t target = ++i;
    while (i < n && (unsigned char)line[i] > 0x20 && (unsigned char)line[i] < 0x7f)
        i++;
    size_t target_len = i - target;
    if (target_len == 0 || i >= n || line[i] != ' ')
        return target_len > TARGET_MAX ? HTTP_URI_TOO_LONG : HTTP_BAD;
    if (target_len > TARGET_MAX)
        return HTTP_URI_TOO_LONG;
    if (line[target] != '/')
        return HTTP_BAD; /* origin-form only: no absolute URIs, no '*' */
    const char *query = memchr(line + target, '?', target_len);
    size_t path_len = query ? (size_t)(query - (line + target)) : target_len;
    if (path_len >= HTTP_PATH_MAX)
        return HTTP_URI_TOO_LONG;
    memcpy(req->path, line + target, path_len);
    req->path[path_len] = '\0';
    const char *version = line + i + 1;
    size_t version_len = n - i - 1;
    if (version_len != 8 || memcmp(version, "HTTP/", 5) != 0 || version[5] < '0' || version[5] > '9' ||
        version[6] != '.' || version[7] < '0' || version[7] > '9')
        return HTTP_BAD;
    if (version[5] != '1' || (version[7] != '0' && version[7] != '1'))
        return HTTP_BAD_VERSION;
    req->minor = version[7] - '0';
    return HTTP_OK;
}

/* One header field line; *host is set if it is Host. */
static enum http_parse parse_field(const char *line, size_t n, int *host)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i >= n || line[i] != ':')
        return HTTP_BAD; /* also an obsolete fold: a line starting with SP or HT */
    size_t name_len = i++;
    while (i < n && (line[i] == ' ' || line[i] == '\t'))
        i++;
    size_t value = i, value_end = n;
    while (value_end > value && (line[value_end - 1] == ' ' || line[value_end - 1] == '\t'))
        value_end--;
    for (size_t k = value; k < value_end; k++) {
        unsigned char c = (unsigned char)line[k];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return HTTP_BAD;
    }
    const char *name = line;
    if (name_len == 4 && strncasecmp(name, "host", 4) == 0) {
        if (*host)
            return HTTP_BAD; /* two Hosts */
        *host = 1;
    } else if (name_len == 17 && strncasecmp(name, "transfer-encoding", 17) == 0) {
        return HTTP_BAD;
    } else if (name_len == 14 && strncasecmp(name, "content-length", 14) == 0) {
        for (size_t k = value; k < value_end; k++)
            if (line[k] != '0')
                return HTTP_BAD; /* a body: not served */
        if (value_end == value)
            return HTTP_BAD;
    }
    return HTTP_OK;
}

enum http_parse http_parse_more(struct http_scan *scan, const char *buf, size_t len, struct http_request *req)
{
    size_t limit = len < HTTP_REQUEST_MAX ? len : HTTP_REQUEST_MAX;
    if (!scan->started) {
        /* A server should ignore empty lines before the request line. */
        size_t pos = scan->start;
        while (pos < limit && (buf[pos] == '\r' || buf[pos] == '\n'))
            pos++;
        scan->start = scan->scanned = pos;
        scan->started = pos < limit;
    }
    size_t end = scan->started ? head_end(buf, &scan->scanned, limit) : 0;
    if (!end)
        return len >= HTTP_REQUEST_MAX ? HTTP_TOO_LARGE : HTTP_INCOMPLETE;
    if (memchr(buf, '\0', end))
        return HTTP_BAD;
    size_t pos = scan->start, start = pos;
    long n = next_line(buf, end, &pos);
    if (n <= 0)
        return HTTP_BAD;
    enum http_parse r = parse_request_line(buf + start, (size_t)n, req);
    if (r != HTTP_OK)
        return r;
    int host = 0;
    for (;;) {
        start = pos;
        n = next_line(buf, end, &pos);
        if (n < 0)
            return HTTP_BAD;
        if (n == 0)
            break; /* the empty line that ends the head */
        r = parse_field(buf + start, (size_t)n, &host);
        if (r != HTTP_OK)
            return r;
    }
    if (req->minor == 1 && !host)
        return HTTP_BAD;
    req->length = pos;
    return HTTP_OK;
}

enum http_parse http_parse_request(const char *buf, size_t len, struct http_request *req)
{
    struct http_scan scan = {0};
    return http_parse_more(&scan, buf, len, req);
}
