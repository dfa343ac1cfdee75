/*
 * The gpuslice wire protocol: every message the shim, gpuslice-server and
 * gpuslicectl exchange, defined once here and encoded and decoded only by
 * protocol.c. Both sides use these functions; nothing is parsed by hand.
 *
 * Transport: SOCK_SEQPACKET Unix sockets, so one send is one message and
 * message boundaries are kept. Every message starts with a 16-byte header:
 *
 *   u32 magic   "GSLC" (0x434c5347 little-endian)
 *   u16 version GS_PROTOCOL_VERSION
 *   u16 type    enum gs_msg_type
 *   u32 length  bytes after the header
 *   u32 reserved, zero
 *
 * then a body whose layout is fixed per type (little-endian integers,
 * NUL-padded fixed-size strings), except GS_MSG_STATUS_REPLY, whose body
 * is text. The decoder rejects a wrong magic or version, an unknown
 * type, a length that does not match the type, and strings without a NUL.
 *
 * Conversation (client = one process of a tenant):
 *   client HELLO -> server WELCOME (or ERROR and close)
 *   client DEVICE(slot, uuid, total) declares a GPU it uses, by UUID, with
 *                                    its memory as the process's driver
 *                                    reports it (for a warning only; 0 if
 *                                    unknown, as in a 20-byte DEVICE of
 *                                    shims before the field, also accepted)
 *   client ACQUIRE(slot)             wants the time slice on that GPU
 *   server GRANT(slot, grant, deadline, flags, ahead)  holds it until
 *                                    deadline; a GRANT with the same grant
 *                                    id extends it. ahead: the most
 *                                    estimated device time to have admitted
 *                                    and not finished at once (a latency
 *                                    tenant shares the GPU, and a
 *                                    preemption waits for that much); 0: no
 *                                    bound
 *   server REVOKE(slot, grant)       stop now: drain and release
 *   client RELEASE(slot, grant, idle, flags) drained; the GPU is free.
 *                                    With GS_RELEASE_MORE it also asks for
 *                                    the next slice (one message, so that
 *                                    the tenant keeps its place in line).
 *                                    idle: ns of the slice in which the
 *                                    process had nothing on the GPU (it
 *                                    had synchronized and not launched);
 *                                    a claim the server refunds only in
 *                                    part (tokenserver/sched.c)
 *   server ERROR(reason) and close   e.g. the tenant was removed
 * Device memory (per GPU, summed over the tenant's processes), counted in
 * leases of headroom (what a process may allocate without asking again):
 *   client MEM_FREE(slot, bytes)     gives back part of its count; no answer
 *   client MEM_DECLARE(slot, bytes)  after (re)connecting: its count
 *   client MEM_QUERY(slot, id)       -> MEM_RESULT(id, cap, used): the
 *                                    tenant's cap and count on the GPU
 *   client MEM_LEASE(slot, id, need, want) -> server MEM_LEASED(id, status,
 *                                    granted, cap, used): granted is at
 *                                    least need and at most want when the
 *                                    status is GRANTED; RETRY: siblings
 *                                    were asked to give back idle headroom,
 *                                    ask again shortly; REFUSED: over the cap
 *   server MEM_RECALL(slot)          give back the headroom you do not use:
 *                                    answered with MEM_FREE (bytes may be 0)
 *   The count of a process is what it holds plus its unused headroom; the
 *   server grants headroom only within the cap, so the sum never passes it.
 * What the tenant uses on a GPU, for NVML inside the tenant (read-only; the
 * GPU named by UUID, so asking declares nothing):
 *   client USAGE_QUERY(id, uuid)     -> server USAGE(id, status, cap, used,
 *                                    window_ns, busy_ns, procs_total,
 *                                    procs[]): the asking tenant's cap,
 *                                    count, device time charged over the
 *                                    last window_ns, and its processes on
 *                                    that GPU (pid as the asker's PID
 *                                    namespace names it, bytes counted);
 *                                    never another tenant's. LIMITED: asked
 *                                    too often, no figures; ask again later
 * Admin socket: STATUS_REQUEST(format) -> STATUS_REPLY... (JSON or a table):
 *                                    the report in pieces of up to
 *                                    GS_MSG_MAX - GS_HEADER_SIZE bytes, to
 *                                    be joined, then an empty STATUS_REPLY
 *                                    that ends it (a report has no size
 *                                    limit; a connection closed before the
 *                                    empty one means it is incomplete).
 */
