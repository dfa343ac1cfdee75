/*
 * USAGE_QUERY: what a tenant uses on one GPU, for NVML inside the tenant
 * (shim/gs_nvml_usage.c): its memory cap and count there, the device time
 * charged to it over the last USAGE_WINDOW_NS, and its processes there
 * with the memory counted for each. Read from the scheduler's state
 * between steps, without a step: nothing changes, nothing is sent but the
 * answer.
 *
 * A tenant learns about itself only. The answer is built from the asking
 * connection's tenant, whatever GPU it names: its own entry on that GPU
 * and its own connections (tenant.members), never another tenant's. A GPU
 * the tenant does not use, or that the server does not know, is answered
 * with the tenant's cap and zeros, so an answer tells nothing about who
 * else uses a GPU. The window is always USAGE_WINDOW_NS: one that ended
 * at the GPU's first use told whether another tenant had used it in the
 * last second (test/hardening/usage_window_test.py).
 *
 * Pids: a process is listed with the pid it gave in its HELLO (its own,
 * in its PID namespace) when it is in the asker's PID namespace (the
 * inodes of /proc/PID/ns/pid, read at HELLO); where the server could not
 * read a namespace, only when both the asker and the process have the
 * same pid in the server's namespace as in their HELLO (neither is in
 * another namespace, as far as the server can see). A process of the
 * tenant in another PID namespace (another container) is counted in
 * `used` but not listed: its pid would name nothing, or something else,
 * to the asker.
 *
 * Cost: one pass over the tenant's own connections, at most
 * USAGE_RATE_CLIENT answers a second per connection and USAGE_RATE_TENANT
 * per tenant (token buckets); past either, the answer is LIMITED, which
 * costs a send and nothing else. The shim caches answers for 100 ms, so an
 * application that polls NVML in a tight loop stays under both.
 */
#include "server.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define USAGE_WINDOW_NS 1000000000ull /* NVML's sample period is 1/6 s to 1 s */
#define USAGE_RATE_CLIENT 20.0
#define USAGE_RATE_TENANT 100.0

uint64_t usage_pid_namespace(uint32_t pid)
{
    char path[64];
    struct stat st;
    if (pid == 0)
        return 0;
    snprintf(path, sizeof path, "/proc/%u/ns/pid", (unsigned)pid);
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Takes one token from b (rate a second, as many at once); false if none. */
static bool bucket_take(struct usage_bucket *b, double rate, uint64_t now)
{
    if (b->at == 0 || now < b->at) {
        b->tokens = rate;
    } else {
        b->tokens += (double)(now - b->at) * rate / 1e9;
        if (b->tokens > rate)
            b->tokens = rate;
    }
    b->at = now ? now : 1;
    if (b->tokens < 1.0)
        return false;
    b->tokens -= 1.0;
    return true;
}

static struct device *find_device(const uint8_t uuid[16])
{
    for (struct device *d = server_sched.devices; d; d = d->next)
        if (memcmp(d->uuid, uuid, 16) == 0)
            return d;
    return NULL;
}

/* The pid by which the asker can name process p, or 0 if it cannot. */
static uint32_t pid_for_asker(const struct client *asker, const struct client *p)
{
    if (asker->pidns && p->pidns)
        return asker->pidns == p->pidns ? p->hello_pid : 0;
    bool asker_plain = asker->peer.pid && asker->peer.pid == asker->hello_pid;
    bool p_plain = p->peer.pid && p->peer.pid == p->hello_pid;
    return asker_plain && p_plain ? p->hello_pid : 0;
}

static void add_process(struct gs_msg_usage *u, uint32_t pid, uint64_t bytes)
{
    u->procs_total++;
    if (u->nprocs >= GS_USAGE_MAX_PROCS)
        return;
    /* kept in pid order */
    uint32_t i = u->nprocs++;
    while (i > 0 && u->procs[i - 1].pid > pid) {
        u->procs[i] = u->procs[i - 1];
        i--;
    }
    u->procs[i] = (struct gs_usage_proc){.pid = pid, .bytes = bytes};
}

void usage_answer(struct client *c, const struct gs_msg_usage_query *q)
{
    struct gs_msg msg = {.type = GS_MSG_USAGE};
    struct gs_msg_usage *u = &msg.u.usage;
    struct tenant *t = c->tenant;
    uint64_t now = now_ns();
    u->id = q->id;
    if (!bucket_take(&c->usage_bucket, USAGE_RATE_CLIENT, now) ||
        !bucket_take(&t->usage_bucket, USAGE_RATE_TENANT, now)) {
        u->status = GS_USAGE_LIMITED;
        client_send(c, &msg);
        return;
    }
    u->status = GS_USAGE_OK;
    u->cap = t->sched.config.memory;
    u->window_ns = USAGE_WINDOW_NS;
    struct device *d = find_device(q->uuid);
    const struct device_tenant *dt = d ? sched_entry_find(d, &t->sched) : NULL;
    if (dt) {
        /* over the whole window whenever the GPU was first used: how long
         * ago that was is another tenant's business */
        u->used = dt->mem_used;
        u->busy_ns = device_tenant_held_over(d, dt, now, USAGE_WINDOW_NS);
        for (const struct client *m = t->members; m; m = m->member_next) {
            bool on = false;
            uint64_t bytes = 0;
            for (int i = 0; i < GS_MAX_DEVICES; i++)
                if (m->slots[i].device == d) {
                    on = true;
                    bytes += m->slots[i].mem_held;
                }
            uint32_t pid = on && !m->closing ? pid_for_asker(c, m) : 0;
            if (pid)
                add_process(u, pid, bytes);
        }
    }
    client_send(c, &msg);
}
