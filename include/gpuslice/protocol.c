/*
 * The gpuslice wire protocol's encoder and decoder (see protocol.h): the
 * only code that turns messages into bytes and back. Compiled into the
 * shim, the server and gpuslicectl alike; fuzzed by test/unit/protocol_fuzz.c.
 */
#include "protocol.h"

#include <stdbool.h>
#include <string.h>

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#define USAGE_FIXED 52u
#define USAGE_PROC 12u

/* The body length each fixed-size type has; 0 for none, -1 for variable. */
static long body_size(int type)
{
    switch (type) {
    case GS_MSG_HELLO: return 4;
    case GS_MSG_WELCOME: return GS_NAME_MAX;
    case GS_MSG_ERROR: return GS_REASON_MAX;
    case GS_MSG_DEVICE: return 4 + 16 + 8;
    case GS_MSG_ACQUIRE: return 4;
    case GS_MSG_GRANT:
    case GS_MSG_REVOKE: return 4 + 8 + 8 + 4 + 8;
    case GS_MSG_RELEASE: return 4 + 8 + 8 + 4;
    case GS_MSG_STATUS_REQUEST: return 4;
    case GS_MSG_STATUS_REPLY: return -1;
    case GS_MSG_MEM_FREE:
    case GS_MSG_MEM_DECLARE: return 4 + 8;
    case GS_MSG_MEM_QUERY: return 4 + 8;
    case GS_MSG_MEM_RESULT: return 8 + 8 + 8;
    case GS_MSG_MEM_LEASE: return 4 + 8 + 8 + 8;
    case GS_MSG_MEM_LEASED: return 8 + 4 + 8 + 8 + 8;
    case GS_MSG_MEM_RECALL: return 4;
    case GS_MSG_USAGE_QUERY: return 8 + 16;
    case GS_MSG_USAGE: return -1;
    default: return -2;
    }
}

static void put_string(uint8_t *p, const char *s, size_t field)
{
    const char *end = memchr(s, '\0', field - 1);
    size_t n = end ? (size_t)(end - s) : field - 1;
    memcpy(p, s, n);
    memset(p + n, 0, field - n);
}

/* Copies a NUL-padded field up to its NUL; bytes after it are ignored, so
 * that decoding is canonical. */
static int get_string(char *dst, const uint8_t *p, size_t field)
{
    const uint8_t *end = memchr(p, '\0', field);
    if (!end)
        return -1;
    memset(dst, 0, field);
    memcpy(dst, p, (size_t)(end - p));
    return 0;
}

