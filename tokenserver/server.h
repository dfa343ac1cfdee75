/*
 * gpuslice-server internals: the objects the server's files share. The
 * files stand in layers, each calling only those below it
 * (tokenserver/meson.build lists them from the bottom up;
 * test/server/layers_test.py).
 *
 *   options.c      the options, set by main.c, read by every file
 *   tables.c       the tables many files read: tenants, clients, removals
 *   uuid_text.c    a GPU's UUID as text
 *   clock.c        the monotonic clock everything counts in
 *   loop.c         the epoll event loop
 *   timers.c       one-shot timers in memory, the loop's one timerfd
 *   listener.c     a listening socket: paused, resumed, the spare descriptor
 *   log.c          logging, and the rate limit on what clients can cause
 *   main.c         the command line, limits, signals, start-up
 *   config.c       parsing the text of one tenant file
 *   config_file.c  reading one tenant file safely (regular files only)
 *   confwatch.c    watching the configuration directories (inotify)
 *   rundir.c       the run directory: sockets made without following paths
 *   runlock.c      one server per run directory (RUN_DIR/server.lock)
 *   uninstall.c    gpuslice-server --uninstall
 *   tenants.c      the set of tenants, their listening sockets, reloads
 *   accept.c       accepting connections within the limits
 *   client_out.c   what goes out to a client: messages, notices, drops
 *   dispatch.c     runs the scheduler's steps and carries out their actions;
 *                  owns the scheduler's state and the GPUs' timers
 *   devices.c      the GPUs clients declare: lookup, limits, freeing
 *   client_messages.c what one message of a client does (the simulation runs it)
 *   clients.c      one connection per shim process: messages in, closing
 *   sched.c        the scheduler, a state machine (sched.h): who holds each
 *                  GPU, who is next
 *   memory.c       its part that keeps each tenant's device memory under its cap
 *   usage.c        USAGE_QUERY: a tenant's own use of a GPU, for its NVML
 *   status.c       the status report, written a piece at a time
 *   admin.c        the admin socket gpuslicectl talks to
 *   cdi.c          the CDI spec and the preload list containers get
 *   peers.c        who a client is: host PID, container and pod, from the kernel
 *   pod_names.c    a container's Kubernetes names, from the kubelet's log links
 *   nvidia_gpus.c  the NVIDIA driver's GPUs: index and device minor by UUID
 *   gpu_access.c   whether a client's process may use a GPU it declares
 *   metrics*.c, http_request.c, histogram.c
 *                  the Prometheus endpoint (declared in metrics.h)
 *
 * The server is single-threaded: every object here belongs to the loop's
 * thread, and nothing is locked.
 */
#ifndef GPUSLICE_SERVER_H
#define GPUSLICE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpuslice/protocol.h"
#include "histogram.h"
#include "sched.h"

/* ---- loop.c -------------------------------------------------------------- */

typedef void (*loop_fn)(void *arg, uint32_t events);

struct loop_watch {
    int fd;
    loop_fn fn;
    void *arg;
};

int loop_init(void);
int loop_add(struct loop_watch *w, uint32_t events);
int loop_mod(struct loop_watch *w, uint32_t events);
/* Stops watching w; an event for it still waiting in this batch is dropped. */
void loop_del(struct loop_watch *w);
/* Runs until loop_stop; returns 0, or -1 on an epoll failure. */
int loop_run(void);
/* The number of the current round (one epoll_wait and its batch). */
uint64_t loop_round(void);
void loop_stop(void);

/* ---- uuid_text.c ---------------------------------------------------------------- */

/* A GPU's UUID as 8-4-4-4-12 lowercase hex digits (what follows "GPU-"). */
void uuid_text(const uint8_t uuid[16], char out[37]);

/* ---- clock.c ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);

/* ---- timers.c ----------------------------------------------------------------- */

/* A one-shot timer, kept in memory (timers.c): arming it never fails and
 * costs no descriptor. A zeroed one is disarmed. */
