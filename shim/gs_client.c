/*
 * The gate thread: the shim's one connection to gpuslice-server. It is
 * started by the first launch that needs a slice, so a process that never
 * calls CUDA never connects and starts no thread.
 *
 * It connects to the tenant's socket (gs_settings.c: inside a container
 * its directory's, elsewhere GPUSLICE_SOCKET, by default
 * /run/gpuslice/gpuslice.sock), declares each GPU the process uses by
 * UUID, asks for slices when launching threads wait, opens admission on GRANT, and closes it, drains
 * and releases at the deadline, on REVOKE, or when the process goes idle.
 *
 * When the server is unreachable, the policy decides (gs_settings.c:
 * inside a container the tenant directory's, elsewhere
 * GPUSLICE_ON_SERVER_DOWN):
 *   wait (default)  launches block; it reconnects with backoff (at most
 *                   1 s between tries) and logs once at warn (the socket
 *                   it tried, the policy and where it came from), then
 *                   one line per 10 s at info
 *   open            launches run unthrottled; it logs once and keeps
 *                   trying to reconnect in the background
 *   uninstalled     (the tenant's policy file, after gpuslice-server
 *                   --uninstall) as open, and it says so
 */
#include "gs_gate.h"
#include "gs_glibc_compat.h"
#include "gs_memory.h"
#include "gs_nvml.h"
#include "gs_log.h"
#include "gs_settings.h"
#include "gpuslice/transport.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define OPEN_WELCOME_WAIT_NS 2000000000ull /* see wait_connected_locked */

/* The gate thread's state; guarded by gs_gate_lock. */
static bool started;
static pthread_t thread;
static int wake_fd = -1;        /* eventfd: app threads and drainers wake the gate thread */
static int launcher_fd = -1;    /* eventfd: the gate thread wakes a launcher reading the socket */
static bool app_reader;         /* a blocked launcher is reading the socket (gs_client_wait_locked) */
static int sock = -1;
static bool connected;          /* HELLO answered with WELCOME */
static bool policy_open;        /* the server-down policy is open */
static bool policy_read;
static bool connect_tried;      /* the gate thread has tried to connect at least once */
static char socket_path[108];
/* Until when the gate thread sleeps (0: it is awake, and looks at every
 * device's timer before it sleeps again). */
static uint64_t gate_sleeps_until;
/* This process's CLOCK_MONOTONIC minus the protocol's (its time namespace's
 * offset, gpuslice/transport.h), read at each connection: a forked child,
 * which connects anew, may be in another namespace than its parent. */
static int64_t clock_offset_ns;
/* Memory requests waiting for their MEM_RESULT or MEM_LEASED; guarded by
 * gs_gate_lock. */
#define MAX_PENDING 64
static struct pending {
    uint64_t id;             /* 0: a free entry */
    bool done;
    bool lost;               /* sent on a connection that went down */
    struct gs_msg_mem_result result;
    struct gs_msg_mem_leased leased;
} pending[MAX_PENDING];
static uint64_t next_request_id;

static void read_policy_locked(void)
{
    if (policy_read)
        return;
    policy_read = true;
    gs_settings_connection(socket_path, sizeof socket_path, &policy_open);
}

bool gs_client_policy_open(void)
{
    read_policy_locked();
    return policy_open;
}

bool gs_client_connected_locked(void)
{
    return connected;
}

bool gs_client_connecting_locked(void)
{
    return started && !connected && (!connect_tried || sock >= 0);
}

