/*
 * fakecuda-stat: reads the ground-truth meter of a FAKECUDA_STATE file.
 * Tests judge every share by what this prints, never by gpuslice's own
 * bookkeeping. See usage() for the interface.
 */

#include "fc_state.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SNAPSHOT (FC_MAX_PROCS * FC_MAX_DEVICES)

struct sample {
    int pid;
    uint64_t start_time;
    int device;
    uint64_t busy_ns, kernels;
};

struct snapshot {
    uint64_t taken_ns;
    uint64_t device_busy[FC_MAX_DEVICES], device_kernels[FC_MAX_DEVICES];
    struct sample procs[MAX_SNAPSHOT];
    size_t count;
};

static void usage(FILE *out)
{
    fprintf(out,
"Usage: fakecuda-stat [--json] [--since SNAPSHOT] STATE\n"
"       fakecuda-stat --save SNAPSHOT STATE\n"
"       fakecuda-stat --reset STATE\n"
"\n"
"Prints the ground-truth meter of the simulated GPUs in the fakecuda state\n"
"file STATE (the file named by FAKECUDA_STATE): per device its busy time,\n"
"kernel count and memory; per process and device its busy time, kernels,\n"
"memory held and its share of the device's busy time.\n"
"\n"
"Options:\n"
"  --json           print one JSON object instead of key=value lines\n"
"  --since FILE     count only what happened after the snapshot FILE was\n"
"                   saved; shares and utilization cover that window\n"
"  --save FILE      write a snapshot of the meter to FILE and exit\n"
"  --reset          zero the meter (busy time and kernel counts) and exit\n"
"  -h, --help       show this help\n"
"\n"
"Text output, one line each:\n"
"  device=D busy_ns=N kernels=K mem_used=B mem_total=B wall_ns=W utilization=U\n"
"  pid=P device=D busy_ns=N kernels=K mem_used=B mem_peak=B share=S alive=0|1\n"
"wall_ns is the time since the last reset (or the snapshot); utilization is\n"
"busy_ns / wall_ns; share is the process's busy_ns / the device's busy_ns.\n"
"\n"
"Exit status: 0 on success, 1 on a usage error, 2 if STATE or a snapshot\n"
"cannot be read.\n");
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool save_snapshot(struct fc_shared *s, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fprintf(f, "fakecuda-snapshot 1 %" PRIu64 "\n", now_ns());
    for (uint32_t d = 0; d < s->ndevices; d++)
        fprintf(f, "device %u %" PRIu64 " %" PRIu64 "\n", d, atomic_load(&s->dev[d].busy_ns),
                atomic_load(&s->dev[d].kernels));
    for (int i = 0; i < FC_MAX_PROCS; i++) {
        struct fc_proc_slot *p = &s->procs[i];
        if (p->pid == 0)
            continue;
        for (uint32_t d = 0; d < s->ndevices; d++)
            fprintf(f, "proc %d %" PRIu64 " %u %" PRIu64 " %" PRIu64 "\n", p->pid, p->start_time, d,
                    atomic_load(&p->busy_ns[d]), atomic_load(&p->kernels[d]));
    }
    return fclose(f) == 0;
}

static bool load_snapshot(const char *path, struct snapshot *snap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    memset(snap, 0, sizeof *snap);
    char line[256];
    bool ok = fgets(line, sizeof line, f) &&
              sscanf(line, "fakecuda-snapshot 1 %" SCNu64, &snap->taken_ns) == 1;
    while (ok && fgets(line, sizeof line, f)) {
        unsigned d;
        uint64_t busy, kernels, start;
        int pid;
        if (sscanf(line, "device %u %" SCNu64 " %" SCNu64, &d, &busy, &kernels) == 3 && d < FC_MAX_DEVICES) {
            snap->device_busy[d] = busy;
            snap->device_kernels[d] = kernels;
        } else if (sscanf(line, "proc %d %" SCNu64 " %u %" SCNu64 " %" SCNu64, &pid, &start, &d, &busy,
                          &kernels) == 5 && d < FC_MAX_DEVICES && snap->count < MAX_SNAPSHOT) {
            snap->procs[snap->count++] = (struct sample){pid, start, (int)d, busy, kernels};
        } else {
            ok = false;
        }
    }
    fclose(f);
    return ok;
}

static const struct sample *snapshot_find(const struct snapshot *snap, int pid, uint64_t start, int d)
{
    for (size_t i = 0; snap && i < snap->count; i++)
        if (snap->procs[i].pid == pid && snap->procs[i].start_time == start && snap->procs[i].device == d)
            return &snap->procs[i];
    return NULL;
}

static void print_meter(struct fc_shared *s, const struct snapshot *snap, bool json)
{
    uint64_t now = now_ns();
    uint64_t since = snap ? snap->taken_ns : atomic_load(&s->reset_ns);
    uint64_t wall = now > since ? now - since : 0;
    uint64_t dev_busy[FC_MAX_DEVICES];

    fc_state_lock(s);
    fc_state_reap_locked(s);
    if (json)
        printf("{\"wall_ns\":%" PRIu64 ",\"devices\":[", wall);
    for (uint32_t d = 0; d < s->ndevices; d++) {
        struct fc_device_state *dev = &s->dev[d];
        uint64_t busy = atomic_load(&dev->busy_ns) - (snap ? snap->device_busy[d] : 0);
        uint64_t kernels = atomic_load(&dev->kernels) - (snap ? snap->device_kernels[d] : 0);
        double util = wall ? (double)busy / (double)wall : 0.0;
        dev_busy[d] = busy;
        char uuid[40];
        for (int i = 0; i < 16; i++)
            snprintf(uuid + 2 * i, 3, "%02x", dev->uuid[i]);
        if (json)
            printf("%s{\"device\":%u,\"uuid\":\"%s\",\"busy_ns\":%" PRIu64 ",\"kernels\":%" PRIu64
                   ",\"mem_used\":%" PRIu64 ",\"mem_total\":%" PRIu64 ",\"utilization\":%.4f}",
                   d ? "," : "", d, uuid, busy, kernels, dev->used_mem, dev->total_mem, util);
        else
            printf("device=%u uuid=%s busy_ns=%" PRIu64 " kernels=%" PRIu64 " mem_used=%" PRIu64
                   " mem_total=%" PRIu64 " wall_ns=%" PRIu64 " utilization=%.4f\n",
                   d, uuid, busy, kernels, dev->used_mem, dev->total_mem, wall, util);
    }
    if (json)
        printf("],\"processes\":[");
    bool first = true;
    for (int i = 0; i < FC_MAX_PROCS; i++) {
        struct fc_proc_slot *p = &s->procs[i];
        if (p->pid == 0)
            continue;
        for (uint32_t d = 0; d < s->ndevices; d++) {
            const struct sample *base = snapshot_find(snap, p->pid, p->start_time, (int)d);
            uint64_t busy = atomic_load(&p->busy_ns[d]) - (base ? base->busy_ns : 0);
            uint64_t kernels = atomic_load(&p->kernels[d]) - (base ? base->kernels : 0);
            if (busy == 0 && kernels == 0 && p->mem_used[d] == 0 && p->mem_peak[d] == 0)
                continue;
            double share = dev_busy[d] ? (double)busy / (double)dev_busy[d] : 0.0;
            if (json)
                printf("%s{\"pid\":%d,\"device\":%u,\"busy_ns\":%" PRIu64 ",\"kernels\":%" PRIu64
                       ",\"mem_used\":%" PRIu64 ",\"mem_peak\":%" PRIu64 ",\"share\":%.4f,\"alive\":%s}",
                       first ? "" : ",", p->pid, d, busy, kernels, p->mem_used[d], p->mem_peak[d], share,
                       p->alive ? "true" : "false");
            else
                printf("pid=%d device=%u busy_ns=%" PRIu64 " kernels=%" PRIu64 " mem_used=%" PRIu64
                       " mem_peak=%" PRIu64 " share=%.4f alive=%d\n",
                       p->pid, d, busy, kernels, p->mem_used[d], p->mem_peak[d], share, p->alive ? 1 : 0);
            first = false;
        }
    }
    fc_state_unlock(s);
    if (json)
        printf("]}\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"json", no_argument, NULL, 'j'},   {"since", required_argument, NULL, 's'},
        {"save", required_argument, NULL, 'S'}, {"reset", no_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},   {NULL, 0, NULL, 0},
    };
    bool json = false, reset = false;
    const char *since = NULL, *save = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case 'j': json = true; break;
        case 's': since = optarg; break;
        case 'S': save = optarg; break;
        case 'r': reset = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind != argc - 1 || (reset && (save || since)) || (save && since)) {
        usage(stderr);
        return 1;
    }
    const char *path = argv[optind];
    if (access(path, R_OK | W_OK) != 0) {
        fprintf(stderr, "fakecuda-stat: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char err[256];
    struct fc_shared *s = fc_state_open(path, 1, 1, err, sizeof err);
    if (!s) {
        fprintf(stderr, "fakecuda-stat: %s\n", err);
        return 2;
    }
    if (reset) {
        fc_state_reset_meter(s);
        return 0;
    }
    if (save) {
        if (!save_snapshot(s, save)) {
            fprintf(stderr, "fakecuda-stat: cannot write %s: %s\n", save, strerror(errno));
            return 2;
        }
        return 0;
    }
    static struct snapshot snap;
    if (since && !load_snapshot(since, &snap)) {
        fprintf(stderr, "fakecuda-stat: %s is not a snapshot saved by --save\n", since);
        return 2;
    }
    print_meter(s, since ? &snap : NULL, json);
    return 0;
}
