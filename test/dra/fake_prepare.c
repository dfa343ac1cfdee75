/*
 * A stand-in for dra_prepare and dra_unprepare (dra.h), for the kubelet
 * side's tests: no Kubernetes API, no tenant files. Preparing a claim
 * answers one device, pool "node-1", device "gpu-0", request "gpu", CDI
 * ID "gpuslice.io/tenant=claim-UID"; a claim named "multi-*" gets two
 * devices ("gpu-0" for request "gpu", "gpu-1" for "gpu/shared"), each with
 * two CDI IDs (the second "gpuslice.io/tenant=claim-UID-N"). A claim
 * named "bad-*" fails to prepare and to unprepare with a message naming
 * it; one named "badutf8-*" fails with a message that holds invalid UTF-8
 * and ends in a cut character. Each call is appended as a line
 * "prepare|unprepare PID NAMESPACE NAME UID" to the file that
 * GPUSLICE_FAKE_PREPARE_LOG names, if set, written before the call
 * answers.
 */
#include "dra.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int starts_with(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* Appends one line to the calls' log: 0, or -1 with a message in error. */
static int log_call(const char *what, const struct dra_claim_ref *claim, char *error, size_t error_size)
{
    const char *path = getenv("GPUSLICE_FAKE_PREPARE_LOG");
    if (path == NULL || path[0] == '\0')
        return 0;
    char line[1024];
    int length = snprintf(line, sizeof line, "%s %ld %s %s %s\n", what, (long)getpid(), claim->namespace_name,
                          claim->name, claim->uid);
    if (length < 0 || (size_t)length >= sizeof line) {
        snprintf(error, error_size, "fake %s: the log line is too long", what);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(error, error_size, "fake %s: %s: cannot open the log", what, path);
        return -1;
    }
    ssize_t written = write(fd, line, (size_t)length);
    int closed = close(fd);
    if (written != length || closed != 0) {
        snprintf(error, error_size, "fake %s: %s: cannot write the log", what, path);
        return -1;
    }
    return 0;
}

static void fill_device(struct dra_prepared_device *device, const char *request, int index, const char *uid,
                        int ncdi_ids)
{
    snprintf(device->request, sizeof device->request, "%s", request);
    snprintf(device->pool, sizeof device->pool, "node-1");
    snprintf(device->device, sizeof device->device, "gpu-%d", index);
    snprintf(device->cdi_ids[0], sizeof device->cdi_ids[0], "gpuslice.io/tenant=claim-%s", uid);
    for (int i = 1; i < ncdi_ids; i++)
        snprintf(device->cdi_ids[i], sizeof device->cdi_ids[i], "gpuslice.io/tenant=claim-%s-%d", uid, i);
    device->ncdi_ids = ncdi_ids;
}

int dra_prepare(const struct dra_claim_ref *claim, struct dra_prepared *out, char *error, size_t error_size)
{
    if (log_call("prepare", claim, error, error_size) != 0)
        return -1;
    if (starts_with(claim->name, "bad-")) {
        snprintf(error, error_size, "claim %s/%s: no device of driver %s is allocated to it", claim->namespace_name,
                 claim->name, DRA_DRIVER_NAME);
        return -1;
    }
    if (starts_with(claim->name, "badutf8-")) {
        /* \xff is never UTF-8; \xc3 alone is the first byte of a
         * two-byte character, cut. */
        snprintf(error, error_size, "claim %s: bad \xff byte, cut \xc3", claim->name);
        return -1;
    }
    memset(out, 0, sizeof *out);
    if (starts_with(claim->name, "multi-")) {
        fill_device(&out->devices[0], "gpu", 0, claim->uid, 2);
        fill_device(&out->devices[1], "gpu/shared", 1, claim->uid, 2);
        out->ndevices = 2;
    } else {
        fill_device(&out->devices[0], "gpu", 0, claim->uid, 1);
        out->ndevices = 1;
    }
    return 0;
}

int dra_unprepare(const struct dra_claim_ref *claim, char *error, size_t error_size)
{
    if (log_call("unprepare", claim, error, error_size) != 0)
        return -1;
    if (starts_with(claim->name, "bad-")) {
        snprintf(error, error_size, "claim %s/%s: its tenant cannot be removed", claim->namespace_name, claim->name);
        return -1;
    }
    return 0;
}
