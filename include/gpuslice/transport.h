/*
 * How a protocol message travels: one message per recvmsg on a
 * SOCK_SEQPACKET Unix socket, with the time its sender queued it.
 *
 * The time matters to accounting, not to the protocol: the server ends a
 * slice's charge when the holder sent RELEASE, not when the server woke to
 * read it, and the shim counts a new slice idle from when GRANT was sent,
 * not from when its thread woke. On a small or busy machine each wake-up
 * costs tens of microseconds, which would otherwise be charged to the
 * tenant as device time. Both sides share CLOCK_MONOTONIC (one kernel).
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

#endif
