/*
 * The connection to gpuslice-server (see gs_conn.h). It goes to the
 * tenant's socket (gs_settings.c: inside a container its directory's,
 * elsewhere GPUSLICE_SOCKET, by default /run/gpuslice/gpuslice.sock).
 *
 * When the server is unreachable, the policy decides (gs_settings.c:
 * inside a container the tenant directory's, elsewhere
 * GPUSLICE_ON_SERVER_DOWN):
 *   wait (default)  launches block; the gate thread reconnects with
 *                   backoff (at most 1 s between tries); logged once at
 *                   warn (the socket tried, the policy and where it came
 *                   from), then one line per 10 s at info
 *   open            launches run unthrottled; logged once
 *   uninstalled     (the tenant's policy file, after gpuslice-server
 *                   --uninstall) as open, and it says so
 *
 * A GPU is declared (DEVICE) with an open descriptor of its device node
 * passed along (gs_node.c), the proof the server asks for that this
 * process may use it.
 *
 * Owns (all guarded by the gate lock): the socket and its state, the
 * policy, which GPUs are declared on this connection, the answers awaited
 * and the clock offset; and the eventfds (written by any thread, no lock).
 */
#include "gs_conn.h"
#include "gs_glibc_compat.h"
#include "gs_locks.h"
#include "gs_log.h"
#include "gs_node.h"
#include "gs_settings.h"
#include "gpuslice/transport.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int sock = -1;
static bool connected;          /* HELLO answered with WELCOME */
static bool reader_started;     /* the gate thread runs */
static bool connect_tried;      /* a connection was tried at least once */
static bool policy_open;        /* the server-down policy is open */
static bool policy_read;
static char socket_path[108];
static uint32_t declared;       /* GPUs (bits by slot) declared on this connection */
/* This process's CLOCK_MONOTONIC minus the protocol's (its time namespace's
 * offset, gpuslice/transport.h), read at each connection: a forked child,
 * which connects anew, may be in another namespace than its parent. */
static int64_t clock_offset_ns;
#define MAX_ANSWERS 80
static struct gs_answer answers[MAX_ANSWERS];
static uint64_t next_request_id;
/* eventfds: any thread wakes the gate thread; the gate thread wakes a
 * launcher reading the socket in its stead (launcher_reads) */
static int wake_fd = -1, reader_fd = -1;
static bool launcher_reads;

_Static_assert(GS_MAX_DEVICES <= 32, "declared is a 32-bit mask");

/* ---- what is known ----------------------------------------------------------- */

static void read_policy_locked(void)
{
    if (policy_read)
        return;
    policy_read = true;
    gs_settings_connection(socket_path, sizeof socket_path, &policy_open);
}

bool gs_conn_policy_open_locked(void)
{
    read_policy_locked();
    return policy_open;
}

bool gs_conn_connected_locked(void)
{
    return connected;
}

bool gs_conn_connecting_locked(void)
{
    return reader_started && !connected && (!connect_tried || sock >= 0);
}

bool gs_conn_reader_started_locked(void)
{
    return reader_started;
}

void gs_conn_set_reader_started_locked(void)
{
    reader_started = true;
}

bool gs_conn_server_down_locked(void)
{
    return connect_tried && sock < 0;
}

int gs_conn_socket_locked(void)
{
    return sock;
}

int64_t gs_conn_clock_offset_locked(void)
{
    return clock_offset_ns;
}

/* ---- sending -------------------------------------------------------------------- */

/* Sends m, passing the descriptor `passed` with it unless it is -1. */
static int send_passing_locked(const struct gs_msg *m, int passed)
{
    uint8_t buf[GS_MSG_MAX];
    size_t len = gs_msg_encode(m, buf, sizeof buf);
    if (len == 0 || sock < 0)
        return -1;
    return gs_transport_send_passing(sock, buf, len, passed) == (ssize_t)len ? 0 : -1;
}

int gs_conn_send_locked(const struct gs_msg *m)
{
    return send_passing_locked(m, -1);
}

void gs_conn_declare_locked(struct gs_dev *d)
{
    if (!connected && sock < 0)
        return;
    if (declared & (1u << d->slot))
        return;
    struct gs_msg msg = {.type = GS_MSG_DEVICE};
    msg.u.device.slot = (uint32_t)d->slot;
    memcpy(msg.u.device.uuid, d->uuid, 16);
    msg.u.device.total_bytes = d->total_mem;
    /* with the proof that this process may open the GPU's node */
    int node = gs_node_open(d->uuid);
    if (send_passing_locked(&msg, node) == 0)
        declared |= 1u << d->slot;
    if (node >= 0 && close(node) != 0)
        gs_log(GS_LOG_DEBUG, "close: %s", strerror(errno));
}

