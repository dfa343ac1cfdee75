/*
 * fakecuda shared state: creating and mapping the FAKECUDA_STATE file,
 * process slots, their liveness locks and reaping, and the per-device
 * engine locks. The layout and the locking rules are described in
 * fc_state.h.
 */

#include "fc_state.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* This process's open state file (its locks prove this process alive) and
 * the slot it holds. Written by fc_state_open, fc_state_register and
 * fc_state_after_fork_child, each called under the caller's process lock
 * (fakecuda's proc_lock, or the single thread of fakecuda-stat); read by
 * the reaper under the state's lock. */
static int liveness_fd = -1;
static char liveness_path[4096];
static int own_slot = -1;

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
        atomic_store(&dev->compute.holder_slot, -1);
        atomic_store(&dev->compute.last_slot, -1);
        atomic_store(&dev->copy.holder_slot, -1);
        atomic_store(&dev->copy.last_slot, -1);
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
        /* A private state is a memory file: the same liveness locks work
         * for the forked children that share it. */
        int fd = memfd_create("fakecuda-state", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)sizeof(struct fc_shared)) != 0) {
            snprintf(err, errlen, "memfd: %s", strerror(errno));
            if (fd >= 0)
                close(fd);
            return NULL;
        }
        struct fc_shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (s == MAP_FAILED) {
            snprintf(err, errlen, "mmap: %s", strerror(errno));
            close(fd);
            return NULL;
        }
        state_init(s, ndevices, mem);
        liveness_fd = fd;
        liveness_path[0] = '\0';
        return s;
    }

    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(err, errlen, "open %s: %s", path, strerror(errno));
        return NULL;
    }
    if (strlen(path) >= sizeof liveness_path) {
        snprintf(err, errlen, "state file path too long");
        close(fd);
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
    liveness_fd = fd;
    snprintf(liveness_path, sizeof liveness_path, "%s", path);
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

uint64_t fc_pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Whether a slot's process is stopped (SIGSTOP, a debugger). Only a process
 * of this PID namespace can be looked up in /proc; others count as running. */
static bool slot_stopped(const struct fc_proc_slot *slot)
{
    char state = 0;
    if (slot->pidns == 0 || slot->pidns != fc_pid_namespace())
        return false;
    return proc_stat(slot->pid, &state) == slot->start_time && (state == 'T' || state == 't');
}

static struct flock liveness_range(int slot, short type)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)(FC_LIVENESS_BASE + slot);
    fl.l_len = 1;
    return fl;
}

bool fc_slot_alive(struct fc_shared *s, int slot)
{
    if (!s->procs[slot].alive)
        return false;
    if (slot == own_slot)
        return true; /* our own lock never conflicts with us */
    if (liveness_fd < 0)
        return true; /* cannot tell: never reap what may be alive */
    struct flock fl = liveness_range(slot, F_WRLCK);
    if (fcntl(liveness_fd, F_OFD_GETLK, &fl) != 0)
        return true;
    return fl.l_type != F_UNLCK;
}

void fc_state_reap_locked(struct fc_shared *s)
{
    for (int i = 0; i < FC_MAX_PROCS; i++) {
        struct fc_proc_slot *slot = &s->procs[i];
        if (!slot->alive || fc_slot_alive(s, i))
            continue;
        for (uint32_t d = 0; d < s->ndevices; d++) {
            uint64_t held = slot->mem_used[d];
            s->dev[d].used_mem = held > s->dev[d].used_mem ? 0 : s->dev[d].used_mem - held;
            slot->mem_used[d] = 0;
        }
        slot->alive = 0;
    }
}

static bool random_id(uint8_t id[16])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t n = getrandom(id + got, 16 - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    static const uint8_t zero[16];
    if (memcmp(id, zero, 16) == 0)
        id[0] = 1; /* all zero means "never used" */
    return true;
}

static bool slot_never_used(const struct fc_proc_slot *slot)
{
    static const uint8_t zero[16];
    return memcmp(slot->id, zero, sizeof zero) == 0;
}

int fc_state_register(struct fc_shared *s, pid_t pid)
{
    uint8_t id[16];
    if (liveness_fd < 0 || !random_id(id))
        return -1;
    uint64_t start = fc_proc_start_time(pid), pidns = fc_pid_namespace();
    fc_state_lock(s);
    fc_state_reap_locked(s);
    /* Prefer a never-used slot so that the meter keeps dead processes'
     * figures as long as possible; then a dead one. The liveness lock is
     * taken before the slot is marked alive, under the state's lock, so a
     * reaper never sees an alive slot without its lock. */
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; pass++) {
        for (int i = 0; i < FC_MAX_PROCS && pick < 0; i++) {
            struct fc_proc_slot *slot = &s->procs[i];
            if (slot->alive || (pass == 0 && !slot_never_used(slot)))
                continue;
            struct flock fl = liveness_range(i, F_WRLCK);
            if (fcntl(liveness_fd, F_OFD_SETLK, &fl) == 0)
                pick = i;
        }
    }
    if (pick >= 0) {
        struct fc_proc_slot *slot = &s->procs[pick];
        memset(slot, 0, sizeof *slot);
        memcpy(slot->id, id, sizeof id);
        slot->pid = (int32_t)pid;
        slot->pidns = pidns;
        slot->start_time = start;
        slot->alive = 1;
        own_slot = pick;
    }
    fc_state_unlock(s);
    return pick;
}

