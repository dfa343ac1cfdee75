/*
 * Remote calls to gpuslice-server (see gs_rpc.h). A call whose connection
 * goes down before its answer comes asks again on the next one (its answer
 * is lost with the connection); one made while no connection is up waits
 * for it, under the open policy for at most GS_SLICE_WELCOME_WAIT_NS (the
 * first connection may be under way) and not at all once the socket
 * refused: the caller then goes on without the server.
 *
 * Owns nothing: the answers awaited are gs_conn.c's.
 */
#include "gs_rpc.h"
#include "gs_conn.h"
#include "gs_gate_thread.h"
#include "gs_locks.h"

#include <string.h>
#include <time.h>

#define USAGE_CONNECT_WAIT_NS 2000000000ull /* for a connection under way */
#define USAGE_ANSWER_WAIT_NS 2000000000ull  /* for the server's answer */

/* Waits (gate lock held) until the server welcomed this process. False
 * when the open policy lets the caller go ahead uncounted: the server is
 * really unreachable, or its WELCOME has not come within
 * GS_SLICE_WELCOME_WAIT_NS of first_try. */
static bool wait_connected_locked(uint64_t first_try)
{
    while (!gs_conn_connected_locked()) {
        gs_gate_thread_start_locked(); /* its start may have failed: again (a no-op once it runs) */
        if (gs_conn_policy_open_locked() &&
            (gs_conn_server_down_locked() || gs_now_ns() - first_try >= GS_SLICE_WELCOME_WAIT_NS))
            return false;
        gs_conn_wake_gate_thread();
        gs_locks_check_wait("the server's welcome");
        gs_gate_cv_wait_ms_locked(50);
    }
    return true;
}

/* Sends request m about d (NULL: no GPU), numbering it through id_field,
 * and waits for its answer until `until` (0: for as long as the
 * connection lasts): the answered entry (the caller gives it back), or
 * NULL. */
static struct gs_answer *request_locked(struct gs_dev *d, struct gs_msg *m, uint64_t *id_field, uint64_t until)
{
    struct gs_answer *a;
    while (!(a = gs_conn_answer_take_locked()))
        pthread_cond_wait(&gs_gate_cv, gs_lock_mutex(GS_LOCK_GATE)); /* all taken: one is given back */
    *id_field = a->id;
    a->dev = d;
    bool sent = (d ? gs_conn_send_about_locked(d, m) : gs_conn_send_locked(m)) == 0;
    gs_locks_check_wait("the server's answer");
    if (!sent) { /* the gate thread notices the broken connection and wakes us */
        pthread_cond_wait(&gs_gate_cv, gs_lock_mutex(GS_LOCK_GATE));
    } else {
        while (gs_conn_connected_locked() && !a->lost && !a->done && (!until || gs_now_ns() < until))
            gs_gate_cv_wait_ms_locked(until ? 10 : 100);
    }
    if (a->done)
        return a;
    gs_conn_answer_give_locked(a);
    return NULL;
}

/* Sends m about d, numbered through id_field, until it is answered (the
 * connection may go down meanwhile: it is asked again on the next one):
 * the answered entry (the caller copies it and gives it back), or NULL
 * when the caller goes on without the server (wait_connected_locked). */
static struct gs_answer *call_locked(struct gs_dev *d, struct gs_msg *m, uint64_t *id_field)
{
    gs_gate_thread_start_locked();
    uint64_t first_try = gs_now_ns();
    for (;;) {
        if (!wait_connected_locked(first_try))
            return NULL;
        struct gs_answer *a = request_locked(d, m, id_field, 0);
        if (a)
            return a;
    }
}

int gs_rpc_mem_query(struct gs_dev *d, struct gs_msg_mem_result *result)
{
    struct gs_msg m = {.type = GS_MSG_MEM_QUERY};
    m.u.mem_query.slot = (uint32_t)d->slot;
    gs_lock(GS_LOCK_GATE);
    struct gs_answer *a = call_locked(d, &m, &m.u.mem_query.id);
    if (a) {
        *result = a->msg.u.mem_result;
        gs_conn_answer_give_locked(a);
    }
    gs_unlock(GS_LOCK_GATE);
    return a ? 0 : -1;
}

int gs_rpc_lease(struct gs_dev *d, uint64_t need, uint64_t want, struct gs_msg_mem_leased *out)
{
    struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
    m.u.lease.slot = (uint32_t)d->slot;
    m.u.lease.need = need;
    m.u.lease.want = want;
    gs_lock(GS_LOCK_GATE);
    struct gs_answer *a = call_locked(d, &m, &m.u.lease.id);
    if (a) {
        *out = a->msg.u.leased;
        gs_conn_answer_give_locked(a);
    }
    gs_unlock(GS_LOCK_GATE);
    return a ? 0 : -1;
}

int gs_rpc_usage(const uint8_t uuid[16], struct gs_msg_usage *out)
{
    int rc = -1;
    gs_lock(GS_LOCK_GATE);
    gs_gate_thread_start_locked();
    uint64_t first_try = gs_now_ns();
    while (!gs_conn_connected_locked()) {
        if (!gs_conn_connecting_locked() || gs_now_ns() - first_try >= USAGE_CONNECT_WAIT_NS) {
            gs_unlock(GS_LOCK_GATE);
            return -1;
        }
        gs_conn_wake_gate_thread();
        gs_locks_check_wait("the server's welcome");
        gs_gate_cv_wait_ms_locked(10);
    }
    struct gs_msg m = {.type = GS_MSG_USAGE_QUERY};
    memcpy(m.u.usage_query.uuid, uuid, 16);
    struct gs_answer *a = request_locked(NULL, &m, &m.u.usage_query.id, gs_now_ns() + USAGE_ANSWER_WAIT_NS);
    if (a) {
        *out = a->msg.u.usage;
        gs_conn_answer_give_locked(a);
        rc = 0;
    }
    gs_unlock(GS_LOCK_GATE);
    return rc;
}