void gs_client_wake(void)
{
    uint64_t one = 1;
    if (wake_fd >= 0 && write(wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        gs_log(GS_LOG_DEBUG, "wake: %s", strerror(errno));
}

static int send_msg(const struct gs_msg *msg)
{
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(msg, buf, sizeof buf);
    if (len == 0 || sock < 0)
        return -1;
    return send(sock, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static void send_slot_msg(enum gs_msg_type type, struct gs_dev *d)
{
    struct gs_msg msg = {.type = type};
    if (type == GS_MSG_DEVICE) {
        msg.u.device.slot = (uint32_t)d->slot;
        memcpy(msg.u.device.uuid, d->uuid, 16);
        msg.u.device.total_bytes = d->total_mem;
    } else {
        msg.u.acquire.slot = (uint32_t)d->slot;
    }
    send_msg(&msg);
}

/* Declares d to the server before its first message about it. */
static void declare_locked(struct gs_dev *d)
{
    if (!d->declared) {
        send_slot_msg(GS_MSG_DEVICE, d);
        d->declared = true;
    }
}

void gs_client_send_acquire_locked(struct gs_dev *d)
{
    if (!connected)
        return;
    declare_locked(d);
    send_slot_msg(GS_MSG_ACQUIRE, d);
}

void gs_client_send_release_locked(struct gs_dev *d, uint64_t grant, uint64_t idle_ns, bool more)
{
    if (!connected)
        return;
    declare_locked(d);
    struct gs_msg msg = {.type = GS_MSG_RELEASE};
    msg.u.release.slot = (uint32_t)d->slot;
    msg.u.release.grant = grant;
    msg.u.release.idle_ns = idle_ns;
    msg.u.release.flags = more ? GS_RELEASE_MORE : 0;
    send_msg(&msg);
}

void gs_client_timer_armed_locked(uint64_t at)
{
    if (at && gate_sleeps_until && at < gate_sleeps_until)
        gs_client_wake();
}

/* Delivers an event of no arguments to every device in use. */
static void deliver_all_locked(enum gs_slice_event_type type, uint64_t now)
{
    struct gs_slice_event ev = {.type = type, .policy_open = policy_open};
    struct gs_slice_actions out;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        if (gs_devs[i].used)
            gs_gate_deliver_locked(&gs_devs[i], &ev, now, &out);
}

/* Everything a lost connection invalidates. Admission closes (wait) or
 * opens wide (open); slices held are gone with the server. */
static void disconnected_locked(const char *why)
{
    /* Log rate limiting; guarded by gs_gate_lock like the rest. */
    static uint64_t last_log;
    static bool logged_open;
    uint64_t now = gs_now_ns();
    if (sock >= 0)
        close(sock);
    sock = -1;
    bool was_connected = connected;
    connected = false;
    for (int i = 0; i < GS_MAX_DEVICES; i++)
        gs_devs[i].declared = false;
    /* Memory requests in flight are lost, even if a new connection is
     * welcomed before their threads wake to see this one went down. */
    for (int i = 0; i < MAX_PENDING; i++)
        if (pending[i].id && !pending[i].done)
            pending[i].lost = true;
    pthread_cond_broadcast(&gs_gate_cv);
    bool was_open = policy_open;
    policy_open = gs_settings_policy_again(policy_open);
    const char *word, *source;
    gs_settings_policy(&word, &source);
    if (was_open != policy_open)
        logged_open = false;
    deliver_all_locked(GS_SLICE_DISCONNECTED, now);
    if (policy_open) {
        if (!logged_open) {
            if (strcmp(word, "uninstalled") == 0)
                gs_log(GS_LOG_WARN, "gpuslice was uninstalled from this node (%s says so): GPU work runs ungated",
                       source);
            else
                gs_log(GS_LOG_WARN, "gpuslice-server unreachable at %s (%s): running unthrottled until it is back "
                       "(the server-down policy is open: %s)", socket_path, why, source);
            logged_open = true;
        }
    } else {
        /* Once at warn when the server goes (or is not there at the
         * start), then a reminder every 10 s at info. */
        bool first = was_connected || last_log == 0;
        if (first || now - last_log >= 10000000000ull) {
            gs_log(first ? GS_LOG_WARN : GS_LOG_INFO, "gpuslice-server unreachable at %s (%s): GPU work waits until "
                   "it answers (the server-down policy is wait: %s)", socket_path, why, source);
            last_log = now;
        }
    }
}

static void try_connect_locked(void)
{
    connect_tried = true;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, socket_path, sizeof addr.sun_path - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        const char *why = strerror(errno);
        if (fd >= 0)
            close(fd);
        disconnected_locked(why);
        return;
    }
    /* GRANTs stamped with when they were sent: a new slice is idle from
     * then, not from when this process's thread woke to read it. */
    if (gs_transport_stamp_messages(fd) != 0)
        gs_log(GS_LOG_DEBUG, "SO_TIMESTAMPNS: %s", strerror(errno));
    int64_t offset = gs_transport_clock_offset_ns();
    if (offset != clock_offset_ns)
        gs_log(GS_LOG_INFO, "in a time namespace whose CLOCK_MONOTONIC is %+.3f s off the initial one's; "
               "deadlines are converted", (double)offset / 1e9);
    clock_offset_ns = offset;
    sock = fd;
    struct gs_msg hello = {.type = GS_MSG_HELLO};
    hello.u.hello.pid = (uint32_t)getpid();
    if (send_msg(&hello) != 0)
        disconnected_locked(strerror(errno));
    else
        deliver_all_locked(GS_SLICE_CONNECTING, gs_now_ns()); /* launches wait for its WELCOME */
}

/* sent_ns: when the server sent msg (gpuslice/transport.h), at most now. */
static void handle_locked(const struct gs_msg *msg, uint64_t now, uint64_t sent_ns)
{
    switch (msg->type) {
    case GS_MSG_WELCOME:
        connected = true;
        gs_log(GS_LOG_INFO, "connected to gpuslice-server as tenant %s", msg->u.welcome.tenant);
        for (int i = 0; i < GS_MAX_DEVICES; i++) {
            struct gs_dev *d = &gs_devs[i];
            if (!d->used)
                continue;
            /* Declare the device and what this process holds on it (even
             * nothing), so that the count survives a server restart and the
             * server lets go of what it kept counted for this process while
             * it had no connection. */
            send_slot_msg(GS_MSG_DEVICE, d);
            d->declared = true;
            struct gs_msg m = {.type = GS_MSG_MEM_DECLARE};
            m.u.mem.slot = (uint32_t)d->slot;
            m.u.mem.bytes = gs_lease_count_locked(d);
            send_msg(&m);
        }
        /* throttled from here on; ACQUIRE where launches wait */
        deliver_all_locked(GS_SLICE_WELCOME, now);
        pthread_cond_broadcast(&gs_gate_cv); /* memory requests waiting for the server */
        break;
    case GS_MSG_MEM_RESULT:
        for (int i = 0; i < MAX_PENDING; i++)
            if (msg->u.mem_result.id && pending[i].id == msg->u.mem_result.id && !pending[i].done) {
                pending[i].result = msg->u.mem_result;
                pending[i].done = true;
                pthread_cond_broadcast(&gs_gate_cv);
            }
        break;
    case GS_MSG_MEM_LEASED:
        for (int i = 0; i < MAX_PENDING; i++)
            if (msg->u.leased.id && pending[i].id == msg->u.leased.id && !pending[i].done) {
                pending[i].leased = msg->u.leased;
                pending[i].done = true;
                pthread_cond_broadcast(&gs_gate_cv);
            }
        break;
    case GS_MSG_MEM_RECALL: {
        /* A sibling needs room: give back all headroom, and answer even
         * with nothing to give. */
        struct gs_dev *d = &gs_devs[msg->u.recall.slot];
        struct gs_msg m = {.type = GS_MSG_MEM_FREE};
        m.u.mem.slot = msg->u.recall.slot;
        m.u.mem.bytes = d->used ? gs_lease_recall_locked(d) : 0;
        send_msg(&m);
        break;
    }
    case GS_MSG_GRANT:
    case GS_MSG_REVOKE: {
        struct gs_dev *d = &gs_devs[msg->u.grant.slot];
        if (!d->used)
            break;
        struct gs_slice_event ev = {.type = msg->type == GS_MSG_GRANT ? GS_SLICE_GRANT : GS_SLICE_REVOKE,
                                    .grant = msg->u.grant.grant, .flags = msg->u.grant.flags, .sent_ns = sent_ns};
        if (msg->type == GS_MSG_GRANT)
            ev.deadline_ns = gs_transport_clock_from_wire(msg->u.grant.deadline_ns, clock_offset_ns);
        struct gs_slice_actions out;
        gs_gate_deliver_locked(d, &ev, now, &out);
        break;
    }
    case GS_MSG_USAGE:
        gs_nvml_usage_arrived_locked(&msg->u.usage);
        break;
    case GS_MSG_ERROR:
        gs_log(GS_LOG_WARN, "gpuslice-server: %s", msg->u.error.reason);
        break;
    default:
        gs_log(GS_LOG_WARN, "unexpected %s message from gpuslice-server", gs_msg_type_str(msg->type));
        break;
    }
}

static void read_socket_locked(uint64_t now)
{
    uint8_t buf[GS_MSG_MAX];
    for (;;) {
        uint64_t sent_ns;
        ssize_t n = gs_transport_recv(sock, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC, &sent_ns);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            disconnected_locked(n == 0 ? "the server closed the connection" : strerror(errno));
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
            disconnected_locked("bad message");
            return;
        }
        handle_locked(&msg, now, sent_ns && sent_ns < now ? sent_ns : now);
        if (sock < 0)
            return;
    }
}

/* The gate thread looks at every device: declared once connected, its
 * drainer started if its start failed before (a drain without a drainer
 * ends at once), and its slice machine told that time passed. */
static void service_devices_locked(uint64_t now)
{
    struct gs_slice_event tick = {.type = GS_SLICE_TIMER};
    struct gs_slice_actions out;
    for (int i = 0; i < GS_MAX_DEVICES; i++) {
        struct gs_dev *d = &gs_devs[i];
        if (!d->used)
            continue;
        if (connected)
            declare_locked(d);
        if (d->slice.state == GS_SLICE_HOLD)
            gs_drain_start_locked(d);
        gs_gate_deliver_locked(d, &tick, now, &out);
    }
}

/* Wakes launchers blocked on gs_gate_cv and, with poke_reader, the one
 * that may be reading the socket (gs_client_wait_locked). */
static void wake_launchers(bool poke_reader)
{
    pthread_cond_broadcast(&gs_gate_cv);
    uint64_t one = 1;
    if (poke_reader && launcher_fd >= 0 && write(launcher_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        gs_log(GS_LOG_DEBUG, "launcher wake: %s", strerror(errno));
}

void gs_client_wake_launchers_locked(void)
{
    wake_launchers(app_reader);
}

/* The gate thread's wake-up, given after it unlocked gs_gate_lock: it
 * cannot read app_reader then, so it pokes the reader whether or not one
 * reads (a launcher that starts reading later returns once, early, and
 * waits again). */
static void wake_blocked_launchers(void)
{
    wake_launchers(true);
}

/* Gives the wake-ups the gate thread owed while it held gs_gate_lock. */
static void give_owed_wakes(unsigned owed)
{
    if (owed & GS_WAKE_LAUNCHERS)
        wake_blocked_launchers();
    if (owed & GS_WAKE_DRAINERS)
        gs_drain_wake_unlocked();
}

static void *gate_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake at deadlines, not 50 us later */
    prctl(PR_SET_NAME, "gpuslice-gate", 0, 0, 0);
    gs_defer_wakeups = true;
    uint64_t backoff = 50000000ull, next_try = 0;
    pthread_mutex_lock(&gs_gate_lock);
    for (;;) {
        uint64_t now = gs_now_ns();
        if (sock < 0 && now >= next_try) {
            try_connect_locked();
            if (sock < 0) {
                next_try = now + backoff;
                backoff = backoff * 2 > 1000000000ull ? 1000000000ull : backoff * 2;
            } else {
                backoff = 50000000ull;
            }
        }
        service_devices_locked(now);

        /* Sleep until a message, a wake-up (launchers waiting, a drainer
         * round ending), the next moment a slice machine asked to be
         * looked at (gs_slice.c: its deadline, the last moment a launch
         * still fits, the end of an idle spell, a backstop) or the next
         * reconnection try. Few wake-ups: this thread's CPU is the
         * tenant's, and on a small machine each one takes a core from the
         * application or the driver for tens of microseconds. */
        uint64_t wake_at = UINT64_MAX;
        for (int i = 0; i < GS_MAX_DEVICES; i++) {
            const struct gs_dev *d = &gs_devs[i];
            if (d->used && d->slice.timer_at && d->slice.timer_at < wake_at)
                wake_at = d->slice.timer_at;
        }
        if (sock < 0 && next_try < wake_at)
            wake_at = next_try;
        struct timespec timeout, *timeout_p = NULL;
        if (wake_at != UINT64_MAX) {
            uint64_t wait = wake_at > now ? wake_at - now : 0;
            timeout.tv_sec = (time_t)(wait / 1000000000ull);
            timeout.tv_nsec = (long)(wait % 1000000000ull);
            timeout_p = &timeout;
        }
        /* While a blocked launcher reads the socket itself, leave it to it. */
        struct pollfd fds[2] = {{.fd = wake_fd, .events = POLLIN}, {.fd = sock, .events = POLLIN}};
        int sock_fd = app_reader ? -1 : sock;
        unsigned owed = gs_wakes_owed;
        gs_wakes_owed = 0;
        gate_sleeps_until = wake_at;
        pthread_mutex_unlock(&gs_gate_lock);
        give_owed_wakes(owed);
        /* Idle headroom goes back to the server, pools are read again. */
        uint64_t memory_in = gs_memory_tick(gs_now_ns());
        if (memory_in && (!timeout_p || (uint64_t)timeout.tv_sec * 1000000000ull + (uint64_t)timeout.tv_nsec > memory_in)) {
            timeout.tv_sec = (time_t)(memory_in / 1000000000ull);
            timeout.tv_nsec = (long)(memory_in % 1000000000ull);
            timeout_p = &timeout;
        }
        int n = ppoll(fds, sock_fd >= 0 ? 2 : 1, timeout_p, NULL);
        pthread_mutex_lock(&gs_gate_lock);
        gate_sleeps_until = 0;
        if (n > 0 && (fds[0].revents & POLLIN)) {
            uint64_t count;
            ssize_t ignored = read(wake_fd, &count, sizeof count);
            (void)ignored;
        }
        if (n > 0 && sock_fd >= 0 && sock == sock_fd && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
            read_socket_locked(gs_now_ns());
        if (gs_wakes_owed & GS_WAKE_LAUNCHERS) {
            /* a grant: wake its launchers before anything else (the
             * drainers' wake-up waits until this thread sleeps again,
             * so that they do not find the lock taken) */
            gs_wakes_owed &= ~GS_WAKE_LAUNCHERS;
            pthread_mutex_unlock(&gs_gate_lock);
            wake_blocked_launchers();
            pthread_mutex_lock(&gs_gate_lock);
        }
    }
    return NULL;
}

/* Waits on gs_gate_cv (gs_gate_lock held) for a broadcast or `ms`
 * milliseconds (gs_gate_cv measures time on CLOCK_REALTIME). */
static void wait_gate_cv_locked(long ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&gs_gate_cv, &gs_gate_lock, &until);
}

/* Frees an entry of `pending`; a request may be waiting for one. */
static void free_pending_locked(struct pending *p)
{
    p->id = 0;
    pthread_cond_broadcast(&gs_gate_cv);
}

/* A free entry of `pending` (waiting on gs_gate_cv while all are taken). */
static struct pending *take_pending_locked(void)
{
    for (;;) {
        for (int i = 0; i < MAX_PENDING; i++)
            if (pending[i].id == 0)
                return &pending[i];
        pthread_cond_wait(&gs_gate_cv, &gs_gate_lock);
    }
}

/* Waits for the answer to request `id` (gs_gate_lock held, released while
 * waiting): the gate thread, or a launcher waiting for a grant, reads it
 * and broadcasts gs_gate_cv. The allocating thread never reads the socket
 * under the lock, so launches on other threads go on meanwhile. False
 * when the connection went down first. */
static bool await_answer_locked(struct pending *p, uint64_t id, bool sent)
{
    if (!sent) { /* the gate thread notices the broken connection and wakes us */
        pthread_cond_wait(&gs_gate_cv, &gs_gate_lock);
        return false;
    }
    while (connected && !p->lost && !(p->done && p->id == id))
        wait_gate_cv_locked(100);
    return p->done && p->id == id;
}

/* Waits (gs_gate_lock held) until the server welcomed this process. False
 * when the open policy lets the caller go ahead uncounted: the server is
 * really unreachable, or its WELCOME has not come within
 * OPEN_WELCOME_WAIT_NS of first_try (the first connection may be under
 * way). */
static bool wait_connected_locked(uint64_t first_try)
{
    while (!connected) {
        gs_client_start_locked(); /* its start may have failed: again (a no-op once it runs) */
        bool server_maybe_up = !connect_tried || sock >= 0;
        if (policy_open && (!server_maybe_up || gs_now_ns() - first_try >= OPEN_WELCOME_WAIT_NS))
            return false;
        gs_client_wake();
        wait_gate_cv_locked(50);
    }
    return true;
}

/* Sends request m, numbering it through id_field (its id in m), and waits
 * for the answer: the answered entry of `pending` (the caller copies the
 * answer and frees the entry by clearing its id), or NULL when the
 * connection went down first. */
static struct pending *request_locked(struct gs_msg *m, uint64_t *id_field)
{
    struct pending *p = take_pending_locked();
    p->id = *id_field = ++next_request_id;
    p->done = p->lost = false;
    uint64_t id = p->id;
    bool sent = send_msg(m) == 0;
    if (await_answer_locked(p, id, sent))
        return p;
    free_pending_locked(p);
    return NULL;
}

int gs_client_mem_query_locked(struct gs_dev *d, struct gs_msg_mem_result *result)
{
    gs_client_start_locked();
    uint64_t first_try = gs_now_ns();
    for (;;) { /* until answered: the connection may go down meanwhile */
        if (!wait_connected_locked(first_try))
            return -1;
        declare_locked(d);
        struct gs_msg m = {.type = GS_MSG_MEM_QUERY};
        m.u.mem_query.slot = (uint32_t)d->slot;
        struct pending *p = request_locked(&m, &m.u.mem_query.id);
        if (p) {
            *result = p->result;
            free_pending_locked(p);
            return 0;
        }
    }
}

int gs_client_lease_call(struct gs_dev *d, uint64_t need, uint64_t want, struct gs_msg_mem_leased *out)
{
    pthread_mutex_lock(&gs_gate_lock);
    gs_client_start_locked();
    uint64_t first_try = gs_now_ns();
    for (;;) { /* until answered: the connection may go down meanwhile */
        if (!wait_connected_locked(first_try)) {
            pthread_mutex_unlock(&gs_gate_lock);
            return -1;
        }
        declare_locked(d);
        struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
        m.u.lease.slot = (uint32_t)d->slot;
        m.u.lease.need = need;
        m.u.lease.want = want;
        struct pending *p = request_locked(&m, &m.u.lease.id);
        if (p) {
            *out = p->leased;
            free_pending_locked(p);
            d->mem_cap = out->cap;
            pthread_mutex_unlock(&gs_gate_lock);
            return 0;
        }
    }
}

int gs_client_send_connected_locked(const struct gs_msg *m, uint64_t wait_ns)
{
    gs_client_start_locked();
    uint64_t first_try = gs_now_ns();
    while (!connected) {
        bool server_maybe_up = !connect_tried || sock >= 0;
        if (!started || !server_maybe_up || gs_now_ns() - first_try >= wait_ns)
            return -1;
        gs_client_wake();
        wait_gate_cv_locked(10);
    }
    return send_msg(m);
}

/* Sends m, a message about d that has no answer, if connected (a message
 * lost with a connection is covered by the declaration on reconnecting). */
static void send_unanswered(struct gs_dev *d, const struct gs_msg *m)
{
    pthread_mutex_lock(&gs_gate_lock);
    if (connected) {
        declare_locked(d);
        send_msg(m);
    }
    pthread_mutex_unlock(&gs_gate_lock);
}

void gs_client_mem_free(struct gs_dev *d, uint64_t bytes)
{
    struct gs_msg m = {.type = GS_MSG_MEM_FREE};
    m.u.mem.slot = (uint32_t)d->slot;
    m.u.mem.bytes = bytes;
    send_unanswered(d, &m);
}

void gs_client_mem_lease_unanswered(struct gs_dev *d, uint64_t bytes)
{
    struct gs_msg m = {.type = GS_MSG_MEM_LEASE};
    m.u.lease.slot = (uint32_t)d->slot;
    m.u.lease.id = 0; /* its MEM_LEASED matches no request */
    m.u.lease.need = m.u.lease.want = bytes;
    send_unanswered(d, &m);
}

void gs_client_wait_locked(bool for_grant)
{
    if (!for_grant || !connected || sock < 0 || app_reader || launcher_fd < 0) {
        wait_gate_cv_locked(50);
        return;
    }
    /* Read the socket on this thread, so that a GRANT wakes the launcher
     * directly rather than through the gate thread: one thread hop less per
     * handoff. The gate thread stops polling the socket while we do (it is
     * woken to notice); if it took a grant first, it wakes us through
     * launcher_fd. */
    app_reader = true;
    int fd = sock;
    gs_client_wake();
    pthread_mutex_unlock(&gs_gate_lock);
    struct pollfd fds[2] = {{.fd = fd, .events = POLLIN}, {.fd = launcher_fd, .events = POLLIN}};
    int n = poll(fds, 2, 50); /* a grant, a budget update or a drain's end wakes it sooner */
    pthread_mutex_lock(&gs_gate_lock);
    app_reader = false;
    if (n > 0 && (fds[1].revents & POLLIN)) {
        uint64_t count;
        ssize_t ignored = read(launcher_fd, &count, sizeof count);
        (void)ignored;
    }
    if (n > 0 && sock == fd && sock >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
        read_socket_locked(gs_now_ns());
    gs_client_wake(); /* the gate thread watches the socket again */
}

/* Closes the gate thread's eventfds, those that are open. */
static void close_wake_fds(void)
{
    if (wake_fd >= 0)
        close(wake_fd);
    if (launcher_fd >= 0)
        close(launcher_fd);
    wake_fd = launcher_fd = -1;
}

void gs_client_start_locked(void)
{
    if (started)
        return;
    read_policy_locked();
    /* A failure leaves nothing open: the next call that needs the gate
     * thread (a new device's first launch, a memory call) tries again,
     * and a descriptor left behind per try would add up. */
    /* Whether a failed start was logged (launches that wait try again
     * every 50 ms); guarded by gs_gate_lock. */
    static bool warned;
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    launcher_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0 || launcher_fd < 0) {
        if (!warned)
            gs_log(GS_LOG_ERROR, "eventfd: %s: GPU work waits until the gate thread can start", strerror(errno));
        warned = true;
        close_wake_fds();
        return;
    }
    int err = pthread_create(&thread, NULL, gate_main, NULL);
    if (err != 0) {
        if (!warned)
            gs_log(GS_LOG_ERROR, "cannot start the gate thread (%s): GPU work waits until it can start",
                   strerror(err));
        warned = true;
        close_wake_fds();
        return;
    }
    if (warned)
        gs_log(GS_LOG_WARN, "the gate thread started after all");
    warned = false;
    started = true;
}

void gs_client_after_fork_child(void)
{
    /* The parent's connection and gate thread are not the child's. */
    if (sock >= 0)
        close(sock);
    sock = -1;
    close_wake_fds();
    started = connected = app_reader = connect_tried = false;
    memset(pending, 0, sizeof pending);
}
