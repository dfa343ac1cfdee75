/*
 * The server's in-memory timers (tokenserver/timers.c) against a model:
 * TIMERS timers armed, re-armed, disarmed and fired at random on a virtual
 * clock, with callbacks that themselves arm, disarm and re-arm timers (their
 * own included). After each step the earliest timer (timers_next) is the
 * model's; each firing is of a timer armed and due, in order of time, and
 * none due is left once the fire calls return nothing more. Seeded: it
 * replays exactly.
 *
 * Usage: timers_test [SEED] [STEPS]
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "server.h"

#define TIMERS 300

static struct timer timers[TIMERS];
static uint64_t model_at[TIMERS]; /* when each should fire; 0 not armed */
static uint64_t now = 1000, last_fired_at;
static uint64_t rng_state;
static unsigned long failures, fired;

static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fail(const char *what, int i)
{
    if (failures++ < 10)
        printf("FAIL: %s (timer %d, now %llu)\n", what, i, (unsigned long long)now);
}

static void arm(int i, uint64_t at)
{
    timer_at(&timers[i], at);
    model_at[i] = at;
}

static void on_fire(void *arg)
{
    int i = (int)(intptr_t)arg;
    fired++;
    if (model_at[i] == 0 || model_at[i] > now)
        fail("fired while not armed, or before it was due", i);
    if (model_at[i] < last_fired_at)
        fail("fired out of order", i);
    last_fired_at = model_at[i];
    model_at[i] = 0;
    /* what a callback does: re-arm itself, arm or disarm another */
    switch (rng() % 4) {
    case 0:
        arm(i, now + 1 + rng() % 50);
        break;
    case 1: {
        int j = (int)(rng() % TIMERS);
        arm(j, 0);
        break;
    }
    case 2: {
        int j = (int)(rng() % TIMERS);
        arm(j, now + rng() % 100);
        break;
    }
    default:
        break;
    }
}

static uint64_t model_next(void)
{
    uint64_t next = 0;
    for (int i = 0; i < TIMERS; i++)
        if (model_at[i] && (!next || model_at[i] < next))
            next = model_at[i];
    return next;
}

int main(int argc, char **argv)
{
    rng_state = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    long steps = argc > 2 ? atol(argv[2]) : 200000;
    for (int i = 0; i < TIMERS; i++)
        timer_init(&timers[i], on_fire, (void *)(intptr_t)i);
    for (long s = 0; s < steps; s++) {
        int i = (int)(rng() % TIMERS);
        switch (rng() % 5) {
        case 0:
        case 1:
            arm(i, now + rng() % 200);
            break;
        case 2:
            timer_close(&timers[i]);
            model_at[i] = 0;
            break;
        default:
            now += rng() % 20;
            last_fired_at = 0;
            /* as the loop does: fire until nothing due is left */
            while (timers_next() && timers_next() <= now)
                timers_fire(now);
            break;
        }
        if (timers_next() != model_next()) {
            fail("the earliest timer is not the model's", -1);
            break;
        }
    }
    for (int i = 0; i < TIMERS; i++)
        if ((timers[i].at != 0) != (model_at[i] != 0))
            fail("armed in the heap and in the model differ", i);
    printf("%s: %ld steps, %lu firings, %lu failures\n", failures ? "FAILED" : "ok", steps, fired, failures);
    return failures ? 1 : 0;
}
