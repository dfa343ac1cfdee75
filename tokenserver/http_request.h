/*
 * The request head of an HTTP/1.x request, as the /metrics listener reads
 * it: pure bytes in, a method and a path out, no I/O (metrics_http.c reads
 * the socket; test/fuzz/http_fuzz.c calls this directly).
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

/* Parses the head at the start of buf (len bytes, not NUL-terminated).
 * Reads nothing outside [buf, buf+len); req is filled on HTTP_OK. */
enum http_parse http_parse_request(const char *buf, size_t len, struct http_request *req);

#endif
