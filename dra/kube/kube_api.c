/*
 * The HTTPS client of the Kubernetes API server (libcurl): where the server
 * is (options or the pod's KUBERNETES_SERVICE_HOST and _PORT), the service
 * account's bearer token (read again for every request: the kubelet
 * rotates it), verification against the cluster's CA (never turned off),
 * timeouts, and answers collected up to a bound. Also the retry of
 * requests that got no answer or a 429 or 5xx.
 */
#include "kube_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_TOKEN_FILE "/var/run/secrets/kubernetes.io/serviceaccount/token"
#define DEFAULT_CA_FILE "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
#define DEFAULT_TIMEOUT_MS 10000L
/* The largest answer kept: a ResourceClaim or ResourceSlice is a few KiB. */
#define MAX_RESPONSE_BYTES (4u << 20)
/* The largest token file read (service account tokens are about 1 KiB). */
#define MAX_TOKEN_BYTES (64u << 10)

struct kube_api {
    char server[512]; /* https://HOST:PORT, no trailing slash */
    char token_file[PATH_MAX];
    char ca_file[PATH_MAX];
    long timeout_ms;
    /* lock guards curl: one request at a time on this client's handle (it
     * keeps the connection and TLS session between requests). */
    pthread_mutex_t lock;
    CURL *curl;
};

/* libcurl's global initialization, done once (global_init_once) before the
 * first handle; global_init_result is written there and only read after. */
static pthread_once_t global_init_once = PTHREAD_ONCE_INIT;
static CURLcode global_init_result = CURLE_FAILED_INIT;

static void global_init(void)
{
    global_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool copy_text(char *out, size_t out_size, const char *text)
{
    size_t length = strlen(text);
    if (length >= out_size)
        return false;
    memcpy(out, text, length + 1);
    return true;
}

int kube_api_server_from_environment(char *out, size_t out_size, char *error, size_t error_size)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port) {
        snprintf(error, error_size,
                 "no API server: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not in a pod?)");
        return -1;
    }
    char *end;
    errno = 0;
    long port_number = strtol(port, &end, 10);
    if (errno != 0 || *end != '\0' || port_number < 1 || port_number > 65535) {
        snprintf(error, error_size, "KUBERNETES_SERVICE_PORT \"%s\" is not a port number", port);
        return -1;
    }
    for (const char *c = host; *c; c++) {
        if (*c == '/' || *c == '@' || *c == '?' || *c == '#' || *c <= ' ' || *c == 0x7f) {
            snprintf(error, error_size, "KUBERNETES_SERVICE_HOST \"%s\" is not a host", host);
            return -1;
        }
    }
    /* An IPv6 address goes in brackets. */
    bool ipv6 = strchr(host, ':') != NULL && host[0] != '[';
    int written = snprintf(out, out_size, ipv6 ? "https://[%s]:%ld" : "https://%s:%ld", host, port_number);
    if (written < 0 || (size_t)written >= out_size) {
        snprintf(error, error_size, "KUBERNETES_SERVICE_HOST is too long");
        return -1;
    }
    return 0;
}

