/*
 * Writes one valid encoding of every message type into the directory given,
 * as the seed corpus of the protocol fuzz target.
 */
#include <stdio.h>
#include <string.h>

#include "gpuslice/protocol.h"

int main(int argc, char **argv)
{
    if (argc != 2)
        return 1;
    struct gs_msg msgs[19];
    memset(msgs, 0, sizeof msgs);
    msgs[0].type = GS_MSG_HELLO;
    msgs[0].u.hello.pid = 1234;
    msgs[1].type = GS_MSG_WELCOME;
    strcpy(msgs[1].u.welcome.tenant, "tenant-a");
    msgs[2].type = GS_MSG_ERROR;
    strcpy(msgs[2].u.error.reason, "tenant a was removed");
    msgs[3].type = GS_MSG_DEVICE;
    memset(msgs[3].u.device.uuid, 0xab, 16);
    msgs[4].type = GS_MSG_ACQUIRE;
    msgs[5].type = GS_MSG_GRANT;
    msgs[5].u.grant.grant = 7;
    msgs[5].u.grant.deadline_ns = 123456789;
    msgs[6].type = GS_MSG_REVOKE;
    msgs[6].u.grant.grant = 7;
    msgs[7].type = GS_MSG_RELEASE;
    msgs[7].u.release.grant = 7;
    msgs[7].u.release.idle_ns = 1000000;
    msgs[7].u.release.flags = GS_RELEASE_MORE;
    msgs[8].type = GS_MSG_STATUS_REQUEST;
    msgs[9].type = GS_MSG_STATUS_REPLY;
    msgs[9].text = "{\"version\":1}";
    msgs[9].text_len = strlen(msgs[9].text);
    msgs[10].type = GS_MSG_MEM_FREE;
    msgs[10].u.mem.bytes = 64 << 20;
    msgs[11].type = GS_MSG_MEM_QUERY;
    msgs[11].u.mem_query.id = 4;
    msgs[12].type = GS_MSG_MEM_DECLARE;
    msgs[12].u.mem.bytes = 1 << 30;
    msgs[13].type = GS_MSG_MEM_RESULT;
    msgs[13].u.mem_result.id = 4;
    msgs[13].u.mem_result.cap = 1ull << 30;
    msgs[13].u.mem_result.used = 64 << 20;
    msgs[14].type = GS_MSG_MEM_LEASE;
    msgs[14].u.lease.id = 5;
    msgs[14].u.lease.need = 1 << 20;
    msgs[14].u.lease.want = 64 << 20;
    msgs[15].type = GS_MSG_MEM_LEASED;
    msgs[15].u.leased.id = 5;
    msgs[15].u.leased.status = GS_LEASE_GRANTED;
    msgs[15].u.leased.granted = 32 << 20;
    msgs[15].u.leased.cap = 1ull << 30;
    msgs[15].u.leased.used = 96 << 20;
    msgs[16].type = GS_MSG_MEM_RECALL;
    msgs[17].type = GS_MSG_USAGE_QUERY;
    msgs[17].u.usage_query.id = 6;
    memset(msgs[17].u.usage_query.uuid, 0xcd, 16);
    msgs[18].type = GS_MSG_USAGE;
    msgs[18].u.usage.id = 6;
    msgs[18].u.usage.cap = 2ull << 30;
    msgs[18].u.usage.used = 96 << 20;
    msgs[18].u.usage.window_ns = 1000000000;
    msgs[18].u.usage.busy_ns = 250000000;
    msgs[18].u.usage.procs_total = 3;
    msgs[18].u.usage.nprocs = 2;
    msgs[18].u.usage.procs[0].pid = 4242;
    msgs[18].u.usage.procs[0].bytes = 64 << 20;
    msgs[18].u.usage.procs[1].pid = 4243;
    msgs[18].u.usage.procs[1].bytes = 32 << 20;
    static uint8_t buf[GS_MSG_MAX];
    for (int i = 0; i < 19; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], gs_msg_type_str(msgs[i].type));
        size_t len = gs_msg_encode(&msgs[i], buf, sizeof buf);
        FILE *f = fopen(path, "wb");
        if (!f || len == 0 || fwrite(buf, 1, len, f) != len)
            return 1;
        fclose(f);
    }
    return 0;
}