struct timer {
    void (*fn)(void *arg);
    void *arg;
    uint64_t at;                          /* when it fires; 0: not armed */
    struct timer *child, *next, *prev;    /* its place in the heap */
};
void timer_init(struct timer *t, void (*fn)(void *), void *arg);
void timer_at(struct timer *t, uint64_t when_ns); /* 0 disarms */
void timer_close(struct timer *t);                /* disarms it */
/* When the earliest armed timer fires; 0 if none is armed. */
uint64_t timers_next(void);
/* Fires the timers due at `now` (a bounded number per call: the loop calls
 * again next round for the rest). */
void timers_fire(uint64_t now);

/* ---- listener.c -------------------------------------------------------------- */

/* A listening socket watched in its owner's epoll set (add, del: loop_add
 * and loop_del, or another set's), which can be paused and resumes itself. */
struct listener {
    struct loop_watch watch;  /* fd: the socket (its owner's); fn, arg: called when ready */
    int (*add)(struct loop_watch *, uint32_t);
    void (*del)(struct loop_watch *);
    bool watched;             /* in the epoll set */
    struct timer resume;      /* armed while paused for a while */
};
void listener_init(struct listener *l, int fd, void (*fn)(void *, uint32_t), void *arg,
                   int (*add)(struct loop_watch *, uint32_t), void (*del)(struct loop_watch *));
/* Watches it again now (a pause ends early); false if epoll refused. */
bool listener_resume(struct listener *l);
/* Stops watching it: for for_ns, then it resumes itself; 0: until
 * listener_resume. */
void listener_pause(struct listener *l, uint64_t for_ns);
/* Stops watching it for good; the socket is its owner's to close. */
void listener_close(struct listener *l);
/* One connection (non-blocking, close-on-exec), or -1 with errno (EAGAIN:
 * none waits). with_spare: out of descriptors, the spare one is given up
 * for it, and *used_spare says so: listener_spare_back() once that
 * connection is closed. */
int listener_accept(struct listener *l, bool with_spare, bool *used_spare);
/* Opens the spare descriptor (at start); -1 if it cannot. */
int listener_spare_take(void);
void listener_spare_back(void);
/* Whether an accept failed for want of descriptors or memory. */
bool listener_out_of_descriptors(int err);

/* ---- log.c ------------------------------------------------------------------ */

enum { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };
extern int log_level; /* set once by main before the loop starts */
void slog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* For anything a tenant or a client can cause: at most a few lines per
 * kind of message and tag (a tenant) every 10 s, then a count. */
