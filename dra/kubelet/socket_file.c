/*
 * The plugin's socket files (socket_file.h): the checks and the removals
 * around gRPC's own bind, which replaces whatever file it finds.
 */
#include "socket_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Makes every directory above path's last component that is missing. */
static int make_parent_directories(const char *path, char *error, size_t error_size)
{
    char directory[sizeof ((struct sockaddr_un *)0)->sun_path];
    size_t length = strlen(path);
    if (length >= sizeof directory) {
        snprintf(error, error_size, "%s: too long for a unix socket", path);
        return -1;
    }
    memcpy(directory, path, length + 1);
    for (char *slash = strchr(directory + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (mkdir(directory, 0750) != 0 && errno != EEXIST) {
            snprintf(error, error_size, "%s: cannot make directory %s: %s", path, directory, strerror(errno));
            return -1;
        }
        *slash = '/';
    }
    return 0;
}

/* Whether a process listens on the unix socket at path: 1 yes, 0 no (the
 * socket is stale), -1 unknown (message in error). */
static int socket_is_served(const char *path, char *error, size_t error_size)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    memcpy(address.sun_path, path, strlen(path) + 1); /* checked to fit by the caller */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(error, error_size, "%s: socket: %s", path, strerror(errno));
        return -1;
    }
    int served = 1;
    if (connect(fd, (const struct sockaddr *)&address, sizeof address) != 0) {
        if (errno == ECONNREFUSED) {
            served = 0;
        } else if (errno != EAGAIN) { /* EAGAIN: a listener with a full backlog */
            snprintf(error, error_size, "%s: cannot tell whether it is served: connect: %s", path, strerror(errno));
            served = -1;
        }
    }
    if (close(fd) != 0 && served >= 0) {
        snprintf(error, error_size, "%s: close: %s", path, strerror(errno));
        served = -1;
    }
    return served;
}

int socket_file_prepare(const char *path, bool make_parents, char *error, size_t error_size)
{
    if (path == NULL || path[0] == '\0') {
        snprintf(error, error_size, "no socket path");
        return -1;
    }
    if (strlen(path) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
        snprintf(error, error_size, "%s: too long for a unix socket (%zu bytes at most)", path,
                 sizeof ((struct sockaddr_un *)0)->sun_path - 1);
        return -1;
    }
    if (make_parents && make_parent_directories(path, error, error_size) != 0)
        return -1;
    struct stat found;
    if (lstat(path, &found) != 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(error, error_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(found.st_mode)) {
        snprintf(error, error_size, "%s: there is a file there that is not a socket; not replacing it", path);
        return -1;
    }
    int served = socket_is_served(path, error, error_size);
    if (served < 0)
        return -1;
    if (served) {
        snprintf(error, error_size, "%s: another process serves this socket (another instance of the plugin?)", path);
        return -1;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(error, error_size, "%s: cannot remove the stale socket: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int socket_file_identify(const char *path, struct socket_file_identity *identity, char *error, size_t error_size)
{
    struct stat found;
    *identity = (struct socket_file_identity){.known = false};
    if (lstat(path, &found) != 0) {
        snprintf(error, error_size, "%s: the socket is not there after listening: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(found.st_mode)) {
        snprintf(error, error_size, "%s: not a socket after listening", path);
        return -1;
    }
    *identity = (struct socket_file_identity){.known = true, .device = found.st_dev, .inode = found.st_ino};
    return 0;
}

void socket_file_remove(const char *path, const struct socket_file_identity *identity)
{
    struct stat found;
    if (!identity->known)
        return;
    if (lstat(path, &found) != 0) {
        if (errno != ENOENT)
            fprintf(stderr, "gpuslice-dra: %s: %s\n", path, strerror(errno));
        return;
    }
    if (found.st_dev != identity->device || found.st_ino != identity->inode)
        return; /* another process's socket now */
    if (unlink(path) != 0 && errno != ENOENT)
        fprintf(stderr, "gpuslice-dra: %s: cannot remove the socket: %s\n", path, strerror(errno));
}