bool fc_state_after_fork_child(void)
{
    own_slot = -1;
    if (liveness_fd < 0)
        return true;
    /* A new open file description of the same file: the parent's locks
     * belong to the old one, which the child now lets go of. */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", liveness_fd);
    int fd = open(self, O_RDWR | O_CLOEXEC);
    if (fd < 0 && liveness_path[0])
        fd = open(liveness_path, O_RDWR | O_CLOEXEC);
    close(liveness_fd);
    liveness_fd = fd;
    return fd >= 0;
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

/* Skips the ticket being served if its owner died: a waiter calls this when
 * the line has not moved for a while. */
static void engine_skip_dead(struct fc_shared *s, struct fc_engine *e, uint32_t serving,
                             uint64_t *stalled_since)
{
    int32_t owner = atomic_load(&e->waiter_slot[serving % FC_TICKET_RING]);
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
        uint64_t until = atomic_load(&e->busy_until);
        fc_state_lock(s);
        dead = !fc_slot_alive(s, owner - 1) ||
               (monotonic_ns() > until + 5000000ull && slot_stopped(&s->procs[owner - 1]));
        fc_state_unlock(s);
    }
    if (!dead)
        return;
    uint32_t expected = serving;
    atomic_store(&e->waiter_slot[serving % FC_TICKET_RING], 0);
    if (atomic_compare_exchange_strong(&e->serving, &expected, serving + 1)) {
        atomic_store(&e->holder_slot, -1);
        atomic_store(&e->free_since, monotonic_ns());
        futex(&e->serving, FUTEX_WAKE, INT_MAX, NULL);
    }
    *stalled_since = 0;
}

uint32_t fc_engine_acquire(struct fc_shared *s, struct fc_engine *e, int slot, uint64_t *free_since_ns)
{
    uint32_t ticket = atomic_fetch_add(&e->next_ticket, 1);
    atomic_store(&e->waiter_slot[ticket % FC_TICKET_RING], slot + 1);
    uint64_t stalled_since = 0;
    for (;;) {
        uint32_t serving = atomic_load(&e->serving);
        if (serving == ticket)
            break;
        if ((int32_t)(serving - ticket) > 0) {
            /* Skipped while this process was stopped: queue again. */
            ticket = atomic_fetch_add(&e->next_ticket, 1);
            atomic_store(&e->waiter_slot[ticket % FC_TICKET_RING], slot + 1);
            continue;
        }
        /* No need to be awake for the handover: the waiter's work starts
         * when the holder's ended (*free_since_ns), however late this
         * thread wakes. The timeout is how soon a dead holder is noticed. */
        struct timespec timeout = {0, 5 * 1000 * 1000};
        long rc = futex(&e->serving, FUTEX_WAIT, serving, &timeout);
        if (rc != 0 && errno == ETIMEDOUT && atomic_load(&e->serving) == serving)
            engine_skip_dead(s, e, serving, &stalled_since);
    }
    atomic_store(&e->holder_slot, slot);
    *free_since_ns = atomic_load(&e->free_since);
    return ticket;
}

void fc_engine_release(struct fc_engine *e, uint32_t ticket, uint64_t ended_ns)
{
    atomic_store(&e->waiter_slot[ticket % FC_TICKET_RING], 0);
    atomic_store(&e->holder_slot, -1);
    /* Not if the line moved on without this holder (it was stopped): the
     * time is then the skip's, and the engine may have a new holder. */
    if (atomic_load(&e->serving) == ticket)
        atomic_store(&e->free_since, ended_ns);
    uint32_t expected = ticket;
    if (atomic_compare_exchange_strong(&e->serving, &expected, ticket + 1))
        futex(&e->serving, FUTEX_WAKE, INT_MAX, NULL);
}

void fc_engine_busy_until(struct fc_engine *e, uint64_t end_ns)
{
    atomic_store(&e->busy_until, end_ns);
}

bool fc_engine_contended(struct fc_engine *e, uint32_t ticket)
{
    return atomic_load(&e->next_ticket) != ticket + 1;
}

void fc_state_reset_meter(struct fc_shared *s)
{
    for (uint32_t d = 0; d < s->ndevices; d++) {
        atomic_store(&s->dev[d].busy_ns, 0);
        atomic_store(&s->dev[d].kernels, 0);
        atomic_store(&s->dev[d].copy_busy_ns, 0);
        atomic_store(&s->dev[d].copies, 0);
        atomic_store(&s->dev[d].copy_bytes, 0);
    }
    for (int i = 0; i < FC_MAX_PROCS; i++)
        for (uint32_t d = 0; d < s->ndevices; d++) {
            atomic_store(&s->procs[i].busy_ns[d], 0);
            atomic_store(&s->procs[i].kernels[d], 0);
            atomic_store(&s->procs[i].copy_busy_ns[d], 0);
            atomic_store(&s->procs[i].copies[d], 0);
        }
    atomic_store(&s->reset_ns, monotonic_ns());
}