size_t gs_msg_encode(const struct gs_msg *msg, uint8_t *buf, size_t cap)
{
    long size = body_size(msg->type);
    if (size == -2)
        return 0;
    size_t body = size >= 0 ? (size_t)size : msg->text_len;
    if (msg->type == GS_MSG_USAGE) {
        if (msg->u.usage.nprocs > GS_USAGE_MAX_PROCS)
            return 0;
        body = USAGE_FIXED + USAGE_PROC * msg->u.usage.nprocs;
    } else if (size < 0 && (msg->text_len > GS_MSG_MAX - GS_HEADER_SIZE || (!msg->text && msg->text_len)))
        return 0;
    if (cap < GS_HEADER_SIZE + body)
        return 0;
    put_u32(buf, GS_PROTOCOL_MAGIC);
    put_u16(buf + 4, GS_PROTOCOL_VERSION);
    put_u16(buf + 6, (uint16_t)msg->type);
    put_u32(buf + 8, (uint32_t)body);
    put_u32(buf + 12, 0);
    uint8_t *b = buf + GS_HEADER_SIZE;
    switch (msg->type) {
    case GS_MSG_HELLO:
        put_u32(b, msg->u.hello.pid);
        break;
    case GS_MSG_WELCOME:
        put_string(b, msg->u.welcome.tenant, GS_NAME_MAX);
        break;
    case GS_MSG_ERROR:
        put_string(b, msg->u.error.reason, GS_REASON_MAX);
        break;
    case GS_MSG_DEVICE:
        put_u32(b, msg->u.device.slot);
        memcpy(b + 4, msg->u.device.uuid, 16);
        put_u64(b + 20, msg->u.device.total_bytes);
        break;
    case GS_MSG_ACQUIRE:
        put_u32(b, msg->u.acquire.slot);
        break;
    case GS_MSG_GRANT:
    case GS_MSG_REVOKE:
        put_u32(b, msg->u.grant.slot);
        put_u64(b + 4, msg->u.grant.grant);
        put_u64(b + 12, msg->u.grant.deadline_ns);
        put_u32(b + 20, msg->u.grant.flags);
        put_u64(b + 24, msg->u.grant.ahead_ns);
        break;
    case GS_MSG_RELEASE:
        put_u32(b, msg->u.release.slot);
        put_u64(b + 4, msg->u.release.grant);
        put_u64(b + 12, msg->u.release.idle_ns);
        put_u32(b + 20, msg->u.release.flags);
        break;
    case GS_MSG_STATUS_REQUEST:
        put_u32(b, msg->u.status.format);
        break;
    case GS_MSG_STATUS_REPLY:
        if (body)
            memcpy(b, msg->text, body);
        break;
    case GS_MSG_MEM_FREE:
    case GS_MSG_MEM_DECLARE:
        put_u32(b, msg->u.mem.slot);
        put_u64(b + 4, msg->u.mem.bytes);
        break;
    case GS_MSG_MEM_QUERY:
        put_u32(b, msg->u.mem_query.slot);
        put_u64(b + 4, msg->u.mem_query.id);
        break;
    case GS_MSG_MEM_RESULT:
        put_u64(b, msg->u.mem_result.id);
        put_u64(b + 8, msg->u.mem_result.cap);
        put_u64(b + 16, msg->u.mem_result.used);
        break;
    case GS_MSG_MEM_LEASE:
        put_u32(b, msg->u.lease.slot);
        put_u64(b + 4, msg->u.lease.id);
        put_u64(b + 12, msg->u.lease.need);
        put_u64(b + 20, msg->u.lease.want);
        break;
    case GS_MSG_MEM_LEASED:
        put_u64(b, msg->u.leased.id);
        put_u32(b + 8, msg->u.leased.status);
        put_u64(b + 12, msg->u.leased.granted);
        put_u64(b + 20, msg->u.leased.cap);
        put_u64(b + 28, msg->u.leased.used);
        break;
    case GS_MSG_MEM_RECALL:
        put_u32(b, msg->u.recall.slot);
        break;
    case GS_MSG_USAGE_QUERY:
        put_u64(b, msg->u.usage_query.id);
        memcpy(b + 8, msg->u.usage_query.uuid, 16);
        break;
    case GS_MSG_USAGE: {
        const struct gs_msg_usage *u = &msg->u.usage;
        put_u64(b, u->id);
        put_u32(b + 8, u->status);
        put_u64(b + 12, u->cap);
        put_u64(b + 20, u->used);
        put_u64(b + 28, u->window_ns);
        put_u64(b + 36, u->busy_ns);
        put_u32(b + 44, u->procs_total);
        put_u32(b + 48, u->nprocs);
        for (uint32_t i = 0; i < u->nprocs; i++) {
            put_u32(b + USAGE_FIXED + USAGE_PROC * i, u->procs[i].pid);
            put_u64(b + USAGE_FIXED + USAGE_PROC * i + 4, u->procs[i].bytes);
        }
        break;
    }
    }
    return GS_HEADER_SIZE + body;
}

