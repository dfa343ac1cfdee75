/*
 * Asking gpuslice-server for its status over the admin socket
 * (RUN_DIR/admin.sock): one STATUS_REQUEST, then STATUS_REPLY pieces until
 * an empty one (protocol.h). Used by `gpuslicectl status` and by top.
 */
#include "ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Puts the message (fmt has two %s) in err, closes fd if open; 2. */
static int fail(int fd, char *err, size_t errlen, const char *fmt, const char *what, const char *detail)
{
    snprintf(err, errlen, fmt, what, detail);
    if (fd >= 0 && close(fd) != 0)
        return 2; /* already failing: the first error is the one reported */
    return 2;
}

int ctl_fetch_status(const char *run_dir, enum gs_status_format format, char **out, size_t *len, char *err,
                     size_t errlen)
{
    *out = NULL;
    *len = 0;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int n = snprintf(addr.sun_path, sizeof addr.sun_path, "%s/admin.sock", run_dir);
    if (n < 0 || (size_t)n >= sizeof addr.sun_path)
        return fail(-1, err, errlen, "%s/admin.sock: %s", run_dir, "path too long");
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        return fail(fd, err, errlen, "cannot reach gpuslice-server at %s: %s", addr.sun_path, strerror(errno));
    struct timeval tv = {5, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
        return fail(fd, err, errlen, "%s: %s", "setsockopt", strerror(errno));
    struct gs_msg request = {.type = GS_MSG_STATUS_REQUEST};
    request.u.status.format = format;
    static uint8_t buf[GS_MSG_MAX];
    size_t msg_len = gs_msg_encode(&request, buf, sizeof buf);
    if (send(fd, buf, msg_len, MSG_NOSIGNAL) != (ssize_t)msg_len)
        return fail(fd, err, errlen, "%s: %s", "send", strerror(errno));
    size_t cap = 0;
    for (;;) {
        ssize_t got = recv(fd, buf, sizeof buf, MSG_TRUNC);
        if (got <= 0)
            return fail(fd, err, errlen, "%s%s",
                        *len ? "the status ended early: the server closed the connection"
                             : "no answer from the server",
                        got < 0 ? (errno == EAGAIN ? ": timed out" : ": receive error") : "");
        struct gs_msg reply;
        enum gs_decode_result r =
            (size_t)got > sizeof buf ? GS_DECODE_BAD_LENGTH : gs_msg_decode(buf, (size_t)got, &reply);
        if (r != GS_DECODE_OK || reply.type != GS_MSG_STATUS_REPLY)
            return fail(fd, err, errlen, "bad answer from the server: %s%s",
                        r != GS_DECODE_OK ? gs_decode_result_str(r) : gs_msg_type_str(reply.type), "");
        if (reply.text_len == 0)
            break;
        if (*len + reply.text_len + 1 > cap) {
            size_t grown_cap = cap ? cap * 2 : 65536;
            while (grown_cap < *len + reply.text_len + 1)
                grown_cap *= 2;
            char *grown = realloc(*out, grown_cap);
            if (!grown)
                return fail(fd, err, errlen, "%s: %s", "status", "out of memory");
            *out = grown;
            cap = grown_cap;
        }
        memcpy(*out + *len, reply.text, reply.text_len);
        *len += reply.text_len;
        (*out)[*len] = '\0';
    }
    if (close(fd) != 0)
        return fail(-1, err, errlen, "%s: %s", "close", strerror(errno));
    if (*len == 0)
        return fail(-1, err, errlen, "%s%s", "the server sent an empty status", "");
    return 0;
}