struct kube_api *kube_api_open(const struct kube_api_options *options, char *error, size_t error_size)
{
    struct kube_api_options none = {0};
    if (!options)
        options = &none;
    pthread_once(&global_init_once, global_init);
    if (global_init_result != CURLE_OK) {
        snprintf(error, error_size, "libcurl: %s", curl_easy_strerror(global_init_result));
        return NULL;
    }
    struct kube_api *api = calloc(1, sizeof *api);
    if (!api) {
        snprintf(error, error_size, "out of memory");
        return NULL;
    }
    if (options->server) {
        if (strncmp(options->server, "https://", 8) != 0 || !options->server[8]) {
            snprintf(error, error_size, "API server \"%s\" is not an https:// address", options->server);
            goto fail;
        }
        if (!copy_text(api->server, sizeof api->server, options->server)) {
            snprintf(error, error_size, "API server address is too long");
            goto fail;
        }
        size_t length = strlen(api->server);
        while (length > 8 && api->server[length - 1] == '/')
            api->server[--length] = '\0';
    } else if (kube_api_server_from_environment(api->server, sizeof api->server, error, error_size) != 0) {
        goto fail;
    }
    if (!copy_text(api->token_file, sizeof api->token_file,
                   options->token_file ? options->token_file : DEFAULT_TOKEN_FILE) ||
        !copy_text(api->ca_file, sizeof api->ca_file, options->ca_file ? options->ca_file : DEFAULT_CA_FILE)) {
        snprintf(error, error_size, "token or CA file name is too long");
        goto fail;
    }
    if (options->timeout_ms < 0) {
        snprintf(error, error_size, "timeout %ld ms is negative", options->timeout_ms);
        goto fail;
    }
    api->timeout_ms = options->timeout_ms ? options->timeout_ms : DEFAULT_TIMEOUT_MS;
    int rc = pthread_mutex_init(&api->lock, NULL);
    if (rc != 0) {
        snprintf(error, error_size, "mutex: %s", strerror(rc));
        goto fail;
    }
    api->curl = curl_easy_init();
    if (!api->curl) {
        snprintf(error, error_size, "libcurl: cannot make a handle");
        (void)pthread_mutex_destroy(&api->lock); /* never locked */
        goto fail;
    }
    return api;
fail:
    free(api);
    return NULL;
}

void kube_api_close(struct kube_api *api)
{
    if (!api)
        return;
    curl_easy_cleanup(api->curl);
    /* Fails only for a mutex still held: no request is running now. */
    (void)pthread_mutex_destroy(&api->lock);
    free(api);
}

/* Reads the bearer token (trailing white space dropped) into a malloc'd
 * string: NULL with a message in error if it cannot be read or holds
 * characters a header cannot. */
static char *read_token(const char *file, char *error, size_t error_size)
{
    FILE *f = fopen(file, "re");
    if (!f) {
        snprintf(error, error_size, "token file %s: %s", file, strerror(errno));
        return NULL;
    }
    char *token = malloc(MAX_TOKEN_BYTES + 1);
    if (!token) {
        fclose(f);
        snprintf(error, error_size, "out of memory");
        return NULL;
    }
    size_t length = fread(token, 1, MAX_TOKEN_BYTES + 1, f);
    bool failed = ferror(f) != 0;
    (void)fclose(f); /* read only: nothing to lose on close */
    if (failed || length > MAX_TOKEN_BYTES) {
        snprintf(error, error_size, "token file %s: %s", file,
                 failed ? "cannot be read" : "larger than 64 KiB");
        free(token);
        return NULL;
    }
    while (length > 0 && (token[length - 1] == '\n' || token[length - 1] == '\r' || token[length - 1] == ' ' ||
                          token[length - 1] == '\t'))
        length--;
    token[length] = '\0';
    if (length == 0) {
        snprintf(error, error_size, "token file %s is empty", file);
        free(token);
        return NULL;
    }
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)token[i];
        if (c <= ' ' || c >= 0x7f) {
            snprintf(error, error_size, "token file %s holds a character a bearer token cannot (byte %zu)", file, i);
            free(token);
            return NULL;
        }
    }
    return token;
}

/* The answer's body, up to MAX_RESPONSE_BYTES. */
struct answer {
    char *data;
    size_t length, capacity;
    bool too_large;
};

static size_t collect(char *chunk, size_t size, size_t count, void *user)
{
    struct answer *answer = user;
    size_t n = size * count;
    if (n > MAX_RESPONSE_BYTES - answer->length) {
        answer->too_large = true;
        return 0; /* libcurl stops with CURLE_WRITE_ERROR */
    }
    if (answer->length + n + 1 > answer->capacity) {
        size_t capacity = answer->capacity ? answer->capacity : 16384;
        while (capacity < answer->length + n + 1)
            capacity *= 2;
        char *data = realloc(answer->data, capacity);
        if (!data)
            return 0;
        answer->data = data;
        answer->capacity = capacity;
    }
    memcpy(answer->data + answer->length, chunk, n);
    answer->length += n;
    answer->data[answer->length] = '\0';
    return n;
}

