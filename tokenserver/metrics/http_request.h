/*
 * The request head of an HTTP/1.x request, as the /metrics listener reads
 * it: pure bytes in, a method and a path out, no I/O (metrics_http.c reads
 * the socket and parses as bytes arrive; test/metrics/http_fuzz.c calls this
 * directly).
 */
#ifndef GPUSLICE_HTTP_REQUEST_H
#define GPUSLICE_HTTP_REQUEST_H

#include <stddef.h>

#define HTTP_REQUEST_MAX 8192  /* request line and headers, in bytes */
#define HTTP_PATH_MAX 256      /* the path, without the query, with its NUL */

enum http_method { HTTP_GET, HTTP_HEAD, HTTP_OTHER_METHOD };

enum http_parse {
    HTTP_INCOMPLETE,     /* no end of the head yet: read more */
    HTTP_OK,
    HTTP_BAD,            /* 400: not a well-formed request, or one with a body */
    HTTP_URI_TOO_LONG,   /* 414 */
    HTTP_TOO_LARGE,      /* 431: no end of the head within HTTP_REQUEST_MAX */
    HTTP_BAD_VERSION,    /* 505: not HTTP/1.0 or HTTP/1.1 */
};

struct http_request {
    enum http_method method;
    int minor;                 /* HTTP/1.minor */
    char path[HTTP_PATH_MAX];  /* starts with '/'; the query is dropped */
    size_t length;             /* bytes of the head, its empty line included */
};

/* How far an incremental parse has looked for the end of the head; all
 * zero before the first byte of a request. */
struct http_scan {
    size_t start;   /* the request line's first byte, past empty lines before it */
    size_t scanned; /* the head does not end before this */
    int started;    /* start is known: a byte other than CR or LF was seen */
};

/* Parses the head at the start of buf (len bytes, not NUL-terminated) as
 * it arrives: call again with the same scan and more bytes after
 * HTTP_INCOMPLETE (the bytes seen before unchanged). Each byte is looked
 * at a bounded number of times, however it is split, and the head's lines
 * are parsed once, when its end is there. Reads nothing outside
 * [buf, buf+len); req is filled on HTTP_OK. */
enum http_parse http_parse_more(struct http_scan *scan, const char *buf, size_t len, struct http_request *req);

/* The same, all at once: bytes that are all there is so far. */
enum http_parse http_parse_request(const char *buf, size_t len, struct http_request *req);

#endif
