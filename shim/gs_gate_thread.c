/*
 * The gate thread (see gs_gate_thread.h). It connects (gs_conn.c) with
 * backoff (50 ms to 1 s), reads the server's messages and hands each to
 * whom it concerns: a GPU's slice machine (GRANT, REVOKE; WELCOME and a
 * lost connection to all of them: gs_dispatch.c), the lease ledger
 * (MEM_RECALL, and the counts a WELCOME declares: gs_lease.c), the
 * requests waiting for an answer (MEM_RESULT, MEM_LEASED, USAGE:
 * gs_conn.c). After each wake-up it tells every slice machine that time
 * passed (TIMER), and sleeps until the earliest moment one of them asked
 * for, a message, or a wake-up; every 20 to 40 ms while device memory
 * changes it gives idle headroom back and reads the pools again.
 *
 * Owns (guarded by the gate lock): whether it runs, and the reconnection
 * backoff; the memory tick's rate (its own).
 */
#include "gs_gate_thread.h"
#include "gs_conn.h"
#include "gs_dispatch.h"
#include "gs_drain.h"
#include "gs_glibc_compat.h"
#include "gs_locks.h"
#include "gs_lease.h"
#include "gs_log.h"
#include "gs_pools.h"
#include "gs_slice_wire.h"
#include "gpuslice/transport.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define IDLE_TICK_NS 20000000ull /* idle headroom goes back after 20 to 40 ms */

static bool started;
static pthread_t thread;

/* ---- messages -------------------------------------------------------------------- */

/* sent_ns: when the server sent msg (gpuslice/transport.h), at most now. */
static void handle_locked(const struct gs_msg *msg, uint64_t now, uint64_t sent_ns)
{
    switch (msg->type) {
    case GS_MSG_WELCOME: {
        gs_conn_welcomed_locked(msg->u.welcome.tenant);
        /* Declare every GPU and what this process holds on it (even
         * nothing), so that the count survives a server restart and the
         * server lets go of what it kept counted for this process while
         * it had no connection. */
        for (int i = 0; i < GS_MAX_DEVICES; i++) {
            struct gs_dev *d = &gs_devs[i];
            if (!d->used)
                continue;
            struct gs_msg m = {.type = GS_MSG_MEM_DECLARE};
            m.u.mem.slot = (uint32_t)d->slot;
            m.u.mem.bytes = gs_lease_count(d);
            gs_conn_send_about_locked(d, &m);
        }
        /* throttled from here on; ACQUIRE where launches wait */
        struct gs_slice_event ev = {.type = GS_SLICE_WELCOME};
        gs_dispatch_all_locked(&ev, now);
        pthread_cond_broadcast(&gs_gate_cv); /* requests waiting for the server */
        break;
    }
    case GS_MSG_MEM_RESULT:
        gs_conn_answer_arrived_locked(msg->u.mem_result.id, msg);
        break;
    case GS_MSG_MEM_LEASED: {
        /* A grant is counted as it arrives, under the gate lock: a later
         * connection's declaration has it in it. Counted by its requester,
         * once awake, it could come after that declaration, and be missing
         * from the server's count. Only what a request waits for: the
         * answer to gs_lease_take_anyway's lease is counted already. */
        struct gs_answer *a = gs_conn_answer_arrived_locked(msg->u.leased.id, msg);
        if (a && a->dev && msg->u.leased.status == GS_LEASE_GRANTED)
            gs_lease_granted(a->dev, msg->u.leased.granted);
        break;
    }
    case GS_MSG_USAGE:
        gs_conn_answer_arrived_locked(msg->u.usage.id, msg);
        break;
    case GS_MSG_MEM_RECALL: {
        /* A sibling needs room: give back all headroom, and answer even
         * with nothing to give. */
        struct gs_dev *d = &gs_devs[msg->u.recall.slot];
        struct gs_msg m = {.type = GS_MSG_MEM_FREE};
        m.u.mem.slot = msg->u.recall.slot;
        m.u.mem.bytes = d->used ? gs_lease_recall(d) : 0;
        gs_conn_send_locked(&m);
        break;
    }
    case GS_MSG_GRANT:
    case GS_MSG_REVOKE: {
        struct gs_dev *d = &gs_devs[msg->u.grant.slot];
        if (!d->used)
            break;
        struct gs_slice_event ev;
        gs_slice_wire_event(msg, sent_ns, gs_conn_clock_offset_locked(), &ev);
        struct gs_slice_actions out;
        gs_dispatch_locked(d, &ev, now, &out);
        break;
    }
    case GS_MSG_ERROR:
        gs_log(GS_LOG_WARN, "gpuslice-server: %s", msg->u.error.reason);
        break;
    default:
        gs_log(GS_LOG_WARN, "unexpected %s message from gpuslice-server", gs_msg_type_str(msg->type));
        break;
    }
}

/* The connection broke or could not be made: every slice machine hears
 * it (admission closes, or opens wide under the open policy). */
static void lost_locked(const char *why)
{
    gs_conn_lost_locked(why);
    struct gs_slice_event ev = {.type = GS_SLICE_DISCONNECTED, .policy_open = gs_conn_policy_open_locked()};
    gs_dispatch_all_locked(&ev, gs_now_ns());
}

