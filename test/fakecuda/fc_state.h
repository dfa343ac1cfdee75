/*
 * fakecuda shared state: the layout of the FAKECUDA_STATE file that every
 * process of one simulated machine maps, and the operations on it.
 *
 * The file holds:
 *   - the simulated devices: total and used memory, UUID, and the engine,
 *     a FIFO ticket lock that lets one kernel run on a device at a time
 *     across all processes;
 *   - one slot per process: its pid, start time (to tell a reused pid
 *     apart), device memory held and the meter (busy ns and kernel count
 *     per device).
 *
 * Locking: `lock` is a robust, process-shared mutex guarding device memory
 * counters and slot ownership. The engine uses atomics and futexes on the
 * ticket words; the meter counters are atomics written only by the engine
 * holder. A process that dies holding `lock` is recovered through
 * EOWNERDEAD; one that dies holding the engine is skipped by the waiters.
 */
#ifndef FAKECUDA_STATE_H
#define FAKECUDA_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define FC_STATE_MAGIC 0x66616b6563756461ULL /* "fakecuda" */
#define FC_STATE_VERSION 1
#define FC_MAX_DEVICES 16
#define FC_MAX_PROCS 256
#define FC_TICKET_RING 256

struct fc_device_state {
    uint64_t total_mem;
    uint64_t used_mem;                     /* guarded by lock */
    uint8_t uuid[16];
    _Atomic uint64_t busy_ns;              /* meter, whole device */
    _Atomic uint64_t kernels;
    /* Engine: tickets are taken in arrival order; `serving` is the futex
     * word the waiters sleep on. */
    _Atomic uint32_t next_ticket;
    _Atomic uint32_t serving;
    _Atomic int32_t holder_slot;           /* -1 when idle */
    _Atomic int32_t last_slot;             /* for the context-switch cost */
    _Atomic uint64_t busy_until;           /* when the running kernel ends */
    _Atomic int32_t waiter_slot[FC_TICKET_RING]; /* slot+1 per ticket, 0 = unknown */
};

struct fc_proc_slot {
    int32_t pid;                           /* 0 = never used; guarded by lock */
    int32_t alive;                         /* guarded by lock */
    uint64_t start_time;                   /* /proc/PID/stat field 22 */
    uint64_t mem_used[FC_MAX_DEVICES];     /* guarded by lock */
    uint64_t mem_peak[FC_MAX_DEVICES];     /* guarded by lock */
    _Atomic uint64_t busy_ns[FC_MAX_DEVICES];
    _Atomic uint64_t kernels[FC_MAX_DEVICES];
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
};

/* Maps (creating and sizing if needed) the state file. With path NULL the
 * state is private to this process. Returns NULL with a message in err. */
struct fc_shared *fc_state_open(const char *path, int ndevices, uint64_t mem_per_device,
                                char *err, size_t errlen);
void fc_state_lock(struct fc_shared *s);
void fc_state_unlock(struct fc_shared *s);

/* Claims a slot for this process (lock must not be held). Returns its index
 * or -1 when every slot belongs to a live process. */
int fc_state_register(struct fc_shared *s, pid_t pid);
/* Returns dead processes' memory to their devices. Caller holds lock. */
void fc_state_reap_locked(struct fc_shared *s);
/* Whether a slot's process still runs (not exited, not a zombie, not a
 * reused pid). */
bool fc_slot_alive(const struct fc_proc_slot *slot);
uint64_t fc_proc_start_time(pid_t pid);

/* Engine: one kernel at a time per device, across processes, FIFO. */
uint32_t fc_engine_acquire(struct fc_shared *s, int dev, int slot);
void fc_engine_release(struct fc_shared *s, int dev, uint32_t ticket);
/* Announces when the holder's current kernel ends, so that the next waiter
 * can be awake for the handover as a hardware scheduler would be. */
void fc_engine_busy_until(struct fc_shared *s, int dev, uint64_t end_ns);
/* Whether another context waits for the engine the caller holds. */
bool fc_engine_contended(struct fc_shared *s, int dev, uint32_t ticket);

/* Zeroes the meter (busy time and kernel counts). */
void fc_state_reset_meter(struct fc_shared *s);

#endif
