/*
 * gpuslice-server internals: the objects the server's files share.
 *
 *   loop.c     the epoll event loop and timers
 *   config.c   parsing one tenant file (tenants.d/NAME.conf)
 *   tenants.c  the set of tenants, their listening sockets, reloads
 *   clients.c  one connection per shim process: messages in and out
 *   sched.c    per-GPU time slices: who holds the GPU, who is next
 *   memory.c   per-GPU device memory of each tenant, against its cap
 *   status.c   the admin socket and the status report
 *   cdi.c      the CDI spec and the preload list containers get
 *   peers.c    who a client is: host PID, container and pod, from the kernel
 *   main.c     options, signals, start-up
 *
 * The server is single-threaded: every object here belongs to the loop's
 * thread, and nothing is locked.
 */
#ifndef GPUSLICE_SERVER_H
#define GPUSLICE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpuslice/protocol.h"

/* ---- loop.c -------------------------------------------------------------- */

typedef void (*loop_fn)(void *arg, uint32_t events);

struct loop_watch {
    int fd;
    loop_fn fn;
    void *arg;
};

int loop_init(void);
int loop_add(struct loop_watch *w, uint32_t events);
void loop_del(struct loop_watch *w);
/* Runs until loop_stop; returns 0, or -1 on an epoll failure. */
int loop_run(void);
void loop_stop(void);
uint64_t now_ns(void);

/* A one-shot timer on a timerfd. */
struct timer {
    struct loop_watch watch;
    void (*fn)(void *arg);
    void *arg;
};
int timer_init(struct timer *t, void (*fn)(void *), void *arg);
void timer_at(struct timer *t, uint64_t when_ns); /* 0 disarms */
void timer_close(struct timer *t);

/* ---- logging (main.c) ------------------------------------------------- */

enum { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };
extern int log_level;
void slog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- config.c ------------------------------------------------------------- */

struct tenant_config {
    double share;            /* > 0 */
    double limit;            /* (0, 1] */
    uint64_t quantum_ns;
    uint64_t memory;         /* bytes, 0 = no cap */
};

/* Parses one tenant file. On failure returns -1 and puts "FILE:LINE: reason"
 * in err. */
int config_parse_file(const char *path, struct tenant_config *out, char *err, size_t errlen);
/* Whether a file name (without .conf) is a valid tenant name. */
bool config_valid_name(const char *name);

/* ---- tenants.c ------------------------------------------------------------- */

struct tenant {
    char name[GS_NAME_MAX];
    struct tenant_config config;
    int listen_fd;
    struct loop_watch watch;
    char socket_path[4096];
    bool seen;               /* reload bookkeeping */
    struct tenant *next;
    unsigned clients;
};

extern struct tenant *tenants; /* every configured tenant */

struct server_options {
    const char *config_dir;
    const char *run_dir;
    const char *cdi_dir;     /* "" disables the CDI spec */
    const char *shim_path;   /* the host's libgpuslice.so, mounted into containers */
    uint64_t grace_ns;
    uint64_t idle_ns;
};
extern struct server_options options;

int tenants_load(void);      /* at start: fails if the directories are unusable */
void tenants_reload(void);   /* SIGHUP or inotify */
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

/* ---- clients.c ------------------------------------------------------------- */

struct device;

struct client {
    int fd;
    struct loop_watch watch;
    struct tenant *tenant;
    uint32_t pid;            /* the host's PID (peer.pid), else the one HELLO gave */
    struct peer peer;
    bool greeted;
    uint64_t connected_ns;
    struct device *devices[GS_MAX_DEVICES];  /* by the client's slot */
    bool wants[GS_MAX_DEVICES];               /* ACQUIRE outstanding */
    uint64_t holds[GS_MAX_DEVICES];           /* grant held, 0 = none */
    uint64_t mem_held[GS_MAX_DEVICES];        /* device memory counted for it */
    struct client *next;
};

extern struct client *clients;

void client_accept(struct tenant *t);
/* Closes a client, first sending ERROR(reason) if reason is not NULL. */
void client_close(struct client *c, const char *reason);
int client_send(struct client *c, const struct gs_msg *msg);
/* Closes connections that never said HELLO; called every second. */
void clients_sweep(void);
/* The client's slot for a device, or -1. */
int client_slot(const struct client *c, const struct device *d);

/* ---- sched.c ---------------------------------------------------------------- */

#define GS_OVERRUN_SAMPLES 1000

/* Per device, per tenant: that tenant's place in the device's schedule. */
struct device_tenant {
    struct tenant *tenant;
    double vtime;              /* virtual time: device time used / share */
    uint64_t eligible_at;      /* its limit: no grant before this */
    unsigned waiting;          /* clients waiting for a grant */
    uint64_t waiting_since;
    bool active;               /* waiting or holding */
    /* statistics */
    uint64_t slices, used_ns, wait_ns;
    uint64_t window_start[10], window_used[10]; /* one-second buckets */
    uint64_t mem_used, mem_peak, oom_refusals;  /* device memory, all its processes */
    uint64_t overruns[GS_OVERRUN_SAMPLES];      /* release - deadline (0 if before), last slices */
    size_t noverruns;
};

enum device_state { DEV_IDLE, DEV_RUNNING, DEV_REVOKING };

struct device {
    uint8_t uuid[16];
    enum device_state state;
    struct device_tenant *holder;
    uint64_t grant;            /* current grant id */
    uint64_t slice_start, deadline;
    uint64_t charged_until;    /* the holder is charged up to here */
    unsigned holders;          /* clients holding the current grant */
    struct device_tenant *tenants;
    size_t ntenants;
    struct timer timer;
    struct device *next;
    uint64_t slices, handoffs;
    uint64_t created_ns;
};

extern struct device *devices;

struct device *device_get(const uint8_t uuid[16]);
/* The tenant's entry on a device, created on first use; NULL if out of memory. */
struct device_tenant *device_tenant_get(struct device *d, struct tenant *t);
void sched_acquire(struct client *c, int slot);
void sched_release(struct client *c, int slot, uint64_t grant, bool more);
/* A client went away: drop its waits and holds everywhere. */
void sched_client_gone(struct client *c);
/* A tenant was removed or changed. */
void sched_tenant_gone(struct tenant *t);
double device_tenant_recent_share(const struct device *d, const struct device_tenant *dt, uint64_t now);
/* The 99th percentile of (release - deadline) over the last slices, in ns;
 * a slice released before its deadline counts as 0. */
uint64_t device_tenant_overrun_p99(const struct device_tenant *dt);

/* ---- memory.c ----------------------------------------------------------------- */

void mem_handle(struct client *c, const struct gs_msg *msg);
/* A client went away: everything it held is the tenant's no longer. */
void mem_client_gone(struct client *c);

/* ---- cdi.c ------------------------------------------------------------------- */

/* Writes RUNDIR/cdi/ld.so.preload; -1 (logged) if it cannot. */
int cdi_init(void);
/* Rewrites the CDI spec if the set of tenants changed (or removes it when
 * there is none); failures are logged. */
void cdi_update(void);
/* Removes the spec this server wrote, at shutdown. */
void cdi_remove(void);

/* ---- status.c ----------------------------------------------------------------- */

int admin_open(void);
void admin_close(void);
/* Writes the status report as JSON into buf; returns its length. */
size_t status_json(char *buf, size_t cap);
/* The same report as a table for people. */
size_t status_table(char *buf, size_t cap);

#endif