static void connect_locked(void)
{
    if (!gs_conn_connect_locked()) {
        struct gs_slice_event ev = {.type = GS_SLICE_DISCONNECTED, .policy_open = gs_conn_policy_open_locked()};
        gs_dispatch_all_locked(&ev, gs_now_ns());
        return;
    }
    struct gs_slice_event ev = {.type = GS_SLICE_CONNECTING}; /* launches wait for its WELCOME */
    gs_dispatch_all_locked(&ev, gs_now_ns());
}

/* Reads every message waiting on the socket (gate lock held). */
static void read_socket_locked(uint64_t now)
{
    uint8_t buf[GS_MSG_MAX];
    int sock = gs_conn_socket_locked();
    for (;;) {
        uint64_t sent_ns;
        ssize_t n = gs_transport_recv(sock, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC, &sent_ns);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            lost_locked(n == 0 ? "the server closed the connection" : strerror(errno));
            return;
        }
        struct gs_msg msg;
        enum gs_decode_result r = (size_t)n > sizeof buf ? GS_DECODE_BAD_LENGTH
                                                         : gs_msg_decode(buf, (size_t)n, &msg);
        if (r != GS_DECODE_OK) {
            if (r == GS_DECODE_BAD_VERSION)
                gs_log(GS_LOG_ERROR, "protocol version mismatch: this shim speaks %d, gpuslice-server %u",
                       GS_PROTOCOL_VERSION, (unsigned)(buf[4] | (buf[5] << 8)));
            else
                gs_log(GS_LOG_ERROR, "bad message from gpuslice-server: %s", gs_decode_result_str(r));
            lost_locked("bad message");
            return;
        }
        handle_locked(&msg, now, sent_ns && sent_ns < now ? sent_ns : now);
        if (gs_conn_socket_locked() != sock)
            return;
    }
}

/* ---- the loop -------------------------------------------------------------------- */

/* Every GPU: declared once connected, its drainer started if its start
 * failed before (a drain without a drainer ends at once), and its slice
 * machine told that time passed. */
static void look_at_devices_locked(uint64_t now)
{
    struct gs_slice_event tick = {.type = GS_SLICE_TIMER};
    struct gs_slice_actions out;
    bool connected = gs_conn_connected_locked();
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        struct gs_dev *d = &gs_devs[i];
        if (!d->used)
            continue;
        if (connected)
            gs_conn_declare_locked(d);
        if (d->slice.state == GS_SLICE_HOLD)
            gs_drain_start_locked(d);
        gs_dispatch_locked(d, &tick, now, &out);
    }
}

/* Idle headroom goes back to the server, pools are read again: the
 * nanoseconds until it wants to run again, 0 for never. Called without the
 * gate lock (the pools' lock comes before it: gs_locks.h). */
static uint64_t memory_tick(uint64_t now)
{
    static uint64_t last_tick; /* this thread's */
    static bool wanted;
    if (now - last_tick < IDLE_TICK_NS)
        return wanted || gs_lease_tick_wanted() ? last_tick + IDLE_TICK_NS - now : 0;
    last_tick = now;
    gs_lease_tick_disarm();
    gs_pools_settle(false); /* the pools' lock is only tried: never wait here */
    bool again = gs_lease_give_idle();
    wanted = again || gs_pools_pending();
    if (!wanted)
        return 0;
    gs_lease_tick_arm();
    return IDLE_TICK_NS;
}

