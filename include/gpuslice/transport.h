/*
 * How a protocol message travels: one message per recvmsg on a
 * SOCK_SEQPACKET Unix socket, with the time its sender queued it, and a
 * DEVICE with the descriptor of the GPU's device node that proves the
 * sender may open it (SCM_RIGHTS).
 *
 * The time matters to accounting, not to the protocol: the server ends a
 * slice's charge when the holder sent RELEASE, not when the server woke to
 * read it, and the shim counts a new slice idle from when GRANT was sent,
 * not from when its thread woke. On a small or busy machine each wake-up
 * costs tens of microseconds, which would otherwise be charged to the
 * tenant as device time.
 *
 * Times on the wire (GRANT's deadline) are CLOCK_MONOTONIC as the initial
 * time namespace reads it. A process in another time namespace
 * (time_namespaces(7): `unshare --time`, a container restored by CRIU)
 * reads the same clock shifted by its namespace's offset, so each side
 * converts with gs_transport_clock_offset_ns() as it encodes or decodes
 * such a time. Message stamps need no conversion: the kernel takes them
 * on CLOCK_REALTIME, which no namespace shifts.
 */
#ifndef GPUSLICE_TRANSPORT_H
#define GPUSLICE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Asks the kernel to stamp each message received on fd with the time it
 * was queued (SO_TIMESTAMPNS). 0, or -1 with errno. */
int gs_transport_stamp_messages(int fd);

/* recv(fd, buf, cap, flags), returning what recv would (with MSG_TRUNC,
 * the message's whole length). On success *sent_ns is when the sender
 * queued the message, on CLOCK_MONOTONIC, never later than now; 0 when
 * that is not known (the socket does not stamp messages, or the stamp is
 * not plausible: the real-time clock was set meanwhile). */
ssize_t gs_transport_recv(int fd, void *buf, size_t cap, int flags, uint64_t *sent_ns);

/* gs_transport_recv, and the descriptor the sender passed with the message
 * (SCM_RIGHTS), close-on-exec, in *passed: -1 if none. More than one is
 * closed but for the first. The caller owns *passed. */
ssize_t gs_transport_recv_passed(int fd, void *buf, size_t cap, int flags, uint64_t *sent_ns, int *passed);

/* send(fd, buf, len, MSG_NOSIGNAL), passing the descriptor `passed` along
 * with the message when it is not -1 (SCM_RIGHTS: the receiver gets its
 * own descriptor of the same open file). */
ssize_t gs_transport_send_passing(int fd, const void *buf, size_t len, int passed);

/* This process's CLOCK_MONOTONIC minus the wire's: its time namespace's
 * monotonic offset, from /proc/self/timens_offsets. 0 in the initial
 * namespace, and where the file is missing (a kernel before 5.6 or without
 * time namespaces, no /proc) or unreadable, or describes another namespace
 * than the process's own (it called unshare(CLONE_NEWTIME) itself: the
 * file then shows its children's). A process's namespace is fixed
 * for its life; a child forked after unshare(CLONE_NEWTIME) is in another,
 * so a forked child asks again. */
int64_t gs_transport_clock_offset_ns(void);

/* A time on this process's CLOCK_MONOTONIC as the wire carries it, and
 * back, given gs_transport_clock_offset_ns() (modular: both are defined
 * for every value). */
static inline uint64_t gs_transport_clock_to_wire(uint64_t local_ns, int64_t offset_ns)
{
    return local_ns - (uint64_t)offset_ns;
}

static inline uint64_t gs_transport_clock_from_wire(uint64_t wire_ns, int64_t offset_ns)
{
    return wire_ns + (uint64_t)offset_ns;
}

#endif