void slog_limited(const void *tag, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A refusal (a memory cap, a limit, a protocol error), at warn: once per
 * minute per tag (a tenant) and cause (a short text), then a count. */
void slog_refusal(const void *tag, const char *cause, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Writes the counts of windows that ended; called every second. */
void log_flush(void);
int log_level_parse(const char *name); /* -1 if unknown */
const char *log_level_name(int level);

/* ---- options.c: options and limits (main.c sets them) -------------------------- */

/* --config-dir may be given this many times. */
#define CONFIG_DIRS_MAX 8

struct server_options {
    /* The configuration directories, absolute, in the order given: a
     * tenant name in two of them is the first one's. */
    const char *config_dirs[CONFIG_DIRS_MAX];
    unsigned nconfig_dirs;            /* 1 to CONFIG_DIRS_MAX */
    const char *config_dirs_text;     /* all of them, ", " between: for messages */
    const char *run_dir;              /* absolute */
    const char *cdi_dir;              /* absolute; "" disables the CDI spec */
    const char *shim_path;            /* absolute: the host's libgpuslice.so,
                                         mounted into containers */
    uint64_t grace_ns;
    uint64_t preempt_ns;       /* --preempt-ms */
    unsigned max_clients;             /* connections, all tenants together */
    unsigned max_clients_per_tenant;
    unsigned max_devices;             /* GPUs known at once */
    unsigned max_devices_per_tenant;  /* GPUs one tenant's processes may declare */
    uint64_t device_linger_ns;        /* a GPU nobody uses is forgotten after this */
    unsigned client_buffer;           /* bytes of messages queued to one client */
    unsigned long nofile;             /* RLIMIT_NOFILE after raising it */
    const char *metrics_addr;         /* ADDR:PORT of /metrics; "" = none */
    const char *nvidia_dir;           /* the driver's /proc/driver/nvidia */
    unsigned nvidia_major;            /* its device nodes' major number (195) */
    int verify_gpus;                  /* enum verify_gpus */
    int64_t clock_offset_ns;          /* CLOCK_MONOTONIC here minus the protocol's
                                         (a time namespace's offset) */
    enum on_server_down on_server_down; /* ON_DOWN_WAIT or ON_DOWN_OPEN: the
                                         tenants' default (--on-server-down) */
    const char *hostname;             /* the Hostname label of /metrics; "" none */
    const char *pod_log_dir;          /* the kubelet's /var/log/containers; "" none */
};
extern struct server_options options; /* set by main before the loop starts */

/* Whether a declared GPU is checked against the process's device nodes:
 * AUTO, where the driver's list of GPUs exists (options.nvidia_dir/gpus). */
enum verify_gpus { VERIFY_GPUS_AUTO, VERIFY_GPUS_ON, VERIFY_GPUS_OFF };

/* ---- config.c, config_file.c --------------------------------------------------- */

#define CONFIG_MAX_BYTES 65536

const char *config_gang_name(enum gang_mode g);
/* "wait" or "open" (ON_DOWN_DEFAULT: "default"); the word the policy
 * file holds. */
/* "batch" or "latency". */
const char *config_class_name(enum tenant_class c);
const char *config_on_server_down_name(enum on_server_down p);

/* Parses the text of one tenant file (len bytes, not NUL-terminated). On
 * failure returns -1 and puts "PATH:LINE: reason" in err. */
int config_parse_text(const char *text, size_t len, const char *path, struct tenant_config *out, char *err,
                      size_t errlen);
/* A tenant file's key: its name, an example value, and what it means. */
struct config_key {
    const char *name;
    const char *example;
    const char *text;
};
/* Every key the parser knows, in its order (read-only). */
extern const struct config_key config_keys[];
extern const unsigned config_nkeys;
/* "share, limit, ...LAST_SEPpreempt_ms" into out (truncated to outlen);
 * the length it needs, as snprintf. */
size_t config_key_list(char *out, size_t outlen, const char *last_sep);
/* Whether a file name (without .conf) is a valid tenant name. */
bool config_valid_name(const char *name);
/* Reads FILE in the directory dir_fd (a regular file, or a symlink to one,
 * at most CONFIG_MAX_BYTES) and parses it; never blocks on a FIFO or a
 * device. path is FILE's name for messages. 0, or CONFIG_BAD with a
 * message in err, or CONFIG_MISSING if there is no such file. */
#define CONFIG_BAD (-1)
#define CONFIG_MISSING (-2)
int config_read_file(int dir_fd, const char *file, const char *path, struct tenant_config *out, char *err,
                     size_t errlen);

/* ---- confwatch.c ------------------------------------------------------------- */

int confwatch_open(void);
/* Follows each configuration directory whose path now leads elsewhere (a
 * swapped symlink), and rereads it then; every second. */
void confwatch_check(void);
/* SIGHUP: follows every directory as confwatch_check does, then rereads
 * them all. */
void confwatch_reload(void);
void confwatch_close(void);

/* ---- rundir.c ----------------------------------------------------------------- */

/* Opens RUN_DIR and RUN_DIR/tenants (created if missing). */
int rundir_open(void);
/* Takes RUN_DIR/server.lock for the server's life (runlock.c); -1,
 * logged with the PID of the server that holds it, if another has it. */
int rundir_lock(void);
void rundir_close(void);
/* RUN_DIR/tenants/NAME, created if missing; never a symlink. A new
 * descriptor, -1 on error. */
int rundir_tenant_dir(const char *name);
/* RUN_DIR/.clients marks that processes connected to a server of this run
 * directory (and may hold memory it counted) and were not all gone when it
 * stopped: the next server waits for them to declare before leasing. */
bool rundir_clients_marked(void);
void rundir_mark_clients(bool mark);
/* RUN_DIR, for the admin socket (the server's descriptor: do not close). */
int rundir_admin_dir(void);
/* RUN_DIR/NAME, a directory of the server's own (never a tenant's),
 * created if missing with the given mode; never a symlink. A new
 * descriptor, -1 on error. */
int rundir_server_dir(const char *name, mode_t mode);

/* Writes text to NAME in dir_fd: a new file .NAME.tmp (O_EXCL, O_NOFOLLOW,
 * the mode given), fsync'ed and renamed over NAME, so that a reader sees the
 * old text or the new, never half, and nothing at either name is followed.
 * -1 with errno on failure (nothing left behind). */
int rundir_write_file(int dir_fd, const char *name, const char *text, mode_t mode);

/* A listening socket bound at a name in a directory, and what the name
 * pointed to when it was bound, so that only that is ever removed. */
struct bound_socket {
    int fd;
    dev_t dev;
    ino_t ino;
};
/* Binds and listens on NAME in dir_fd with the given mode from the start
 * (no chmod), replacing whatever was at NAME (never following it). */
int rundir_listen(int dir_fd, const char *name, mode_t mode, int backlog, struct bound_socket *out);
/* Closes the socket and removes NAME if it is still that socket. */
void rundir_unlisten(int dir_fd, const char *name, struct bound_socket *s);

/* ---- runlock.c: one server per run directory ---------------------------------- */

#define RUNLOCK_NAME "server.lock"
/* Opens (creates) RUN_DIR/server.lock in run_fd; -1 with errno. */
int runlock_open(int run_fd);
/* Locks it without waiting: 0 taken, 1 another process holds it, -1 error. */
int runlock_take(int fd);
/* Writes this process's PID into the lock file it holds. */
void runlock_mark(int fd);
/* The PID of the process holding the lock on fd (0 if unknown). */
long runlock_holder(int fd);
/* Whether a server holds RUN_DIR/server.lock of run_dir now (its PID in
 * *pid, 0 if unknown), read without touching the lock. */
int runlock_held_at(const char *run_dir, long *pid);

/* ---- uninstall.c -------------------------------------------------------------------- */

/* gpuslice-server --uninstall: returns the exit status. */
int uninstall_run(const char *install_dir);

/* ---- usage.c ------------------------------------------------------------------ */

/* A token bucket: at most `rate` answers a second, `burst` at once. */
struct usage_bucket {
    double tokens;
    uint64_t at;             /* when tokens was last brought up to date; 0: full */
};

struct client;
/* Answers USAGE_QUERY from c (USAGE, or LIMITED past the rate limits). */
void usage_answer(struct client *c, const struct gs_msg_usage_query *q);
/* The inode of the PID namespace of pid (in the server's), 0 if unknown. */
uint64_t usage_pid_namespace(uint32_t pid);

/* ---- tenants.c ------------------------------------------------------------- */

struct tenant {
    char name[GS_NAME_MAX];
    struct sched_tenant sched; /* its configuration and what the scheduler counts */
    uint64_t id;             /* increasing: the order of the status */
    struct bound_socket sock;/* fd -1 while it has no socket */
    struct listener listener;/* its socket's; paused by a limit (accept.c) */
    unsigned dir;            /* the index in options.config_dirs of the
                                directory whose file configures it */
    bool seen;               /* reload bookkeeping: its file was found in
                                the pass over its directory */
    unsigned clash_logged;   /* bit per directory: that directory's file of
                                the same name was reported as ignored (the
                                tenant is an earlier directory's) */
    bool policy_written;     /* its policy file is up to date (else retried
                                every second) */
    unsigned clients;
    struct client *members;  /* its clients (client.member_next) */
    uint64_t read_round;     /* the loop round read_count counts in */
    unsigned read_count;     /* messages of its clients handled in that round */
    struct usage_bucket usage_bucket; /* USAGE answers, all its clients (usage.c) */
    struct tenant *next;
};

extern struct tenant *tenants; /* every configured tenant, oldest first (tables.c) */
extern unsigned ntenants;

int tenants_load(void);      /* at start: fails if the directories are unusable */
void tenants_scan(void);     /* every directory: SIGHUP */
/* Directory dir (an index in options.config_dirs) only: a change inotify
 * cannot narrow down, or the path leads to another directory now. */
void tenants_scan_dir(unsigned dir);
/* The file NAME.conf in directory dir changed, appeared or went away. */
void tenants_file_changed(unsigned dir, const char *name);
/* Gives a socket, and its policy file, to tenants that could not get
 * them yet; every second. */
void tenants_retry_listen(void);
void tenants_close_all(void);
struct tenant *tenant_find(const char *name);

/* ---- peers.c ---------------------------------------------------------------- */

#define PEER_CONTAINER_ID_MAX 65   /* 64 hex digits and the NUL */
#define PEER_POD_UID_MAX 37

/* A client as the kernel sees it. */
struct peer {
    uint32_t pid;                            /* in the server's PID namespace; 0 if unknown */
    uint32_t uid;
    char container_id[PEER_CONTAINER_ID_MAX]; /* "" outside a container */
    char pod_uid[PEER_POD_UID_MAX];           /* "" outside a Kubernetes pod */
};

/* Fills p for the connected socket fd: SO_PEERCRED, then /proc/PID/cgroup. */
void peer_identify(int fd, struct peer *p);
/* Finds the container ID and pod UID in the text of a /proc/PID/cgroup. */
void peer_parse_cgroup(const char *text, struct peer *p);

/* ---- pod_names.c ------------------------------------------------------------------ */

#define POD_NAMES_MAX 400
/* The namespace, pod and container names of a container ID, from the
 * names of the kubelet's links in options.pod_log_dir; false if unknown.
 * The strings are valid until the next call. */
bool pod_names_of(const char *container_id, const char **ns, const char **pod, const char **container, uint64_t now);

/* ---- nvidia_gpus.c ------------------------------------------------------------ */

/* The GPU's index as nvidia-smi and dcgm-exporter number it (PCI bus
 * order), from options.nvidia_dir/gpus/{*}/information; -1 if unknown.
 * The directory is read again at most every 10 s. */
int gpu_index_of(const uint8_t uuid[16], uint64_t now);
/* The minor number N of the GPU's /dev/nvidiaN; -1 if the driver does not
 * list the UUID (read again first if it was not read at `now`). */
int gpu_minor_of(const uint8_t uuid[16], uint64_t now);
/* Whether the driver's list of GPUs exists on this node. */
bool nvidia_gpus_known(uint64_t now);
/* The GPU's model as the driver names it ("" if unknown): dcgm-exporter's
 * modelName label. Valid until the next call. */
const char *gpu_model_of(const uint8_t uuid[16], uint64_t now);

/* ---- gpu_access.c ------------------------------------------------------------- */

/* Whether the client that declared the GPU uuid, passing node_fd (-1:
 * none), may use it: the driver lists the GPU, and node_fd is an open
 * descriptor of its device node (character device 195:N, N the minor the
 * driver lists), which the kernel let the process open: a container's
 * device cgroup allows only the GPUs it was given, whatever nodes it makes.
 * True when checks are off (options.verify_gpus, or AUTO on a node without
 * the driver's list). Else false with a reason in why. */
bool gpu_access_allowed(int node_fd, const uint8_t uuid[16], uint64_t now, char *why, size_t whylen);
/* Whether declarations are checked (for the start-up log). */
bool gpu_access_checked(uint64_t now);

/* ---- accept.c --------------------------------------------------------------- */

int accept_init(void);
/* The tenant's socket is readable: accepts what the limits allow. */
void accept_tenant(struct tenant *t);
/* How many connections all tenants together may have now. */
unsigned long accept_client_budget(void);

/* ---- clients.c ------------------------------------------------------------- */

struct device;

struct client {
    int fd;
    struct loop_watch watch;
    struct tenant *tenant;
    uint32_t pid;            /* the host's PID (peer.pid), else the one HELLO gave */
    struct peer peer;
    bool greeted;
    bool closing;            /* dropped; closed at its next event */
    uint64_t connected_ns;
    uint32_t hello_pid;      /* the PID its HELLO gave: its own, in its namespace */
    uint64_t pidns;          /* its PID namespace's inode, 0 if unknown (usage.c) */
    struct usage_bucket usage_bucket; /* its USAGE answers (usage.c) */
    /* Notices (client_notify) that waited for room, the latest per slot. */
    struct gs_msg_grant notices[GS_MAX_DEVICES];
    uint32_t notices_waiting;  /* bit per slot */
    bool watching_room;        /* EPOLLOUT watched for them */
    struct sched_slot slots[GS_MAX_DEVICES];  /* by the protocol's slot number:
                                                 its GPU and what the scheduler
                                                 keeps of it */
    struct client *next;
    struct client *member_next, **member_prev; /* in tenant->members */
};

extern struct client *clients; /* (tables.c) */
extern unsigned nclients;    /* connections, all tenants */

/* Takes a connection accepted on t's socket; closes it on failure. */
void client_add(struct tenant *t, int fd);
/* Closes a client now, first sending ERROR(reason) if reason is not NULL. */
void client_close(struct client *c, const char *reason);
/* Closes connections that never said HELLO; called every second. */
void clients_sweep(void);

/* ---- client_messages.c ------------------------------------------------------- */

/* What one decoded message of c does (sent_ns: when c queued it; passed:
 * a descriptor that came with it, -1 none, which the caller closes). */
void client_message(struct client *c, const struct gs_msg *msg, uint64_t sent_ns, int passed);

/* ---- client_out.c: what goes out to a client ---------------------------------- */

/* Drops a client for what it did: one (rate-limited) log line, ERROR(what),
 * and it is closed at its next event; safe while walking the clients. */
void client_drop(struct client *c, const char *what);
/* Sends one message. A client whose buffer is full (it does not read) is
 * dropped: marked closing and closed at its next event. */
int client_send(struct client *c, const struct gs_msg *msg);
/* Sends a GRANT the scheduler sends unasked, for a new bound alone
 * (sched_action.notice): only while the client's socket is writable, else
 * it waits for room, the latest per slot, and a client slow to read it is
 * not dropped for it. A GRANT or REVOKE of the slot sent meanwhile
 * replaces it. */
void client_notify(struct client *c, const struct gs_msg *msg);
/* Logs a lease refused at the tenant's cap (once a minute per tenant):
 * what the process lacked beyond its headroom (need: not the
 * application's size, which only the shim knows and logs), the cap and
 * the tenant's count. */
void client_memory_refused(const struct client *c, const struct sched_slot *slot, uint64_t need, uint64_t cap,
                           uint64_t used);
/* Logs (once a minute per tenant) that the tenant's memory cap is more than
 * the GPU uuid has, as the client's driver reported it (total). */
void client_cap_above_memory(const struct client *c, const uint8_t uuid[16], uint64_t cap, uint64_t total);
/* Sends the notices that wait and there is room for (the client's socket
 * became writable); watches for room while any still waits. */
void client_send_waiting_notices(struct client *c);

/* ---- devices.c ---------------------------------------------------------------- */

/* Declares slot of c to be the GPU uuid, within the limits, node_fd (-1
 * none) the descriptor of its device node that came with the DEVICE;
 * gives back what the slot named before. NULL (with a reason) if the
 * limits or the check of access refuse it. */
struct device *device_declare(struct client *c, int slot, const uint8_t uuid[16], int node_fd, const char **why);
/* The slot no longer names its device (it declares another; lives_on:
 * its process keeps what it holds counted until it declares again or
 * exits). */
void device_undeclare(struct client *c, int slot, bool lives_on);
/* c is gone: all its slots name their GPUs no more, in one scheduler step
 * (lives_on: its process keeps its memory counted). */
void devices_client_gone(struct client *c, bool lives_on);
/* Whether process pid lives on: it exists and is neither a zombie nor
 * exiting (a process whose exit closed its connection holds no device
 * memory any more). process_lives.c. */
bool process_lives(pid_t pid);
/* Whether the task whose /proc stat file fd is open on lives: false for a
 * zombie, an exiting task, or one reaped since fd was opened. */
bool task_stat_lives(int fd);
/* Lets go of the memory counted for processes that exited without a
 * connection (memory.c's ghosts); every second. */
void devices_check_ghosts(void);
/* Frees devices nobody has used for the linger time; every second. */
void devices_sweep(void);
/* Frees every device (shutdown). */
void devices_free_all(void);

/* ---- dispatch.c: the scheduler's driver ---------------------------------------- */

/* The server's scheduler state (sched.h): its GPUs, in server_sched.devices.
 * Owned by the loop's thread; changed only by sched_run and the GPUs made
 * and freed below (for devices.c). */
extern struct sched server_sched;
/* Runs one scheduler step at now_ns() and carries out its actions: sends,
 * timers, drops, log lines. Never re-entered: what the actions do (a send
 * that fails marks a client for closing) comes back as later events. */
void sched_run(const struct sched_event *ev);
/* A new GPU, known to the scheduler, with its timer; NULL if out of
 * memory. */
struct device *dispatch_device_new(const uint8_t uuid[16]);
/* Forgets a GPU nobody uses (sched_device_unused) and frees it. */
void dispatch_device_free(struct device *d);

/* ---- cdi.c ------------------------------------------------------------------- */

/* Writes RUN_DIR/cdi/ld.so.preload; -1 (logged) if it cannot. */
int cdi_init(void);
/* Rewrites the CDI spec if the set of tenants changed (or removes it when
 * there is none); failures are logged. */
void cdi_update(void);
/* Tries again if the last update failed; every second. */
void cdi_retry(void);
/* Removes the spec if it is this run directory's (no tenant left). */
void cdi_remove(void);
/* Forgets the spec at shutdown, leaving it for the next server. */
void cdi_close(void);

/* ---- status.c ------------------------------------------------------------------ */

struct text {
    char *data;
    size_t len, cap;
    bool failed;             /* out of memory: the text is incomplete */
};
void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void text_free(struct text *t);

/* Where a report being written has got to. Devices and tenants are written
 * in id order, so removals in between never make it skip or repeat one. */
struct status_cursor {
    enum gs_status_format format;
    int part;                /* header, devices, middle, tenants, processes'
                                header, processes (tables), tail, done */
    uint64_t last_id;        /* of the last device or tenant written */
    const void *last;        /* that device or tenant, valid while removals
                                has not changed: a shortcut to the next */
    uint64_t removals;
    size_t count;            /* entries written in this part */
};
/* Counts tenants and devices freed (so that a cursor's pointer is known
 * to be still valid when it has not changed); tables.c, the loop's thread
 * only. */
extern uint64_t removals;
void status_begin(struct status_cursor *cur, enum gs_status_format format);
/* The achieved share the status, top and /metrics show: the GPU's time
 * the entry held over the 10 s before the last refresh
 * (device_tenant_recent_share then), or now if it is newer. */
double status_achieved_share(const struct device *d, const struct device_tenant *dt, uint64_t now);
/* Takes every entry's achieved share at now; every second. */
void status_shares_refresh(uint64_t now);
/* Appends the next entries to out until it has grown by at least `budget`
 * bytes or the report is complete; returns true once it is complete. */
bool status_next(struct status_cursor *cur, struct text *out, size_t budget);

/* ---- admin.c ------------------------------------------------------------------- */

int admin_open(void);
/* Drops admin connections that said nothing in time; every second. */
void admin_sweep(void);
void admin_close(void);

#endif
