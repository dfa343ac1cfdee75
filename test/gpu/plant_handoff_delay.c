/*
 * A planted fault, for the test that the check's handoff row can fail
 * (test/gpu/plant_test.py): preloaded ahead of libgpuslice.so, it holds
 * each GRANT of a new slice that the process receives from gpuslice-server
 * for 50 ms before recvmsg returns it, as a slow handoff would. A GRANT
 * that extends the slice held (the same grant id) passes at once. Test
 * code only: nothing ships it, and gpu_check.py uses it only with
 * --simulate.
 */
#include "gpuslice/protocol.h"
#include "plant_recvmsg.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define DELAY_NS 50000000L

/* The grant id of the last GRANT seen, by whichever thread read it. */
static _Atomic uint64_t last_grant;

__attribute__((visibility("default"))) ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    plant_recvmsg_fn real = plant_next_recvmsg();
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    ssize_t n = real(fd, msg, flags);
    struct gs_msg m;
    if (n > 0 && msg->msg_iovlen >= 1 && msg->msg_iov[0].iov_len >= (size_t)n &&
        gs_msg_decode(msg->msg_iov[0].iov_base, (size_t)n, &m) == GS_DECODE_OK && m.type == GS_MSG_GRANT &&
        atomic_exchange(&last_grant, m.u.grant.grant) != m.u.grant.grant) {
        struct timespec ts = {0, DELAY_NS};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    return n;
}
