/*
 * fakecuda shared state: creating and mapping the FAKECUDA_STATE file,
 * process slots and reaping, and the per-device engine lock.
 * The layout and the locking rules are described in fc_state.h.
 */

#include "fc_state.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void state_init(struct fc_shared *s, int ndevices, uint64_t mem)
{
    memset(s, 0, sizeof *s);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s->lock, &attr);
    pthread_mutexattr_destroy(&attr);

    uint64_t seed = monotonic_ns() ^ ((uint64_t)getpid() << 32);
    for (int d = 0; d < ndevices; d++) {
        struct fc_device_state *dev = &s->dev[d];
        dev->total_mem = mem;
        for (int i = 0; i < 16; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            dev->uuid[i] = (uint8_t)(seed >> 56);
        }
        atomic_store(&dev->holder_slot, -1);
        atomic_store(&dev->last_slot, -1);
    }
    s->ndevices = (uint32_t)ndevices;
    s->version = FC_STATE_VERSION;
    s->size = sizeof *s;
    s->created_ns = monotonic_ns();
    atomic_store(&s->reset_ns, s->created_ns);
    /* The magic goes last: a reader that sees it sees a complete state. */
    atomic_thread_fence(memory_order_release);
    s->magic = FC_STATE_MAGIC;
}

struct fc_shared *fc_state_open(const char *path, int ndevices, uint64_t mem,
                                char *err, size_t errlen)
{
    if (ndevices < 1 || ndevices > FC_MAX_DEVICES) {
        snprintf(err, errlen, "FAKECUDA_DEVICES must be 1..%d", FC_MAX_DEVICES);
        return NULL;
    }
    if (!path) {
        struct fc_shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED) {
            snprintf(err, errlen, "mmap: %s", strerror(errno));
            return NULL;
        }
        state_init(s, ndevices, mem);
        return s;
    }

    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "open %s: %s", path, strerror(errno));
        return NULL;
    }
    /* flock serialises creation: the first process sizes and fills it. */
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            snprintf(err, errlen, "flock %s: %s", path, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "stat %s: %s", path, strerror(errno));
        goto fail;
    }
    bool fresh = st.st_size == 0;
    if (fresh && ftruncate(fd, (off_t)sizeof(struct fc_shared)) != 0) {
        snprintf(err, errlen, "ftruncate %s: %s", path, strerror(errno));
        goto fail;
    }
    if (!fresh && (uint64_t)st.st_size != sizeof(struct fc_shared)) {
        snprintf(err, errlen, "%s is not a fakecuda state file of this version "
                 "(size %lld); remove it", path, (long long)st.st_size);
        goto fail;
    }
    struct fc_shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) {
        snprintf(err, errlen, "mmap %s: %s", path, strerror(errno));
        goto fail;
    }
    if (fresh)
        state_init(s, ndevices, mem);
    else if (s->magic != FC_STATE_MAGIC || s->version != FC_STATE_VERSION ||
             s->size != sizeof *s) {
        snprintf(err, errlen, "%s is not a fakecuda state file of this version; remove it", path);
        munmap(s, sizeof *s);
        goto fail;
    }
    flock(fd, LOCK_UN);
    close(fd);
    return s;
fail:
    flock(fd, LOCK_UN);
    close(fd);
    return NULL;
}

void fc_state_lock(struct fc_shared *s)
{
    int rc = pthread_mutex_lock(&s->lock);
    if (rc == EOWNERDEAD) {
        /* The holder died mid-update. Counters it was changing are
         * recomputed by the next reap of its slot; the lock itself is
         * usable again. */
        pthread_mutex_consistent(&s->lock);
    }
}

void fc_state_unlock(struct fc_shared *s)
{
    pthread_mutex_unlock(&s->lock);
}

/* Reads /proc/PID/stat: the state letter and the start time (field 22).
 * Returns 0 when the process is gone. */
