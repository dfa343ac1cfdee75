/*
 * The gate thread (see gs_gate_thread.h): the thread, its loop and its
 * poll, and reading the socket. It connects (gs_conn.c) with backoff
 * (50 ms to 1 s), reads the server's messages and hands each to
 * gs_gate_messages.c, which gives it to whom it concerns; after each
 * wake-up it looks at every GPU (gs_gate_look_locked: TIMER), and sleeps
 * until the earliest moment a slice machine asked for, a message, or a
 * wake-up; every 20 to 40 ms while device memory changes it gives idle
 * headroom back and reads the pools again. This file is the thin part
 * the simulation (test/sim) cannot run: a thread, ppoll on eventfds and
 * the socket, recv; what it decides with what it reads is
 * gs_gate_messages.c's, which the simulation runs unchanged.
 *
 * Owns (guarded by the gate lock): whether it runs, and the reconnection
 * backoff; the memory tick's rate (its own).
 */
#include "gs_gate_thread.h"
#include "gs_conn.h"
#include "gs_dispatch.h"
#include "gs_gate_messages.h"
#include "gs_glibc_compat.h"
#include "gs_locks.h"
#include "gs_lease.h"
#include "gs_log.h"
#include "gs_pools.h"
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

/* ---- reading the socket -------------------------------------------------------- */

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
            gs_gate_lost_locked(n == 0 ? "the server closed the connection" : strerror(errno), gs_now_ns());
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
            gs_gate_lost_locked("bad message", gs_now_ns());
            return;
        }
        gs_gate_handle_locked(&msg, now, sent_ns && sent_ns < now ? sent_ns : now);
        if (gs_conn_socket_locked() != sock)
            return;
    }
}

/* ---- the loop -------------------------------------------------------------------- */

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
            if (!gs_gate_connect_locked(gs_now_ns())) {
                next_try = now + backoff;
                backoff = backoff * 2 > 1000000000ull ? 1000000000ull : backoff * 2;
            } else {
                backoff = 50000000ull;
            }
        }
        gs_gate_look_locked(now);

        /* Sleep until a message, a wake-up, the earliest moment a slice
         * machine asked to be looked at (gs_slice.c: its deadline, the
         * last moment a launch still fits, the end of an idle spell, a
         * backstop) or the next reconnection try. Few wake-ups: this
         * thread's CPU is the tenant's, and on a small machine each one
         * takes a core from the application or the driver for tens of
         * microseconds. */
        uint64_t wake_at = gs_gate_next_look_locked();
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