#ifndef GPUSLICE_PROTOCOL_H
#define GPUSLICE_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#define GS_PROTOCOL_MAGIC 0x434c5347u /* "GSLC" */
/* 2: RELEASE has its own idle field; MEM_RESERVE is gone (leases replace
 * it), MEM_FREE and MEM_DECLARE carry no id, MEM_RESULT no `ok`; and
 * USAGE_QUERY and USAGE, and GRANT's GS_GRANT_YIELD flag (all added
 * before any release spoke 2, so no peer of version 2 lacks them; a flag
 * added after a release needs a new version, since a GRANT with a flag
 * its reader does not know is refused as malformed). A peer of another
 * version gets an ERROR naming both. */
#define GS_PROTOCOL_VERSION 2
#define GS_HEADER_SIZE 16
#define GS_NAME_MAX 64       /* tenant names, including the NUL */
#define GS_REASON_MAX 192    /* error texts, including the NUL */
#define GS_MAX_DEVICES 16    /* device slots per client */
#define GS_MSG_MAX 65536     /* the largest message, header included */

enum gs_msg_type {
    GS_MSG_HELLO = 1,
    GS_MSG_WELCOME = 2,
    GS_MSG_ERROR = 3,
    GS_MSG_DEVICE = 4,
    GS_MSG_ACQUIRE = 5,
    GS_MSG_GRANT = 6,
    GS_MSG_REVOKE = 7,
    GS_MSG_RELEASE = 8,
    GS_MSG_STATUS_REQUEST = 9,
    GS_MSG_STATUS_REPLY = 10,
    /* 11 was protocol 1's MEM_RESERVE */
    GS_MSG_MEM_FREE = 12,
    GS_MSG_MEM_QUERY = 13,
    GS_MSG_MEM_DECLARE = 14,
    GS_MSG_MEM_RESULT = 15,
    GS_MSG_MEM_LEASE = 16,
    GS_MSG_MEM_LEASED = 17,
    GS_MSG_MEM_RECALL = 18,
    GS_MSG_USAGE_QUERY = 19,
    GS_MSG_USAGE = 20,
};

struct gs_msg_hello {
    uint32_t pid;
};

struct gs_msg_welcome {
    char tenant[GS_NAME_MAX];
};

struct gs_msg_error {
    char reason[GS_REASON_MAX];
};

struct gs_msg_device {
    uint32_t slot;           /* 0 .. GS_MAX_DEVICES-1, the client's name for it */
    uint8_t uuid[16];
    uint64_t total_bytes;    /* cuDeviceTotalMem; 0 = unknown (a claim) */
};
#define GS_DEVICE_BODY_WITHOUT_TOTAL 20

struct gs_msg_slot {         /* ACQUIRE */
    uint32_t slot;
};

struct gs_msg_mem {         /* MEM_FREE, MEM_DECLARE */
    uint32_t slot;
    uint64_t bytes;
};

struct gs_msg_mem_query {
    uint32_t slot;
    uint64_t id;             /* echoed in MEM_RESULT */
};

struct gs_msg_mem_result {
    uint64_t id;
    uint64_t cap;            /* the tenant's cap on this GPU, 0 = none */
    uint64_t used;           /* the tenant's count on this GPU */
};

struct gs_msg_mem_lease {
    uint32_t slot;
    uint64_t id;             /* echoed in MEM_LEASED */
    uint64_t need;           /* the least that lets the allocation go ahead */
    uint64_t want;           /* need plus the headroom wished for; >= need */
};

enum gs_lease_status { GS_LEASE_REFUSED = 0, GS_LEASE_GRANTED = 1, GS_LEASE_RETRY = 2 };

struct gs_msg_mem_leased {
    uint64_t id;
    uint32_t status;         /* enum gs_lease_status */
    uint64_t granted;        /* GRANTED: bytes added to the process's count */
    uint64_t cap;            /* the tenant's cap on this GPU, 0 = none */
    uint64_t used;           /* the tenant's count on this GPU, after this request */
};

struct gs_msg_usage_query {
    uint64_t id;             /* echoed in USAGE */
    uint8_t uuid[16];        /* the GPU */
};

#define GS_USAGE_MAX_PROCS 64 /* processes listed in one USAGE */

enum gs_usage_status { GS_USAGE_OK = 0, GS_USAGE_LIMITED = 1 };

struct gs_usage_proc {
    uint32_t pid;
    uint64_t bytes;          /* device memory counted for it */
};

