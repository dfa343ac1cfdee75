/*
 * A planted fault, for the test that the check's latency row can fail
 * (test/gpu/plant_test.py): preloaded ahead of libgpuslice.so into a batch
 * tenant, it hides every REVOKE the process receives from gpuslice-server
 * and clears each GRANT's bound on work admitted ahead (ahead_ns), so that
 * the process keeps its slices to their deadlines with as much queued as
 * it likes, as a shim that ignored preemption would. Test code only:
 * nothing ships it, and gpu_check.py uses it only with --simulate.
 */
#include "gpuslice/protocol.h"
#include "plant_recvmsg.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

__attribute__((visibility("default"))) ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    plant_recvmsg_fn real = plant_next_recvmsg();
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    for (;;) {
        ssize_t n = real(fd, msg, flags);
        struct gs_msg m;
        if (n <= 0 || msg->msg_iovlen < 1 || msg->msg_iov[0].iov_len < (size_t)n ||
            gs_msg_decode(msg->msg_iov[0].iov_base, (size_t)n, &m) != GS_DECODE_OK)
            return n;
        if (m.type == GS_MSG_REVOKE)
            continue; /* the next message, or EAGAIN for a caller that does not wait */
        if (m.type == GS_MSG_GRANT && m.u.grant.ahead_ns) {
            m.u.grant.ahead_ns = 0;
            uint8_t again[256];
            size_t len = gs_msg_encode(&m, again, sizeof again);
            if (len == (size_t)n)
                memcpy(msg->msg_iov[0].iov_base, again, len);
        }
        return n;
    }
}
