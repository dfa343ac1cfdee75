/*
 * What the planted faults that sit on recvmsg share (test/gpu/plant_*.c):
 * the next recvmsg after the plant's own, looked up once. Test code only.
 */
#ifndef GPUSLICE_PLANT_RECVMSG_H
#define GPUSLICE_PLANT_RECVMSG_H

#include <dlfcn.h>
#include <string.h>
#include <sys/socket.h>

typedef ssize_t (*plant_recvmsg_fn)(int, struct msghdr *, int);

/* The next recvmsg (libc's), or NULL if there is none. */
static inline plant_recvmsg_fn plant_next_recvmsg(void)
{
    /* Set by the first caller; any thread that races it writes the same
     * value (the plants run only in the plain build, never under TSan). */
    static plant_recvmsg_fn next;
    if (!next) {
        void *symbol = dlsym(RTLD_NEXT, "recvmsg");
        if (symbol)
            memcpy(&next, &symbol, sizeof next); /* ISO C has no object-to-function cast */
    }
    return next;
}

#endif
