/*
 * The API client's parts that need no server (dra/kube/kube_api.c): the
 * server's address from KUBERNETES_SERVICE_HOST and _PORT (an IPv6 host in
 * brackets), the options kube_api_open refuses, and the one-line message
 * taken from an error answer.
 */
#include "check.h"
#include "kube_internal.h"

#include <stdlib.h>
#include <string.h>

static bool server_is(const char *host, const char *port, const char *want)
{
    char out[128] = "", error[256] = "";
    if (host)
        setenv("KUBERNETES_SERVICE_HOST", host, 1);
    else
        unsetenv("KUBERNETES_SERVICE_HOST");
    if (port)
        setenv("KUBERNETES_SERVICE_PORT", port, 1);
    else
        unsetenv("KUBERNETES_SERVICE_PORT");
    int rc = kube_api_server_from_environment(out, sizeof out, error, sizeof error);
    bool ok = want ? rc == 0 && strcmp(out, want) == 0 : rc == -1 && error[0] != '\0';
    printf("%s: host %s port %s: %s\n", ok ? "ok" : "FAILED", host ? host : "(unset)", port ? port : "(unset)",
           rc == 0 ? out : error);
    return ok;
}

int main(void)
{
    EXPECT(server_is("10.96.0.1", "443", "https://10.96.0.1:443"));
    EXPECT(server_is("fd00:10:96::1", "6443", "https://[fd00:10:96::1]:6443"));
    EXPECT(server_is("[::1]", "443", "https://[::1]:443"));
    EXPECT(server_is("kubernetes.default.svc", "443", "https://kubernetes.default.svc:443"));
    EXPECT(server_is(NULL, "443", NULL));
    EXPECT(server_is("10.96.0.1", NULL, NULL));
    EXPECT(server_is("10.96.0.1", "", NULL));
    EXPECT(server_is("10.96.0.1", "https", NULL));
    EXPECT(server_is("10.96.0.1", "70000", NULL));
    EXPECT(server_is("evil.example/x?", "443", NULL));
    EXPECT(server_is("user@host", "443", NULL));

    char error[256];
    struct kube_api_options options = {.server = "http://10.96.0.1:443"};
    EXPECT(kube_api_open(&options, error, sizeof error) == NULL && strstr(error, "not an https:// address"));
    options.server = "https://";
    EXPECT(kube_api_open(&options, error, sizeof error) == NULL);
    options.server = "https://10.96.0.1:443/";
    options.timeout_ms = -1;
    EXPECT(kube_api_open(&options, error, sizeof error) == NULL && strstr(error, "negative"));
    options.timeout_ms = 0;
    options.token_file = "/nonexistent/token";
    struct kube_api *api = kube_api_open(&options, error, sizeof error);
    EXPECT(api != NULL);
    char *answer = (char *)"untouched";
    /* The token is read at each request: a missing one fails the request. */
    EXPECT(kube_api_request(api, "GET", "/api", NULL, NULL, &answer, error, sizeof error) == -1 && answer == NULL &&
           strstr(error, "token file /nonexistent/token"));
    EXPECT(kube_api_request(api, "GET", "api", NULL, NULL, &answer, error, sizeof error) == -1);
    kube_api_close(api);
    kube_api_close(NULL);

    char message[64];
    kube_api_answer_message("{\"kind\":\"Status\",\"message\":\"resourceclaims \\\"x\\\" is forbidden:\\nno\","
                            "\"code\":403}",
                            message, sizeof message);
    EXPECT(strcmp(message, "resourceclaims \"x\" is forbidden: no") == 0);
    kube_api_answer_message("<html>\n<body>bad gateway</body>", message, sizeof message);
    EXPECT(strcmp(message, "<html> <body>bad gateway</body>") == 0);
    kube_api_answer_message(NULL, message, sizeof message);
    EXPECT(message[0] == '\0');
    kube_api_answer_message("0123456789012345678901234567890123456789012345678901234567890123456789", message,
                            sizeof message);
    EXPECT(strlen(message) == sizeof message - 1);
    return check_finish();
}
