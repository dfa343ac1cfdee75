/*
 * The server's clock: CLOCK_MONOTONIC in nanoseconds, what every timer,
 * slice and log rate counts in. Below both the log and the loop, which
 * read it and nothing else of each other's.
 */
#include "server.h"

#include <time.h>

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
