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
    char id[33]; /* the process's random id in hex */
    int device;
    uint64_t busy_ns, kernels, copy_busy_ns, copies;
};

struct snapshot {
    uint64_t taken_ns;
    uint64_t device_busy[FC_MAX_DEVICES], device_kernels[FC_MAX_DEVICES];
    uint64_t device_copy_busy[FC_MAX_DEVICES], device_copies[FC_MAX_DEVICES];
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
"  device=D uuid=U busy_ns=N kernels=K mem_used=B mem_total=B wall_ns=W\n"
"      utilization=U copy_busy_ns=N copies=C\n"
"  pid=P device=D busy_ns=N kernels=K mem_used=B mem_peak=B share=S alive=0|1\n"
"      copy_busy_ns=N copies=C id=HEX\n"
"wall_ns is the time since the last reset (or the snapshot); utilization is\n"
"busy_ns / wall_ns; share is the process's busy_ns / the device's busy_ns.\n"
"busy_ns counts the compute engine (kernels), copy_busy_ns the copy engine.\n"
"pid is the pid in the process's own PID namespace, so two processes may\n"
"show the same one; id tells them apart.\n"
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

static void id_hex(const struct fc_proc_slot *p, char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", p->id[i]);
}

static bool slot_used(const struct fc_proc_slot *p)
{
    for (int i = 0; i < 16; i++)
        if (p->id[i])
            return true;
    return false;
}

static bool save_snapshot(struct fc_shared *s, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fprintf(f, "fakecuda-snapshot 2 %" PRIu64 "\n", now_ns());
    for (uint32_t d = 0; d < s->ndevices; d++)
        fprintf(f, "device %u %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", d,
                atomic_load(&s->dev[d].busy_ns), atomic_load(&s->dev[d].kernels),
                atomic_load(&s->dev[d].copy_busy_ns), atomic_load(&s->dev[d].copies));
    for (int i = 0; i < FC_MAX_PROCS; i++) {
        struct fc_proc_slot *p = &s->procs[i];
        if (!slot_used(p))
            continue;
        char id[33];
        id_hex(p, id);
        for (uint32_t d = 0; d < s->ndevices; d++)
            fprintf(f, "proc %s %u %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", id, d,
                    atomic_load(&p->busy_ns[d]), atomic_load(&p->kernels[d]),
                    atomic_load(&p->copy_busy_ns[d]), atomic_load(&p->copies[d]));
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
              sscanf(line, "fakecuda-snapshot 2 %" SCNu64, &snap->taken_ns) == 1;
    while (ok && fgets(line, sizeof line, f)) {
        unsigned d;
        uint64_t busy, kernels, copy_busy, copies;
        char id[33];
        if (sscanf(line, "device %u %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &d, &busy, &kernels,
                   &copy_busy, &copies) == 5 && d < FC_MAX_DEVICES) {
            snap->device_busy[d] = busy;
            snap->device_kernels[d] = kernels;
            snap->device_copy_busy[d] = copy_busy;
            snap->device_copies[d] = copies;
        } else if (sscanf(line, "proc %32s %u %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, id, &d, &busy,
                          &kernels, &copy_busy, &copies) == 6 && d < FC_MAX_DEVICES &&
                   snap->count < MAX_SNAPSHOT) {
            struct sample *sample = &snap->procs[snap->count++];
            snprintf(sample->id, sizeof sample->id, "%s", id);
            sample->device = (int)d;
            sample->busy_ns = busy;
            sample->kernels = kernels;
            sample->copy_busy_ns = copy_busy;
            sample->copies = copies;
        } else {
            ok = false;
        }
    }
    fclose(f);
    return ok;
}

static const struct sample *snapshot_find(const struct snapshot *snap, const char *id, int d)
{
    for (size_t i = 0; snap && i < snap->count; i++)
        if (strcmp(snap->procs[i].id, id) == 0 && snap->procs[i].device == d)
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
        uint64_t copy_busy = atomic_load(&dev->copy_busy_ns) - (snap ? snap->device_copy_busy[d] : 0);
        uint64_t copies = atomic_load(&dev->copies) - (snap ? snap->device_copies[d] : 0);
        double util = wall ? (double)busy / (double)wall : 0.0;
        dev_busy[d] = busy;
        char uuid[40];
        for (int i = 0; i < 16; i++)
            snprintf(uuid + 2 * i, 3, "%02x", dev->uuid[i]);
        if (json)
            printf("%s{\"device\":%u,\"uuid\":\"%s\",\"busy_ns\":%" PRIu64 ",\"kernels\":%" PRIu64
                   ",\"mem_used\":%" PRIu64 ",\"mem_total\":%" PRIu64 ",\"utilization\":%.4f"
                   ",\"copy_busy_ns\":%" PRIu64 ",\"copies\":%" PRIu64 "}",
                   d ? "," : "", d, uuid, busy, kernels, dev->used_mem, dev->total_mem, util, copy_busy,
                   copies);
        else
            printf("device=%u uuid=%s busy_ns=%" PRIu64 " kernels=%" PRIu64 " mem_used=%" PRIu64
                   " mem_total=%" PRIu64 " wall_ns=%" PRIu64 " utilization=%.4f copy_busy_ns=%" PRIu64
                   " copies=%" PRIu64 "\n",
                   d, uuid, busy, kernels, dev->used_mem, dev->total_mem, wall, util, copy_busy, copies);
    }
    if (json)
        printf("],\"processes\":[");
    bool first = true;
    for (int i = 0; i < FC_MAX_PROCS; i++) {
        struct fc_proc_slot *p = &s->procs[i];
        if (!slot_used(p))
            continue;
        char id[33];
        id_hex(p, id);
        for (uint32_t d = 0; d < s->ndevices; d++) {
            const struct sample *base = snapshot_find(snap, id, (int)d);
            uint64_t busy = atomic_load(&p->busy_ns[d]) - (base ? base->busy_ns : 0);
            uint64_t kernels = atomic_load(&p->kernels[d]) - (base ? base->kernels : 0);
            uint64_t copy_busy = atomic_load(&p->copy_busy_ns[d]) - (base ? base->copy_busy_ns : 0);
            uint64_t copies = atomic_load(&p->copies[d]) - (base ? base->copies : 0);
            if (busy == 0 && kernels == 0 && copies == 0 && p->mem_used[d] == 0 && p->mem_peak[d] == 0)
                continue;
            double share = dev_busy[d] ? (double)busy / (double)dev_busy[d] : 0.0;
            if (json)
                printf("%s{\"pid\":%d,\"id\":\"%s\",\"device\":%u,\"busy_ns\":%" PRIu64
                       ",\"kernels\":%" PRIu64 ",\"mem_used\":%" PRIu64 ",\"mem_peak\":%" PRIu64
                       ",\"share\":%.4f,\"alive\":%s,\"copy_busy_ns\":%" PRIu64 ",\"copies\":%" PRIu64 "}",
                       first ? "" : ",", p->pid, id, d, busy, kernels, p->mem_used[d], p->mem_peak[d], share,
                       p->alive ? "true" : "false", copy_busy, copies);
            else
                printf("pid=%d device=%u busy_ns=%" PRIu64 " kernels=%" PRIu64 " mem_used=%" PRIu64
                       " mem_peak=%" PRIu64 " share=%.4f alive=%d copy_busy_ns=%" PRIu64 " copies=%" PRIu64
                       " id=%s\n",
                       p->pid, d, busy, kernels, p->mem_used[d], p->mem_peak[d], share, p->alive ? 1 : 0,
                       copy_busy, copies, id);
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
