/*
 * sim: the deterministic simulation of a node, from the command line.
 *
 *   sim [--seed N | --seeds FIRST-LAST] [--seconds S] [--jobs J] [--trace]
 *   sim --case NAME [--seed N] [--trace]   (or --cases: every named case)
 *
 * Each seed is one run (sim_world.c) of the node scenario_make makes of it;
 * a named case is a node written by hand (sim_cases.c) or a history
 * written by hand (a scripted case: sim_script.c), which runs the same
 * whatever the seed. A run that breaks
 * an invariant prints its seed, what broke, and the command that replays
 * it with its trace.
 * Exit status: 0 when every run kept every invariant, 1 when one did not,
 * 2 on a usage error.
 */
#include "sim.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
"Usage: sim [--seed N | --seeds FIRST-LAST] [--seconds S] [--jobs J] [--first-failure]\n"
"           [--trace]\n"
"       sim --case NAME [--seed N] [--seconds S] [--trace]\n"
"       sim --cases\n"
"\n"
"Runs the deterministic simulation of a node: gpuslice-server's scheduler,\n"
"its driver and its GPUs (the real code) and the shim's slice machine,\n"
"with simulated processes, GPUs, messages and faults, one\n"
"run per seed, checking its invariants after every event and its figures\n"
"at the end (test/sim/sim_check.c). The same seed replays the same run.\n"
"\n"
"  --seed N            one run (default 1)\n"
"  --seeds FIRST-LAST  every seed from FIRST to LAST\n"
"  --seconds S         simulated seconds per run (default 10, or the case's)\n"
"  --jobs J            runs in J processes at once (default 1)\n"
"  --first-failure     stop at the first run that breaks an invariant (each\n"
"                      process at its own: the smallest such seed of those\n"
"                      run is printed last)\n"
"  --trace             print every run's events (for one seed)\n"
"  --case NAME         a named case instead of the seed's node (its random\n"
"                      details from --seed, default 1), or a scripted case (a\n"
"                      history with checks of its own, the same whatever the\n"
"                      seed); --cases: each of them\n"
"  -h, --help          show this help\n"
"\n"
"Exit status: 0 if every run kept every invariant, 1 if one did not (its\n"
"seed and what broke are printed), 2 on a usage error.\n");
}

