/*
 * The server's event loop: one epoll set, watches that call back with the
 * ready events, and one timerfd set for the earliest of the timers
 * (timers.c), reprogrammed before each wait when that changed.
 *
 * A callback may close another watch whose event is still waiting in the
 * same batch (a tenant removed, a device freed): loop_del forgets such
 * events, so no callback ever runs for a freed watch.
 */
#include "server.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* Events taken from the kernel per round. Large, so that a round sees every
 * ready client: a tenant over its budget for the round (clients.c) is
 * skipped at the cost of a branch, and another tenant's client is not left
 * behind hundreds of its ready connections for several rounds (epoll hands
 * out ready descriptors in turn, LOOP_BATCH at a time). */
#define LOOP_BATCH 1024

/* The epoll set, the stop flag and the batch being dispatched; owned by the
 * loop's (only) thread. */
static int epoll_fd = -1;
static bool stopping;
static struct epoll_event batch[LOOP_BATCH];
static int batch_next, batch_len;
static uint64_t round_number;
/* The timerfd, and the time it is set for (0: disarmed). */
static struct loop_watch timer_watch = {.fd = -1};
static uint64_t timer_programmed;

static void timers_due(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    uint64_t expirations;
    if (read(timer_watch.fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
        slog(LOG_WARN, "timerfd: read: %s", strerror(errno));
    timer_programmed = 0; /* it went off (or was set again: then set anew) */
    timers_fire(now_ns());
}

/* Sets the timerfd for the earliest timer, if that changed. */
static void program_timer(void)
{
    uint64_t next = timers_next();
    if (next == timer_programmed)
        return;
    struct itimerspec its = {0};
    if (next) {
        its.it_value.tv_sec = (time_t)(next / 1000000000ull);
        its.it_value.tv_nsec = (long)(next % 1000000000ull);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    /* (fails only on a bad argument: a value out of range) */
    if (timerfd_settime(timer_watch.fd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        slog(LOG_ERR, "timerfd_settime: %s", strerror(errno));
    timer_programmed = next;
}

int loop_init(void)
{
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd < 0)
        return -1;
    timer_watch = (struct loop_watch){.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC),
                                      .fn = timers_due};
    if (timer_watch.fd < 0 || loop_add(&timer_watch, EPOLLIN) != 0)
        return -1;
    return 0;
}

int loop_add(struct loop_watch *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};
    return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, w->fd, &ev);
}

int loop_mod(struct loop_watch *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};
    return epoll_ctl(epoll_fd, EPOLL_CTL_MOD, w->fd, &ev);
}

void loop_del(struct loop_watch *w)
{
    if (w->fd >= 0 && epoll_ctl(epoll_fd, EPOLL_CTL_DEL, w->fd, NULL) != 0)
        slog(LOG_ERR, "epoll_ctl(DEL, fd %d): %s", w->fd, strerror(errno));
    for (int i = batch_next; i < batch_len; i++)
        if (batch[i].data.ptr == w)
            batch[i].data.ptr = NULL;
}

uint64_t loop_round(void)
{
    return round_number;
}

void loop_stop(void)
{
    stopping = true;
}

int loop_run(void)
{
    while (!stopping) {
        program_timer();
        int n = epoll_wait(epoll_fd, batch, LOOP_BATCH, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            slog(LOG_ERR, "epoll_wait: %s", strerror(errno));
            return -1;
        }
        batch_len = n;
        round_number++;
        for (batch_next = 0; batch_next < batch_len && !stopping;) {
            struct epoll_event ev = batch[batch_next++];
            struct loop_watch *w = ev.data.ptr;
            if (w)
                w->fn(w->arg, ev.events);
        }
        batch_next = batch_len = 0;
    }
    return 0;
}