struct gs_msg_usage {        /* body: 52 bytes, then 12 per process */
    uint64_t id;
    uint32_t status;         /* enum gs_usage_status; LIMITED: all else 0 */
    uint64_t cap;            /* the tenant's cap on this GPU, 0 = none */
    uint64_t used;           /* the tenant's count on this GPU */
    uint64_t window_ns;      /* the window busy_ns covers */
    uint64_t busy_ns;        /* device time charged to the tenant in it */
    uint32_t procs_total;    /* its processes there the asker can name */
    uint32_t nprocs;         /* listed: at most GS_USAGE_MAX_PROCS */
    struct gs_usage_proc procs[GS_USAGE_MAX_PROCS];
};

enum gs_status_format { GS_STATUS_JSON = 0, GS_STATUS_TABLE = 1 };

struct gs_msg_status_request {
    uint32_t format;         /* enum gs_status_format */
};

struct gs_msg_grant {        /* GRANT, REVOKE */
    uint32_t slot;
    uint64_t grant;          /* server-chosen, never 0 */
    uint64_t deadline_ns;    /* GRANT: CLOCK_MONOTONIC of the initial time
                                namespace (gpuslice/transport.h); REVOKE: 0 */
    uint32_t flags;          /* GRANT: GS_GRANT_JOIN, GS_GRANT_CATCHUP, GS_GRANT_YIELD */
    uint64_t ahead_ns;       /* GRANT: device time admitted ahead at most
                                (estimated); 0 = no bound; REVOKE: 0 */
};

struct gs_msg_release {
    uint32_t slot;
    uint64_t grant;          /* the grant given back; 0 or a stale one with
                                GS_RELEASE_MORE only asks again */
    uint64_t idle_ns;        /* time the process left the GPU idle in it */
    uint32_t flags;          /* GS_RELEASE_MORE */
};

#define GS_RELEASE_MORE 1u
/* GRANT flags. JOIN: a slice the process released before and asked for
 * again (a sibling still runs it), so a grant id it gave back is new to it.
 * CATCHUP: the slice is past its deadline and held for a gang whose ranks
 * are draining: admit one launch, then drain (a rank behind its peers
 * launches the collective they wait for). */
#define GS_GRANT_JOIN 2u
#define GS_GRANT_CATCHUP 4u
/* YIELD: the holder is a latency tenant: give the slice back as soon as a
 * synchronization finds everything admitted finished (its next request
 * preempts a batch holder, so holding on while idle gains it nothing and
 * costs the others the GPU, and it would be charged for it). */
#define GS_GRANT_YIELD 8u

struct gs_msg {
    enum gs_msg_type type;
    union {
        struct gs_msg_hello hello;
        struct gs_msg_welcome welcome;
        struct gs_msg_error error;
        struct gs_msg_device device;
        struct gs_msg_slot acquire;
        struct gs_msg_grant grant;     /* GRANT and REVOKE */
        struct gs_msg_release release;
        struct gs_msg_status_request status;
        struct gs_msg_mem mem;         /* MEM_FREE and MEM_DECLARE */
        struct gs_msg_mem_query mem_query;
        struct gs_msg_mem_result mem_result;
        struct gs_msg_mem_lease lease;
        struct gs_msg_mem_leased leased;
        struct gs_msg_slot recall;     /* MEM_RECALL */
        struct gs_msg_usage_query usage_query;
        struct gs_msg_usage usage;
    } u;
    /* STATUS_REPLY: the JSON text, pointing into the decoded buffer. */
    const char *text;
    size_t text_len;
};

enum gs_decode_result {
    GS_DECODE_OK = 0,
    GS_DECODE_TRUNCATED,     /* shorter than its header or its length */
    GS_DECODE_BAD_MAGIC,
    GS_DECODE_BAD_VERSION,
    GS_DECODE_UNKNOWN_TYPE,
    GS_DECODE_BAD_LENGTH,    /* length does not fit the type */
    GS_DECODE_BAD_FIELD,     /* a string without NUL, a slot out of range */
};

/* Encodes msg into buf. Returns the number of bytes, or 0 if cap is too
 * small or the message is invalid (e.g. STATUS_REPLY text too long). */
size_t gs_msg_encode(const struct gs_msg *msg, uint8_t *buf, size_t cap);

/* Decodes one whole message of len bytes. On GS_DECODE_OK, msg is filled;
 * msg->text points into buf. Never reads outside [buf, buf+len). */
enum gs_decode_result gs_msg_decode(const uint8_t *buf, size_t len, struct gs_msg *msg);

/* A short description of a decode result, for logs. */
const char *gs_decode_result_str(enum gs_decode_result result);
/* The name of a message type, or "unknown". */
const char *gs_msg_type_str(int type);

#endif
