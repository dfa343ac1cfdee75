/*
 * gpuslice-hook internals: what its files share.
 *
 *   hook_main.c   options, the order of the work, the checks on the tenant
 *   die.c         the one-line error and the exit status
 *   oci_state.c   the OCI state on stdin and the bundle's config.json (json-c)
 *   enter.c       getting into the container's mount namespace
 *   place.c       read-only bind mounts at paths inside the container's root
 *   scratch.c     mount points that the image lacks, made without writing
 *                 into it: in the container's own writable layer, or under
 *                 a memory-backed overlay over the nearest directory
 *
 * The hook is a one-shot program: any error prints one line on stderr and
 * exits non-zero, so that the runtime does not start the container
 * unprotected. Mounts it made before the error live in the container's
 * mount namespace and go with it.
 */
#ifndef GPUSLICE_HOOK_H
#define GPUSLICE_HOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* ---- die.c ---------------------------------------------------------------- */

/* Prints "gpuslice-hook: MESSAGE" and exits 1. */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- oci_state.c ------------------------------------------------------------ */

struct oci_container {
    pid_t pid;              /* state.pid: see enter.c for whose PID it is */
    char id[256];
    char bundle[4096];
    char root[4096];        /* root.path made absolute (relative to the bundle) */
    bool root_readonly;
    char tenant[256];       /* the gpuslice.io/tenant annotation, "" if absent */
    char cgroups_path[4096]; /* linux.cgroupsPath of config.json, "" if absent */
};

/* Reads the state JSON from fd and the bundle's config.json; dies on error. */
void oci_read(int state_fd, struct oci_container *c);

/* ---- enter.c --------------------------------------------------------------- */

/* Makes the calling process see the container's mounts: nothing to do at
 * createContainer (the runtime runs the hook in the container's mount
 * namespace), setns into /proc/PID/ns/mnt at prestart and createRuntime.
 * Returns whether it changed namespaces. */
bool enter_container_mounts(const struct oci_container *c);

/* ---- place.c --------------------------------------------------------------- */

/* The container's root, open while mounts are placed under it. */
struct root {
    int fd;                 /* O_PATH directory */
    const char *path;       /* absolute, in the current mount namespace */
    bool readonly;          /* root.readonly: scratch overlays are made read-only too */
    bool own_layer;         /* the root is the container's own writable overlay: mount
                             * points are made in it (scratch_is_own_layer) */
};

/* Bind-mounts source (an O_PATH fd opened on the host) read-only, nosuid,
 * nodev at target (an absolute path inside the container), creating the
 * mount point if the image lacks it (scratch.c). dir says whether source
 * is a directory. Dies on error. */
void place_bind(struct root *r, int source, bool dir, const char *target);

/* openat2(RESOLVE_IN_ROOT): opens rel inside the root without leaving it
 * through symlinks or "..". Returns the fd or -1 with errno. */
int open_in_root(const struct root *r, const char *rel, int flags);
/* openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): opens rel below r->fd,
 * refusing any symlink and "..". Returns the fd or -1 with errno. */
int open_beneath(const struct root *r, const char *rel, int flags);

/* ---- scratch.c -------------------------------------------------------------- */

/* Prepares the private tmpfs that overlays keep their upper layers on, at
 * staging (an empty directory of the host's gpuslice run directory). */
void scratch_init(const char *staging);
/* Whether the root (r->fd, at r->path) is the container's own writable
 * layer: the root of a writable overlayfs mount, as podman, CRI-O and
 * containerd's overlayfs snapshotter mount one for each container. */
bool scratch_is_own_layer(const struct root *r);
/* Creates the missing components of rel (relative to the root, whose
 * nearest existing ancestor is ancestor_rel) as directories, or the last
 * one as an empty file unless dir, without writing into the image: in the
 * container's own layer (r->own_layer) or on a tmpfs the runtime mounted
 * they are made in place; elsewhere the ancestor is covered by an overlay
 * whose upper layer is on the scratch tmpfs. Dies on error. */
void scratch_make(struct root *r, const char *ancestor_rel, const char *rel, bool dir);
/* After every mount: makes the overlays read-only where the root is, and
 * unmounts the staging tmpfs (the overlays keep their layers). */
void scratch_finish(void);

#endif