int gs_conn_send_about_locked(struct gs_dev *d, const struct gs_msg *m)
{
    if (!connected)
        return -1;
    gs_conn_declare_locked(d);
    return gs_conn_send_locked(m);
}

/* ---- making and losing the connection ----------------------------------------------- */

bool gs_conn_connect_locked(void)
{
    read_policy_locked();
    connect_tried = true;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, socket_path, sizeof addr.sun_path - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        const char *why = strerror(errno);
        if (fd >= 0)
            close(fd);
        gs_conn_lost_locked(why);
        return false;
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
    if (gs_conn_send_locked(&hello) != 0) {
        gs_conn_lost_locked(strerror(errno));
        return false;
    }
    return true;
}

void gs_conn_welcomed_locked(const char *tenant)
{
    connected = true;
    gs_log(GS_LOG_INFO, "connected to gpuslice-server as tenant %s", tenant);
}

void gs_conn_lost_locked(const char *why)
{
    /* Log rate limiting; guarded by the gate lock like the rest. */
    static uint64_t last_log;
    static bool logged_open;
    uint64_t now = gs_now_ns();
    if (sock >= 0)
        close(sock);
    sock = -1;
    bool was_connected = connected;
    connected = false;
    declared = 0;
    /* Requests in flight are lost, even if a new connection is welcomed
     * before their threads wake to see this one went down. */
    for (int i = 0; i < MAX_ANSWERS; i++)
        if (answers[i].id && !answers[i].done)
            answers[i].lost = true;
    pthread_cond_broadcast(&gs_gate_cv);
    bool was_open = policy_open;
    policy_open = gs_settings_policy_again(policy_open);
    const char *word, *source;
    gs_settings_policy(&word, &source);
    if (was_open != policy_open)
        logged_open = false;
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

/* ---- answers -------------------------------------------------------------------- */

struct gs_answer *gs_conn_answer_take_locked(void)
{
    for (int i = 0; i < MAX_ANSWERS; i++)
        if (answers[i].id == 0) {
            answers[i] = (struct gs_answer){.id = ++next_request_id};
            return &answers[i];
        }
    return NULL;
}

void gs_conn_answer_give_locked(struct gs_answer *a)
{
    a->id = 0;
    pthread_cond_broadcast(&gs_gate_cv); /* a request may wait for a free entry */
}

struct gs_answer *gs_conn_answer_arrived_locked(uint64_t id, const struct gs_msg *m)
{
    for (int i = 0; id && i < MAX_ANSWERS; i++)
        if (answers[i].id == id && !answers[i].done) { /* ids are unique */
            answers[i].msg = *m;
            answers[i].done = true;
            pthread_cond_broadcast(&gs_gate_cv);
            return &answers[i];
        }
    return NULL;
}

/* ---- wake-ups ------------------------------------------------------------------- */

bool gs_conn_open_wake_fds(void)
{
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    reader_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd >= 0 && reader_fd >= 0)
        return true;
    /* A failure leaves nothing open: a descriptor left behind per failed
     * start would add up. */
    gs_conn_close_wake_fds();
    return false;
}

void gs_conn_close_wake_fds(void)
{
    if (wake_fd >= 0)
        close(wake_fd);
    if (reader_fd >= 0)
        close(reader_fd);
    wake_fd = reader_fd = -1;
}

int gs_conn_wake_fd(void)
{
    return wake_fd;
}

int gs_conn_reader_fd(void)
{
    return reader_fd;
}

static void poke(int fd, const char *what)
{
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof one) < 0 && errno != EAGAIN)
        gs_log(GS_LOG_DEBUG, "%s: %s", what, strerror(errno));
}

void gs_conn_wake_gate_thread(void)
{
    poke(wake_fd, "waking the gate thread");
}

bool gs_conn_launcher_reads_locked(void)
{
    return launcher_reads;
}

void gs_conn_set_launcher_reads_locked(bool reads)
{
    launcher_reads = reads;
}

void gs_conn_wake_reader(void)
{
    poke(reader_fd, "waking the launcher reading the socket");
}

void gs_conn_after_fork_child(void)
{
    /* The parent's connection and gate thread are not the child's. */
    if (sock >= 0)
        close(sock);
    sock = -1;
    gs_conn_close_wake_fds();
    connected = launcher_reads = connect_tried = reader_started = false;
    declared = 0;
    memset(answers, 0, sizeof answers);
}
