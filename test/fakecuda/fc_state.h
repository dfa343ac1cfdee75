/*
 * fakecuda shared state: the layout of the FAKECUDA_STATE file that every
 * process of one simulated machine maps, and the operations on it.
 *
 * The file holds:
 *   - the simulated devices: total and used memory, UUID, and two engines,
 *     FIFO ticket locks that let one kernel (the compute engine) and one
 *     copy (the copy engine) run on a device at a time across processes;
 *   - one slot per process: a random 128-bit id, its pid (for display: the
 *     pid in the process's own PID namespace), device memory held and the
 *     meter (busy ns and counts of kernels and copies per device);
 *   - the collective table: one entry per collective (group key, sequence
 *     number) in progress, with the ranks that have started on their
 *     devices (fc_collective.c).
 *
 * Process identity: a pid means nothing across PID namespaces (two
 * containers both have a pid 1), so a process proves that it is alive by an
 * open file description lock (fcntl F_OFD_SETLK) on byte FC_LIVENESS_BASE +
 * its slot index of the state file. The kernel drops the lock when the
 * process dies, in whatever namespace it ran; a reaper finds the byte free.
 *
 * Locking: `lock` is a robust, process-shared mutex guarding device memory
 * counters, slot ownership and the collective table (but for its futex
 * words). The engines use atomics and futexes on the
 * ticket words; the meter counters are atomics written only by an engine
 * holder. A process that dies holding `lock` is recovered through
 * EOWNERDEAD; one that dies holding an engine is skipped by the waiters.
 */
#ifndef FAKECUDA_STATE_H
#define FAKECUDA_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define FC_STATE_MAGIC 0x66616b6563756461ULL /* "fakecuda" */
#define FC_STATE_VERSION 4
#define FC_MAX_DEVICES 16
#define FC_MAX_PROCS 256
#define FC_TICKET_RING 256
#define FC_MAX_COLLECTIVES 256
#define FC_COLLECTIVE_MAX_RANKS 64
/* Offset of slot 0's liveness byte in the state file (past its end: a lock
 * needs no data there). */
#define FC_LIVENESS_BASE (1ll << 30)

/* A FIFO ticket lock across processes. `serving` is the futex word the
 * waiters sleep on. */
struct fc_engine {
    _Atomic uint32_t next_ticket;
    _Atomic uint32_t serving;
    _Atomic int32_t holder_slot;           /* -1 when idle */
    _Atomic int32_t last_slot;             /* for the context-switch cost */
    _Atomic uint64_t busy_until;           /* when the running work ends */
    _Atomic uint64_t free_since;           /* when the last holder's work ended */
    _Atomic int32_t waiter_slot[FC_TICKET_RING]; /* slot+1 per ticket, 0 = unknown */
};

struct fc_device_state {
    uint64_t total_mem;
    uint64_t used_mem;                     /* guarded by lock */
    uint8_t uuid[16];
    _Atomic uint64_t busy_ns;              /* meter, compute engine */
    _Atomic uint64_t kernels;
    _Atomic uint64_t copy_busy_ns;         /* meter, copy engine */
    _Atomic uint64_t copies;
    _Atomic uint64_t copy_bytes;
    struct fc_engine compute;
    struct fc_engine copy;
};

struct fc_proc_slot {
    uint8_t id[16];                        /* random; all zero = never used; guarded by lock */
    int32_t pid;                           /* display only; guarded by lock */
    int32_t alive;                         /* guarded by lock */
    uint64_t pidns;                        /* inode of its PID namespace; guarded by lock */
    uint64_t start_time;                   /* /proc/PID/stat field 22; guarded by lock */
    uint64_t mem_used[FC_MAX_DEVICES];     /* guarded by lock */
    uint64_t mem_peak[FC_MAX_DEVICES];     /* guarded by lock */
    _Atomic uint64_t busy_ns[FC_MAX_DEVICES];
    _Atomic uint64_t kernels[FC_MAX_DEVICES];
    _Atomic uint64_t copy_busy_ns[FC_MAX_DEVICES];
    _Atomic uint64_t copies[FC_MAX_DEVICES];
};