static int parse_u64(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool first_failure; /* set once from the command line */
static const struct sim_case *named; /* --case: set once from the command line */

/* Runs seeds first, first + stride, ... up to last; prints failures.
 * *failed_seed: the first seed that failed (0 if none). */
static int run_seeds(uint64_t first, uint64_t last, uint64_t stride, unsigned flags, uint64_t seconds,
                     uint64_t *events, uint64_t *failed_seed)
{
    struct world *w = malloc(sizeof *w);
    if (!w) {
        fprintf(stderr, "sim: out of memory\n");
        return 2;
    }
    int failures = 0;
    for (uint64_t seed = first; seed <= last; seed += stride) {
        w->end = 0;
        if (named && named->script)
            script_run(w, seed, flags, named);
        else
            world_run_for(w, seed, flags, seconds * 1000 * MS, named ? named->make : scenario_make);
        *events += w->fig.events;
        if (w->failed) {
            printf("%s%s%sseed %llu: FAILED %s\n  replay: sim %s%s%s--seed %llu --seconds %llu --trace\n",
                   named ? "case " : "", named ? named->name : "", named ? ", " : "", (unsigned long long)seed,
                   w->failure, named ? "--case " : "", named ? named->name : "", named ? " " : "", (unsigned long long)seed,
                   (unsigned long long)seconds);
            fflush(stdout);
            if (!failures)
                *failed_seed = seed;
            failures++;
            if (first_failure)
                break;
        }
        if (seed + stride < seed)
            break;
    }
    free(w);
    return failures;
}

/* Each run frees what it allocated, and glibc would hand the top of the
 * heap back to the kernel every time and fault it in again on the next
 * run: a third of the CPU of a long range of seeds went to page faults.
 * Keeping the freed memory changes no run (the same events), only the
 * time. Its answer is not looked at: refused (as under AddressSanitizer,
 * whose allocator is not glibc's), the runs are the same, only slower. */
static void keep_freed_memory(void)
{
    (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

int main(int argc, char **argv)
{
    keep_freed_memory();
    uint64_t first = 1, last = 1, jobs = 1, seconds = 0; /* 0: the case's, or 10 */
    unsigned flags = 0;
    bool all_cases = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--case") == 0 && v) {
            named = sim_case_find(v);
            if (!named) {
                fprintf(stderr, "sim: no case named '%s'; the cases:\n", v);
                for (int k = 0; k < sim_ncases; k++)
                    fprintf(stderr, "  %-38s %s\n", sim_cases[k].name, sim_cases[k].what);
                fprintf(stderr, "the scripted cases:\n");
                for (int k = 0; k < sim_nscripted_cases; k++)
                    fprintf(stderr, "  %-38s %s\n", sim_scripted_cases[k].name, sim_scripted_cases[k].what);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--cases") == 0) {
            all_cases = true;
        } else if (strcmp(a, "--trace") == 0) {
            flags |= SIM_TRACE;
        } else if (strcmp(a, "--first-failure") == 0) {
            first_failure = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--seed") == 0 && v && parse_u64(v, &first) == 0) {
            last = first;
            i++;
        } else if (strcmp(a, "--seeds") == 0 && v && strchr(v, '-')) {
            char lo[32], *dash = strchr(v, '-');
            size_t n = (size_t)(dash - v);
            if (n >= sizeof lo) {
                usage(stderr);
                return 2;
            }
            memcpy(lo, v, n);
            lo[n] = '\0';
            if (parse_u64(lo, &first) != 0 || parse_u64(dash + 1, &last) != 0 || last < first) {
                fprintf(stderr, "sim: --seeds needs FIRST-LAST with FIRST <= LAST, got '%s'\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--seconds") == 0 && v && parse_u64(v, &seconds) == 0 && seconds >= 2 && seconds <= 3600) {
            i++;
        } else if (strcmp(a, "--jobs") == 0 && v && parse_u64(v, &jobs) == 0 && jobs >= 1 && jobs <= 64) {
            i++;
        } else {
            fprintf(stderr, "sim: unknown or malformed option '%s'%s\n", a,
                    strcmp(a, "--seconds") == 0 ? " (2 to 3600)" : strcmp(a, "--jobs") == 0 ? " (1 to 64)" : "");
            usage(stderr);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool seconds_given = seconds != 0;
    if (all_cases) {
        int failed = 0;
        for (int k = 0; k < sim_ncases + sim_nscripted_cases; k++) {
            uint64_t events = 0, failed_seed = 0;
            named = k < sim_ncases ? &sim_cases[k] : &sim_scripted_cases[k - sim_ncases];
            if (!seconds_given)
                seconds = named->seconds ? named->seconds : 10;
            int f = run_seeds(first, first, 1, flags, seconds, &events, &failed_seed);
            printf("case %s (%s): %s\n", named->name, named->what, f ? "FAILED" : "every invariant held");
            failed += f != 0;
        }
        return failed ? 1 : 0;
    }
    if (!seconds_given)
        seconds = named && named->seconds ? named->seconds : 10;
    double start = wall_s();
    uint64_t runs = last - first + 1, events = 0, failed_seed = 0;
    int failures = 0;
    if (jobs == 1 || runs == 1) {
        failures = run_seeds(first, last, 1, flags, seconds, &events, &failed_seed);
    } else {
        pid_t pids[64];
        int pipes[64][2];
        for (uint64_t j = 0; j < jobs; j++) {
            if (pipe(pipes[j]) != 0) {
                perror("sim: pipe");
                return 2;
            }
            pids[j] = fork();
            if (pids[j] < 0) {
                perror("sim: fork");
                return 2;
            }
            if (pids[j] == 0) {
                close(pipes[j][0]);
                uint64_t mine[2] = {0, 0};
                int f = first + j <= last ? run_seeds(first + j, last, jobs, flags, seconds, &mine[0], &mine[1]) : 0;
                if (write(pipes[j][1], mine, sizeof mine) != sizeof mine)
                    _exit(2);
                _exit(f > 0 ? 1 : 0);
            }
            close(pipes[j][1]);
        }
        for (uint64_t j = 0; j < jobs; j++) {
            uint64_t theirs[2] = {0, 0};
            if (read(pipes[j][0], theirs, sizeof theirs) == sizeof theirs) {
                events += theirs[0];
                if (theirs[1] && (!failed_seed || theirs[1] < failed_seed))
                    failed_seed = theirs[1];
            }
            close(pipes[j][0]);
            int status;
            if (waitpid(pids[j], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) == 2)
                failures++;
            else if (WEXITSTATUS(status) == 1)
                failures++;
        }
    }
    char length[48] = ""; /* a scripted case runs as long as its history */
    if (!named || !named->script)
        snprintf(length, sizeof length, " of %llu simulated s", (unsigned long long)seconds);
    printf("sim: %s%s%llu runs%s (seeds %llu-%llu), %llu events, %s, %.1f s\n", named ? named->name : "",
           named ? ": " : "", (unsigned long long)runs, length, (unsigned long long)first, (unsigned long long)last,
           (unsigned long long)events, failures ? "FAILED" : "every invariant held", wall_s() - start);
    if (failed_seed)
        printf("sim: first failing seed %llu\n", (unsigned long long)failed_seed);
    return failures ? 1 : 0;
}