enum gs_decode_result gs_msg_decode(const uint8_t *buf, size_t len, struct gs_msg *msg)
{
    if (len < GS_HEADER_SIZE)
        return GS_DECODE_TRUNCATED;
    if (get_u32(buf) != GS_PROTOCOL_MAGIC)
        return GS_DECODE_BAD_MAGIC;
    if (get_u16(buf + 4) != GS_PROTOCOL_VERSION)
        return GS_DECODE_BAD_VERSION;
    int type = get_u16(buf + 6);
    uint32_t body = get_u32(buf + 8);
    long size = body_size(type);
    if (size == -2)
        return GS_DECODE_UNKNOWN_TYPE;
    if (body > GS_MSG_MAX - GS_HEADER_SIZE || get_u32(buf + 12) != 0)
        return GS_DECODE_BAD_LENGTH;
    if (len - GS_HEADER_SIZE < body)
        return GS_DECODE_TRUNCATED;
    /* DEVICE without total_bytes (20 bytes) is what shims before it send. */
    bool short_device = type == GS_MSG_DEVICE && body == GS_DEVICE_BODY_WITHOUT_TOTAL;
    if (len - GS_HEADER_SIZE != body || (size >= 0 && body != (uint32_t)size && !short_device))
        return GS_DECODE_BAD_LENGTH;
    /* USAGE: its fixed part, then as many processes as it says. */
    if (type == GS_MSG_USAGE &&
        (body < USAGE_FIXED || get_u32(buf + GS_HEADER_SIZE + 48) > GS_USAGE_MAX_PROCS ||
         body != USAGE_FIXED + USAGE_PROC * get_u32(buf + GS_HEADER_SIZE + 48)))
        return GS_DECODE_BAD_LENGTH;
    memset(msg, 0, sizeof *msg);
    msg->type = (enum gs_msg_type)type;
    const uint8_t *b = buf + GS_HEADER_SIZE;
    switch (msg->type) {
    case GS_MSG_HELLO:
        msg->u.hello.pid = get_u32(b);
        break;
    case GS_MSG_WELCOME:
        if (get_string(msg->u.welcome.tenant, b, GS_NAME_MAX))
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_ERROR:
        if (get_string(msg->u.error.reason, b, GS_REASON_MAX))
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_DEVICE:
        msg->u.device.slot = get_u32(b);
        memcpy(msg->u.device.uuid, b + 4, 16);
        msg->u.device.total_bytes = short_device ? 0 : get_u64(b + 20);
        if (msg->u.device.slot >= GS_MAX_DEVICES)
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_ACQUIRE:
        msg->u.acquire.slot = get_u32(b);
        if (msg->u.acquire.slot >= GS_MAX_DEVICES)
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_GRANT:
    case GS_MSG_REVOKE:
        msg->u.grant.slot = get_u32(b);
        msg->u.grant.grant = get_u64(b + 4);
        msg->u.grant.deadline_ns = get_u64(b + 12);
        msg->u.grant.flags = get_u32(b + 20);
        msg->u.grant.ahead_ns = get_u64(b + 24);
        if (msg->u.grant.slot >= GS_MAX_DEVICES ||
            (msg->u.grant.flags & ~(msg->type == GS_MSG_GRANT ? GS_GRANT_JOIN | GS_GRANT_CATCHUP | GS_GRANT_YIELD : 0u)))
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_RELEASE:
        msg->u.release.slot = get_u32(b);
        msg->u.release.grant = get_u64(b + 4);
        msg->u.release.idle_ns = get_u64(b + 12);
        msg->u.release.flags = get_u32(b + 20);
        if (msg->u.release.slot >= GS_MAX_DEVICES || (msg->u.release.flags & ~GS_RELEASE_MORE))
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_STATUS_REQUEST:
        msg->u.status.format = get_u32(b);
        if (msg->u.status.format > GS_STATUS_TABLE)
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_STATUS_REPLY:
        msg->text = (const char *)b;
        msg->text_len = body;
        break;
    case GS_MSG_MEM_FREE:
    case GS_MSG_MEM_DECLARE:
        msg->u.mem.slot = get_u32(b);
        msg->u.mem.bytes = get_u64(b + 4);
        if (msg->u.mem.slot >= GS_MAX_DEVICES)
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_MEM_QUERY:
        msg->u.mem_query.slot = get_u32(b);
        msg->u.mem_query.id = get_u64(b + 4);
        if (msg->u.mem_query.slot >= GS_MAX_DEVICES)
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_MEM_RESULT:
        msg->u.mem_result.id = get_u64(b);
        msg->u.mem_result.cap = get_u64(b + 8);
        msg->u.mem_result.used = get_u64(b + 16);
        break;
    case GS_MSG_MEM_LEASE:
        msg->u.lease.slot = get_u32(b);
        msg->u.lease.id = get_u64(b + 4);
        msg->u.lease.need = get_u64(b + 12);
        msg->u.lease.want = get_u64(b + 20);
        if (msg->u.lease.slot >= GS_MAX_DEVICES || msg->u.lease.want < msg->u.lease.need)
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_MEM_LEASED:
        msg->u.leased.id = get_u64(b);
        msg->u.leased.status = get_u32(b + 8);
        msg->u.leased.granted = get_u64(b + 12);
        msg->u.leased.cap = get_u64(b + 20);
        msg->u.leased.used = get_u64(b + 28);
        if (msg->u.leased.status > GS_LEASE_RETRY)
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_MEM_RECALL:
        msg->u.recall.slot = get_u32(b);
        if (msg->u.recall.slot >= GS_MAX_DEVICES)
            return GS_DECODE_BAD_FIELD;
        break;
    case GS_MSG_USAGE_QUERY:
        msg->u.usage_query.id = get_u64(b);
        memcpy(msg->u.usage_query.uuid, b + 8, 16);
        break;
    case GS_MSG_USAGE: {
        struct gs_msg_usage *u = &msg->u.usage;
        u->id = get_u64(b);
        u->status = get_u32(b + 8);
        u->cap = get_u64(b + 12);
        u->used = get_u64(b + 20);
        u->window_ns = get_u64(b + 28);
        u->busy_ns = get_u64(b + 36);
        u->procs_total = get_u32(b + 44);
        u->nprocs = get_u32(b + 48);
        for (uint32_t i = 0; i < u->nprocs; i++) {
            u->procs[i].pid = get_u32(b + USAGE_FIXED + USAGE_PROC * i);
            u->procs[i].bytes = get_u64(b + USAGE_FIXED + USAGE_PROC * i + 4);
        }
        if (u->status > GS_USAGE_LIMITED || u->nprocs > u->procs_total || u->busy_ns > u->window_ns)
            return GS_DECODE_BAD_FIELD;
        break;
    }
    }
    return GS_DECODE_OK;
}

const char *gs_decode_result_str(enum gs_decode_result result)
{
    switch (result) {
    case GS_DECODE_OK: return "ok";
    case GS_DECODE_TRUNCATED: return "truncated message";
    case GS_DECODE_BAD_MAGIC: return "not a gpuslice message (bad magic)";
    case GS_DECODE_BAD_VERSION: return "protocol version mismatch";
    case GS_DECODE_UNKNOWN_TYPE: return "unknown message type";
    case GS_DECODE_BAD_LENGTH: return "length does not match the message type";
    case GS_DECODE_BAD_FIELD: return "malformed field";
    }
    return "unknown decode result";
}

const char *gs_msg_type_str(int type)
{
    static const char *const names[] = {
        "?", "HELLO", "WELCOME", "ERROR", "DEVICE", "ACQUIRE", "GRANT",
        "REVOKE", "RELEASE", "STATUS_REQUEST", "STATUS_REPLY", NULL,
        "MEM_FREE", "MEM_QUERY", "MEM_DECLARE", "MEM_RESULT", "MEM_LEASE", "MEM_LEASED", "MEM_RECALL",
        "USAGE_QUERY", "USAGE",
    };
    return type > 0 && type <= GS_MSG_USAGE && names[type] ? names[type] : "unknown";
}