/* One collective in progress: the ranks of (group, seq) that have started
 * on their devices. A waiting rank sleeps on `started` (a futex word) until
 * it reaches nranks. Every field but the two atomics is guarded by lock. */
struct fc_collective_entry {
    _Atomic uint32_t started;              /* ranks started: popcount of mask */
    _Atomic uint32_t generation;           /* bumped each time the entry is claimed */
    uint32_t nranks;
    uint32_t reserved;
    uint64_t group;                        /* 0 = free */
    uint64_t seq;
    uint64_t mask;                         /* bit r: rank r has started */
    uint64_t departed;                     /* bit r: rank r is done waiting */
    uint64_t touched_ns;                   /* CLOCK_MONOTONIC of the last change */
    int16_t owner_slot[FC_COLLECTIVE_MAX_RANKS]; /* the process slot that started rank r */
    uint64_t owner_tag[FC_COLLECTIVE_MAX_RANKS]; /* its id's first 8 bytes (slots are reused) */
};

struct fc_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t ndevices;
    uint64_t size;                         /* sizeof(struct fc_shared) */
    uint64_t created_ns;                   /* CLOCK_MONOTONIC */
    _Atomic uint64_t reset_ns;             /* last meter reset */
    pthread_mutex_t lock;
    struct fc_device_state dev[FC_MAX_DEVICES];
    struct fc_proc_slot procs[FC_MAX_PROCS];
    struct fc_collective_entry coll[FC_MAX_COLLECTIVES];
};

/* Maps (creating and sizing if needed) the state file. With path NULL the
 * state is private to this process and its forked children. Returns NULL
 * with a message in err. The file stays open: its locks are this process's
 * proof of life. */
struct fc_shared *fc_state_open(const char *path, int ndevices, uint64_t mem_per_device,
                                char *err, size_t errlen);
void fc_state_lock(struct fc_shared *s);
void fc_state_unlock(struct fc_shared *s);

/* Claims a slot for this process (lock must not be held): a fresh random
 * id and the liveness lock of the slot. Returns its index or -1 when every
 * slot belongs to a live process. */
int fc_state_register(struct fc_shared *s, pid_t pid);
/* In a forked child: lets go of the parent's liveness lock (the child
 * shares the parent's open file description) by reopening the state file.
 * The child registers again. Returns false if the file cannot be
 * reopened. */
bool fc_state_after_fork_child(void);
/* Returns dead processes' memory to their devices. Caller holds lock. */
void fc_state_reap_locked(struct fc_shared *s);
/* Whether the process of a slot still runs. Caller holds lock. */
bool fc_slot_alive(struct fc_shared *s, int slot);
uint64_t fc_proc_start_time(pid_t pid);
/* This process's PID namespace (the inode of /proc/self/ns/pid), 0 if
 * unknown. */
uint64_t fc_pid_namespace(void);

/* Engine: one piece of work at a time per device, across processes, FIFO.
 * fc_engine_acquire returns the ticket, and in *free_since_ns when the
 * engine's previous holder ended its work (CLOCK_MONOTONIC; the time the
 * line moved past a holder that died or stopped, if it was skipped).
 * fc_engine_release takes when the holder's work ended, which may be
 * earlier than the call. */
uint32_t fc_engine_acquire(struct fc_shared *s, struct fc_engine *e, int slot, uint64_t *free_since_ns);
void fc_engine_release(struct fc_engine *e, uint32_t ticket, uint64_t ended_ns);
/* Announces when the holder's current work ends: a waiter skips a stopped
 * holder only once that time is well past. */
void fc_engine_busy_until(struct fc_engine *e, uint64_t end_ns);
/* Whether another context waits for the engine the caller holds. */
bool fc_engine_contended(struct fc_engine *e, uint32_t ticket);

/* Zeroes the meter (busy time, kernel and copy counts). */
void fc_state_reset_meter(struct fc_shared *s);

#endif
