/*
 * The files of the plugin's listening sockets: made ready before gRPC
 * listens (parent directories made, a stale socket removed, a live one
 * left to its server), and removed at exit only while they are still the
 * ones this process made.
 */
#ifndef GPUSLICE_DRA_SOCKET_FILE_H
#define GPUSLICE_DRA_SOCKET_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Makes path ready for a listening unix socket: its parent directories
 * made (mode 0750) when make_parents, and a socket found there removed if
 * nobody listens on it. Refuses (-1, message in error) a path too long
 * for a unix socket, a file there that is not a socket, and a socket
 * another process serves. */
int socket_file_prepare(const char *path, bool make_parents, char *error, size_t error_size);

/* Which file a socket is, to remove only that one. */
struct socket_file_identity {
    bool known;
    dev_t device;
    ino_t inode;
};

/* Records which file the socket at path is: 0, or -1 with a message in
 * error. */
int socket_file_identify(const char *path, struct socket_file_identity *identity, char *error, size_t error_size);

/* Removes the socket at path if it is still the file identified (another
 * process may have replaced it since); says on stderr why not, if it
 * cannot. */
void socket_file_remove(const char *path, const struct socket_file_identity *identity);

#endif
