/*
 * The check macro the C test programs share: counts passes and failures,
 * prints each failure with its line, and the closing "N passed, N failed"
 * line comes from check_finish().
 */
#ifndef GPUSLICE_TEST_CHECK_H
#define GPUSLICE_TEST_CHECK_H

#include <stdio.h>

/* Counters of the one test program that includes this; main() reports them. */
static int check_passed, check_failed;

#define EXPECT(cond)                                                              \
    do {                                                                          \
        if (cond) {                                                               \
            check_passed++;                                                       \
        } else {                                                                  \
            check_failed++;                                                       \
            printf("%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond);             \
            fflush(stdout);                                                       \
        }                                                                         \
    } while (0)

static inline int check_finish(void)
{
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