/* Sets one libcurl option, or leaves the request with a message. */
#define SET_OPTION(option, value)                                                                              \
    do {                                                                                                       \
        CURLcode set_rc = curl_easy_setopt(curl, option, value);                                              \
        if (set_rc != CURLE_OK) {                                                                              \
            snprintf(error, error_size, "%s %s: libcurl option %s: %s", method, url, #option,                \
                     curl_easy_strerror(set_rc));                                                              \
            goto done;                                                                                         \
        }                                                                                                      \
    } while (0)

int kube_api_request(struct kube_api *api, const char *method, const char *path, const char *content_type,
                     const char *body, char **response, char *error, size_t error_size)
{
    if (response)
        *response = NULL;
    if (!api || !method || !path || path[0] != '/') {
        snprintf(error, error_size, "kube_api_request: no client, method or absolute path");
        return -1;
    }
    char url[sizeof api->server + 1024];
    int written = snprintf(url, sizeof url, "%s%s", api->server, path);
    if (written < 0 || (size_t)written >= sizeof url) {
        snprintf(error, error_size, "%s %s: path too long", method, path);
        return -1;
    }
    char *token = read_token(api->token_file, error, error_size);
    if (!token)
        return -1;
    size_t authorization_size = strlen(token) + 32;
    char *authorization = malloc(authorization_size);
    if (!authorization) {
        free(token);
        snprintf(error, error_size, "out of memory");
        return -1;
    }
    snprintf(authorization, authorization_size, "Authorization: Bearer %s", token);
    free(token);

    int status = -1;
    struct answer answer = {0};
    struct curl_slist *headers = NULL;
    char content_type_header[128];
    int locked = pthread_mutex_lock(&api->lock);
    if (locked != 0) {
        snprintf(error, error_size, "%s %s: lock: %s", method, url, strerror(locked));
        free(authorization);
        return -1;
    }
    CURL *curl = api->curl;
    curl_easy_reset(curl);
    const char *header_lines[] = {authorization, "Accept: application/json", "Expect:", NULL};
    for (size_t i = 0; header_lines[i]; i++) {
        struct curl_slist *more = curl_slist_append(headers, header_lines[i]);
        if (!more) {
            snprintf(error, error_size, "out of memory");
            goto done;
        }
        headers = more;
    }
    if (body) {
        written = snprintf(content_type_header, sizeof content_type_header, "Content-Type: %s",
                           content_type ? content_type : "application/json");
        struct curl_slist *more = written > 0 && (size_t)written < sizeof content_type_header
                                      ? curl_slist_append(headers, content_type_header)
                                      : NULL;
        if (!more) {
            snprintf(error, error_size, "%s %s: bad content type", method, url);
            goto done;
        }
        headers = more;
    }
    char curl_error[CURL_ERROR_SIZE] = "";
    SET_OPTION(CURLOPT_URL, url);
#if LIBCURL_VERSION_NUM >= 0x075500
    SET_OPTION(CURLOPT_PROTOCOLS_STR, "https");
#else
    SET_OPTION(CURLOPT_PROTOCOLS, (long)CURLPROTO_HTTPS);
#endif
    SET_OPTION(CURLOPT_SSL_VERIFYPEER, 1L);
    SET_OPTION(CURLOPT_SSL_VERIFYHOST, 2L);
    SET_OPTION(CURLOPT_CAINFO, api->ca_file);
    /* Only the cluster's CA: libcurl also trusts the directory it was built
     * with (Debian's: /etc/ssl/certs, every public CA) unless told not to. */
    SET_OPTION(CURLOPT_CAPATH, (char *)NULL);
    SET_OPTION(CURLOPT_TIMEOUT_MS, api->timeout_ms);
    SET_OPTION(CURLOPT_CONNECTTIMEOUT_MS, api->timeout_ms);
    SET_OPTION(CURLOPT_NOSIGNAL, 1L);
    SET_OPTION(CURLOPT_FOLLOWLOCATION, 0L);
    SET_OPTION(CURLOPT_USERAGENT, "gpuslice-dra");
    SET_OPTION(CURLOPT_HTTPHEADER, headers);
    SET_OPTION(CURLOPT_ERRORBUFFER, curl_error);
    SET_OPTION(CURLOPT_WRITEFUNCTION, collect);
    SET_OPTION(CURLOPT_WRITEDATA, &answer);
    if (strcmp(method, "GET") == 0 && !body) {
        SET_OPTION(CURLOPT_HTTPGET, 1L);
    } else {
        SET_OPTION(CURLOPT_CUSTOMREQUEST, method);
        if (body) {
            SET_OPTION(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
            SET_OPTION(CURLOPT_POSTFIELDS, body);
        }
    }
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK) {
        if (answer.too_large)
            snprintf(error, error_size, "%s %s: the answer is larger than %u MiB", method, url,
                     MAX_RESPONSE_BYTES >> 20);
        else
            snprintf(error, error_size, "%s %s: %s%s%s%s", method, url, curl_easy_strerror(rc),
                     curl_error[0] ? " (" : "", curl_error, curl_error[0] ? ")" : "");
        goto done;
    }
    long code = 0;
    rc = curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK || code < 100 || code > 999) {
        snprintf(error, error_size, "%s %s: no HTTP status (%s)", method, url, curl_easy_strerror(rc));
        goto done;
    }
    if (!answer.data) {
        answer.data = calloc(1, 1);
        if (!answer.data) {
            snprintf(error, error_size, "out of memory");
            goto done;
        }
    }
    status = (int)code;
    if (response) {
        *response = answer.data;
        answer.data = NULL;
    }