static uint64_t proc_stat(pid_t pid, char *state_out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: skip to the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    char state = p[2];
    if (state_out)
        *state_out = state;
    if (state == 'Z' || state == 'X')
        return 0;
    /* Field 3 is the state; the start time is field 22. */
    int field = 3;
    for (p += 2; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    unsigned long long start = 0;
    if (sscanf(p, "%llu", &start) != 1)
        return 0;
    return start ? start : 1;
}

uint64_t fc_proc_start_time(pid_t pid)
{
    return proc_stat(pid, NULL);
}

/* Whether a slot's process is stopped (SIGSTOP, a debugger). */
static bool slot_stopped(const struct fc_proc_slot *slot)
{
    char state = 0;
    return proc_stat(slot->pid, &state) == slot->start_time && (state == 'T' || state == 't');
}

bool fc_slot_alive(const struct fc_proc_slot *slot)
{
    if (slot->pid <= 0 || !slot->alive)
        return false;
    if (kill(slot->pid, 0) != 0 && errno == ESRCH)
        return false;
    return fc_proc_start_time(slot->pid) == slot->start_time;
}

void fc_state_reap_locked(struct fc_shared *s)
{
    for (int i = 0; i < FC_MAX_PROCS; i++) {
        struct fc_proc_slot *slot = &s->procs[i];
        if (!slot->alive || fc_slot_alive(slot))
            continue;
        for (uint32_t d = 0; d < s->ndevices; d++) {
            uint64_t held = slot->mem_used[d];
            s->dev[d].used_mem = held > s->dev[d].used_mem ? 0 : s->dev[d].used_mem - held;
            slot->mem_used[d] = 0;
        }
        slot->alive = 0;
    }
}

int fc_state_register(struct fc_shared *s, pid_t pid)
{
    uint64_t start = fc_proc_start_time(pid);
    fc_state_lock(s);
    fc_state_reap_locked(s);
    /* Prefer a never-used slot so that the meter keeps dead processes'
     * figures as long as possible; then the oldest dead one. */
    int pick = -1;
    for (int i = 0; i < FC_MAX_PROCS && pick < 0; i++)
        if (s->procs[i].pid == 0)
            pick = i;
    for (int i = 0; i < FC_MAX_PROCS && pick < 0; i++)
        if (!s->procs[i].alive)
            pick = i;
    if (pick >= 0) {
        struct fc_proc_slot *slot = &s->procs[pick];
        memset(slot, 0, sizeof *slot);
        slot->pid = (int32_t)pid;
        slot->start_time = start;
        slot->alive = 1;
    }
    fc_state_unlock(s);
    return pick;
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

/* Skips the ticket being served if its owner died: a waiter calls this when
 * the line has not moved for a while. */
static void engine_skip_dead(struct fc_shared *s, int dev, uint32_t serving, uint64_t *stalled_since)
{
    struct fc_device_state *d = &s->dev[dev];
    int32_t owner = atomic_load(&d->waiter_slot[serving % FC_TICKET_RING]);
    bool dead;
    if (owner == 0) {
        /* The ticket was taken but its owner's slot was never written:
         * it died between the two steps. Give it a second. */
        if (*stalled_since == 0)
            *stalled_since = monotonic_ns();
        dead = monotonic_ns() - *stalled_since > 1000000000ull;
    } else {
        /* A stopped process's kernel still ends on a real GPU: once its
         * time is up, the engine moves on without it. */
        uint64_t until = atomic_load(&d->busy_until);
        fc_state_lock(s);
        const struct fc_proc_slot *slot = &s->procs[owner - 1];
        dead = !fc_slot_alive(slot) || (monotonic_ns() > until + 5000000ull && slot_stopped(slot));
        fc_state_unlock(s);
    }
    if (!dead)
        return;
    uint32_t expected = serving;
    atomic_store(&d->waiter_slot[serving % FC_TICKET_RING], 0);
    if (atomic_compare_exchange_strong(&d->serving, &expected, serving + 1)) {
        atomic_store(&d->holder_slot, -1);
        futex(&d->serving, FUTEX_WAKE, INT_MAX, NULL);
    }
    *stalled_since = 0;
}

uint32_t fc_engine_acquire(struct fc_shared *s, int dev, int slot)
{
    struct fc_device_state *d = &s->dev[dev];
    uint32_t ticket = atomic_fetch_add(&d->next_ticket, 1);
    atomic_store(&d->waiter_slot[ticket % FC_TICKET_RING], slot + 1);
    uint64_t stalled_since = 0;
    for (;;) {
        uint32_t serving = atomic_load(&d->serving);
        if (serving == ticket)
            break;
        if ((int32_t)(serving - ticket) > 0) {
            /* Skipped while this process was stopped: queue again. */
            ticket = atomic_fetch_add(&d->next_ticket, 1);
            atomic_store(&d->waiter_slot[ticket % FC_TICKET_RING], slot + 1);
            continue;
        }
        /* Next in line and the running kernel ends within 100 us: stay
         * awake for the handover instead of paying a futex wake-up. */
        uint64_t now = monotonic_ns(), until = atomic_load(&d->busy_until);
        bool next = serving + 1 == ticket;
        if (next && until <= now + 100000 && until + 1000000 > now) {
            sched_yield();
            continue;
        }
        uint64_t wait_ns = 5 * 1000 * 1000; /* how soon a dead holder is noticed */
        if (next && until > now + 100000 && until - now - 100000 < wait_ns)
            wait_ns = until - now - 100000;
        struct timespec timeout = {0, (long)wait_ns};
        long rc = futex(&d->serving, FUTEX_WAIT, serving, &timeout);
        if (next && rc != 0 && errno == ETIMEDOUT && wait_ns < 5 * 1000 * 1000)
            continue; /* woke early for the handover, not because it stalled */
        if (rc != 0 && errno == ETIMEDOUT && atomic_load(&d->serving) == serving)
            engine_skip_dead(s, dev, serving, &stalled_since);
    }
    atomic_store(&d->holder_slot, slot);
    return ticket;
}

void fc_engine_release(struct fc_shared *s, int dev, uint32_t ticket)
{
    struct fc_device_state *d = &s->dev[dev];
    atomic_store(&d->waiter_slot[ticket % FC_TICKET_RING], 0);
    atomic_store(&d->holder_slot, -1);
    uint32_t expected = ticket;
    if (atomic_compare_exchange_strong(&d->serving, &expected, ticket + 1))
        futex(&d->serving, FUTEX_WAKE, INT_MAX, NULL);
}

void fc_engine_busy_until(struct fc_shared *s, int dev, uint64_t end_ns)
{
    atomic_store(&s->dev[dev].busy_until, end_ns);
}

bool fc_engine_contended(struct fc_shared *s, int dev, uint32_t ticket)
{
    return atomic_load(&s->dev[dev].next_ticket) != ticket + 1;
}

void fc_state_reset_meter(struct fc_shared *s)
{
    for (uint32_t d = 0; d < s->ndevices; d++) {
        atomic_store(&s->dev[d].busy_ns, 0);
        atomic_store(&s->dev[d].kernels, 0);
    }
    for (int i = 0; i < FC_MAX_PROCS; i++)
        for (uint32_t d = 0; d < s->ndevices; d++) {
            atomic_store(&s->procs[i].busy_ns[d], 0);
            atomic_store(&s->procs[i].kernels[d], 0);
        }
    atomic_store(&s->reset_ns, monotonic_ns());
}