static void *gate_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake at deadlines, not 50 us later */
    prctl(PR_SET_NAME, "gpuslice-gate", 0, 0, 0);
    gs_dispatch_defer_wakeups(true);
    uint64_t backoff = 50000000ull, next_try = 0;
    gs_lock(GS_LOCK_GATE);
    for (;;) {
        uint64_t now = gs_now_ns();
        if (gs_conn_socket_locked() < 0 && now >= next_try) {
            connect_locked();
            if (gs_conn_socket_locked() < 0) {
                next_try = now + backoff;
                backoff = backoff * 2 > 1000000000ull ? 1000000000ull : backoff * 2;
            } else {
                backoff = 50000000ull;
            }
        }
        look_at_devices_locked(now);

        /* Sleep until a message, a wake-up, the earliest moment a slice
         * machine asked to be looked at (gs_slice.c: its deadline, the
         * last moment a launch still fits, the end of an idle spell, a
         * backstop) or the next reconnection try. Few wake-ups: this
         * thread's CPU is the tenant's, and on a small machine each one
         * takes a core from the application or the driver for tens of
         * microseconds. */
        uint64_t wake_at = UINT64_MAX;
        for (int i = 0; i < GS_MAX_DEVICES; i++) {
            const struct gs_dev *d = &gs_devs[i];
            if (d->used && d->slice.timer_at && d->slice.timer_at < wake_at)
                wake_at = d->slice.timer_at;
        }
        int sock = gs_conn_socket_locked();
        if (sock < 0 && next_try < wake_at)
            wake_at = next_try;
        struct timespec timeout, *timeout_p = NULL;
        if (wake_at != UINT64_MAX) {
            uint64_t wait = wake_at > now ? wake_at - now : 0;
            timeout.tv_sec = (time_t)(wait / 1000000000ull);
            timeout.tv_nsec = (long)(wait % 1000000000ull);
            timeout_p = &timeout;
        }
        /* While a launcher reads the socket itself, leave it to it. */
        int sock_fd = gs_conn_launcher_reads_locked() ? -1 : sock;
        struct pollfd fds[2] = {{.fd = gs_conn_wake_fd(), .events = POLLIN}, {.fd = sock_fd, .events = POLLIN}};
        unsigned owed = gs_dispatch_owed_locked(GS_OWED_LAUNCHERS | GS_OWED_DRAINERS);
        gs_dispatch_gate_sleeps_until_locked(wake_at);
        gs_unlock(GS_LOCK_GATE);
        gs_dispatch_give_owed(owed);
        uint64_t memory_in = memory_tick(gs_now_ns());
        if (memory_in && (!timeout_p || (uint64_t)timeout.tv_sec * 1000000000ull + (uint64_t)timeout.tv_nsec > memory_in)) {
            timeout.tv_sec = (time_t)(memory_in / 1000000000ull);
            timeout.tv_nsec = (long)(memory_in % 1000000000ull);
            timeout_p = &timeout;
        }
        int n = ppoll(fds, sock_fd >= 0 ? 2 : 1, timeout_p, NULL);
        gs_lock(GS_LOCK_GATE);
        gs_dispatch_gate_sleeps_until_locked(0);
        if (n > 0 && (fds[0].revents & POLLIN)) {
            uint64_t count;
            ssize_t ignored = read(gs_conn_wake_fd(), &count, sizeof count);
            (void)ignored;
        }
        if (n > 0 && sock_fd >= 0 && gs_conn_socket_locked() == sock_fd &&
            (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
            read_socket_locked(gs_now_ns());
        owed = gs_dispatch_owed_locked(GS_OWED_LAUNCHERS);
        if (owed) {
            /* a grant: wake its launchers before anything else (the
             * drainers' wake-up waits until this thread sleeps again, so
             * that they do not find the lock taken) */
            gs_unlock(GS_LOCK_GATE);
            gs_dispatch_give_owed(owed);
            gs_lock(GS_LOCK_GATE);
        }
    }
    return NULL;
}

/* ---- starting it, and launchers that read the socket ------------------------------ */

void gs_gate_thread_start_locked(void)
{
    if (started)
        return;
    gs_conn_policy_open_locked(); /* the settings, read once before the first connection */
    /* Whether a failed start was logged (launches that wait try again
     * every 50 ms); guarded by the gate lock. */
    static bool warned;
    if (!gs_conn_open_wake_fds()) {
        if (!warned)
            gs_log(GS_LOG_ERROR, "eventfd: %s: GPU work waits until the gate thread can start", strerror(errno));
        warned = true;
        return;
    }
    int err = pthread_create(&thread, NULL, gate_main, NULL);
    if (err != 0) {
        if (!warned)
            gs_log(GS_LOG_ERROR, "cannot start the gate thread (%s): GPU work waits until it can start",
                   strerror(err));
        warned = true;
        gs_conn_close_wake_fds();
        return;
    }
    if (warned)
        gs_log(GS_LOG_WARN, "the gate thread started after all");
    warned = false;
    started = true;
    gs_conn_set_reader_started_locked();
}

void gs_gate_thread_wait_locked(bool for_grant)
{
    gs_locks_check_wait("admission");
    int sock = gs_conn_socket_locked(), reader_fd = gs_conn_reader_fd();
    if (!for_grant || !gs_conn_connected_locked() || sock < 0 || gs_conn_launcher_reads_locked() || reader_fd < 0) {
        gs_gate_cv_wait_ms_locked(50);
        return;
    }
    /* Read the socket on this thread. The gate thread stops polling it
     * while this one does (it is woken to notice); if it took a grant
     * first, it wakes this one through the reader eventfd. */
    gs_conn_set_launcher_reads_locked(true);
    gs_conn_wake_gate_thread();
    gs_unlock(GS_LOCK_GATE);
    struct pollfd fds[2] = {{.fd = sock, .events = POLLIN}, {.fd = reader_fd, .events = POLLIN}};
    int n = poll(fds, 2, 50); /* a grant, a budget update or a drain's end wakes it sooner */
    gs_lock(GS_LOCK_GATE);
    gs_conn_set_launcher_reads_locked(false);
    if (n > 0 && (fds[1].revents & POLLIN)) {
        uint64_t count;
        ssize_t ignored = read(reader_fd, &count, sizeof count);
        (void)ignored;
    }
    if (n > 0 && gs_conn_socket_locked() == sock && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
        read_socket_locked(gs_now_ns());
    gs_conn_wake_gate_thread(); /* the gate thread watches the socket again */
}

void gs_gate_thread_after_fork_child(void)
{
    /* The parent's gate thread is not the child's. */
    started = false;
}