done:
    /* Nothing of this request stays on the handle. */
    curl_easy_reset(curl);
    int unlocked = pthread_mutex_unlock(&api->lock);
    if (unlocked != 0 && status >= 0) {
        snprintf(error, error_size, "%s %s: unlock: %s", method, url, strerror(unlocked));
        if (response) {
            free(*response);
            *response = NULL;
        }
        status = -1;
    }
    curl_slist_free_all(headers);
    free(answer.data);
    free(authorization);
    return status;
}

static void sleep_ms(long ms)
{
    struct timespec wait = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&wait, &wait) != 0 && errno == EINTR)
        ;
}

int kube_api_request_retrying(struct kube_api *api, const char *method, const char *path,
                              const char *content_type, const char *body, char **response, char *error,
                              size_t error_size)
{
    long wait_ms = KUBE_API_FIRST_WAIT_MS;
    int status = -1;
    for (int attempt = 1; attempt <= KUBE_API_TRIES; attempt++) {
        status = kube_api_request(api, method, path, content_type, body, response, error, error_size);
        bool again = status < 0 || status == 429 || status >= 500;
        if (!again || attempt == KUBE_API_TRIES)
            break;
        if (response) {
            free(*response);
            *response = NULL;
        }
        sleep_ms(wait_ms);
        wait_ms = wait_ms * 2 > KUBE_API_LONGEST_WAIT_MS ? KUBE_API_LONGEST_WAIT_MS : wait_ms * 2;
    }
    return status;
}

void kube_api_answer_message(const char *body, char *out, size_t out_size)
{
    if (out_size == 0)
        return;
    out[0] = '\0';
    if (!body)
        return;
    const char *text = body;
    json_object *status = json_tokener_parse(body);
    json_object *message = NULL;
    if (status && json_object_is_type(status, json_type_object) &&
        json_object_object_get_ex(status, "message", &message) && json_object_is_type(message, json_type_string))
        text = json_object_get_string(message);
    size_t n = 0;
    for (; text[n] && n + 1 < out_size && n < 300; n++)
        out[n] = (unsigned char)text[n] < ' ' ? ' ' : text[n];
    out[n] = '\0';
    json_object_put(status);
}
