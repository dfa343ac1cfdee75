"""A container under gpuslice-hook writes where it would without it.

The image (podman build, FROM scratch) lacks /etc/ld.so.preload,
/usr/lib/gpuslice and /run/gpuslice, so the hook must make those mount
points. Its root is podman's overlay for this container, so they are made
in the container's own writable layer, and what the container writes under
/etc, /usr/lib and /run lands there too, with no size limit of gpuslice's.
(Before, the hook covered those directories with overlays whose upper
layers shared one 1 MiB tmpfs: a write of 4 MiB under /etc failed with EIO
at about 1 MiB, and nothing written under them reached the container's
root.)

1. A container served by the hook writes 4 MiB each to /etc, /usr/lib and
   /run: each write succeeds and the files are in the container's root
   afterwards (podman mount), and `podman diff` lists the same changes as
   for the same container without the hook, plus gpuslice's mount points.
2. The image is unchanged: a container of it without the hook has none of
   gpuslice's paths and none of the files written.
3. A read-only root (--read-only): served, and a write under /etc fails
   with "Read-only file system" as it does without the hook.
4. It is gated: as uid 65534, a process without LD_PRELOAD in a
   limit = 0.3 tenant uses at most 31 % of the GPU.
5. A root that is a plain directory (--rootfs, possibly shared by other
   containers) is never written: the hook covers /etc with an overlay
   backed by memory (no 1 MiB limit: the 4 MiB writes succeed), and the
   directory gets neither gpuslice's paths nor the writes.

Needs root, podman and runc; skipped otherwise, a failure under
GPUSLICE_REQUIRE_CONTAINERS=1."""
import json
import os
import subprocess

import ctlib
import runtimes
from ctlib import Checks, Cleanup, Server

ctlib.require({"podman": "podman", "runc": "runc"})
ctlib.require_hook()
checks = Checks()
PARENT = "gpuslice-test-%d" % os.getpid()
SIZE = 4 << 20
DIRS = ("/etc", "/usr/lib", "/run")
# Writes SIZE bytes under each directory; one line per directory.
WRITE = "; ".join('if out=$(dd if=/dev/zero of=%s/gs-big bs=64k count=%d 2>&1); then echo "%s ok"; '
                  'else echo "%s failed: $(echo $out | tr -d \'\\n\')"; fi' % (d, SIZE >> 16, d, d) for d in DIRS)
GPUSLICE = {ctlib.C_PRELOAD, os.path.dirname(ctlib.C_SHIM), ctlib.C_SHIM, ctlib.C_RUN_DIR}

with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    cleanup.add(lambda: runtimes.remove_cgroups(PARENT))  # after the containers are gone
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"), extra=("dd", "tr"))
    server = Server(machine, ctlib.tenants())
    cleanup.add(server.stop)
    image = "localhost/gpuslice-test-%d-plain" % os.getpid()
    cleanup.add(lambda: runtimes.remove_image(image))
    runtimes.build_image(image, rootfs)
    hooks_dir = os.path.join(machine.dir, "hooks.d")
    os.mkdir(hooks_dir)
    with open(os.path.join(hooks_dir, "gpuslice.json"), "w") as f:
        json.dump(runtimes.hook_config(server.run_dir, allow=["*=/%s/*" % PARENT]), f)
    podman = runtimes.Podman(machine, ["--hooks-dir", hooks_dir])
    cleanup.add(podman.cleanup)

    def served(tenant, *more):
        return ["--cgroup-parent", "/" + PARENT, "--annotation", "gpuslice.io/tenant=" + tenant] + list(more)

    def diff(name):
        out = subprocess.run(["podman", "diff", podman.prefix + name], capture_output=True, text=True).stdout
        return {tuple(line.split(None, 1)) for line in out.splitlines() if line.strip()}

    # ---- 1. writes land in the container's own root --------------------------------
    script = ["/bin/sh", "-c", WRITE + "; cat /etc/ld.so.preload 2>/dev/null; true"]
    code, out, err = podman.run("hooked", image, script, args=served("a"))
    checks.expect(code == 0 and all("%s ok" % d in out for d in DIRS) and ctlib.C_SHIM in out,
                  "1: served by the hook, 4 MiB written to each of /etc, /usr/lib, /run succeed (%d: %s %s)"
                  % (code, out.strip().replace("\n", "; "), err.strip()[-300:]))
    mount = subprocess.run(["podman", "mount", podman.prefix + "hooked"], capture_output=True, text=True)
    merged = mount.stdout.strip()
    sizes = {}
    if mount.returncode == 0 and merged:
        for d in DIRS:
            p = os.path.join(merged, d.lstrip("/"), "gs-big")
            sizes[d] = os.path.getsize(p) if os.path.exists(p) else None
        subprocess.run(["podman", "umount", podman.prefix + "hooked"], capture_output=True)
    checks.expect(all(sizes.get(d) == SIZE for d in DIRS),
                  "1: ... and are in the container's root afterwards, %d bytes each (%s)" % (SIZE, sizes))
    code, out, err = podman.run("unhooked", image, script)
    hooked, unhooked = diff("hooked"), diff("unhooked")
    extra = {path for _, path in hooked - unhooked}
    checks.expect(code == 0 and unhooked and hooked >= unhooked and extra <= GPUSLICE,
                  "1: podman diff lists what it lists without the hook, plus gpuslice's mount points "
                  "(without: %s; more with the hook: %s)" % (sorted(unhooked), sorted(extra)))

    # ---- 2. the image is unchanged ---------------------------------------------------
    look = " ".join(sorted(GPUSLICE | {d + "/gs-big" for d in DIRS}))
    code, out, err = podman.run("image-check", image,
                                ["/bin/sh", "-c", "for p in %s; do [ -e $p ] && echo \"has $p\"; done; true" % look])
    checks.expect(code == 0 and "has" not in out,
                  "2: a new container of the image has none of gpuslice's paths or the files written (%d: %s)"
                  % (code, (out + err).strip()))

    # ---- 3. a read-only root ----------------------------------------------------------
    script = ["/bin/sh", "-c", "cat /etc/ld.so.preload; echo x > /etc/gs-new || echo refused"]
    code, out, err = podman.run("ro-hooked", image, script, args=served("a"), read_only=True)
    code2, out2, err2 = podman.run("ro-unhooked", image, script, read_only=True)
    checks.expect(code == 0 and ctlib.C_SHIM in out and "refused" in out and "Read-only file system" in err
                  and "refused" in out2 and "Read-only file system" in err2,
                  "3: a read-only root is served, and a write under /etc fails as without the hook "
                  "(%d: %s %s | without: %s %s)" % (code, out.strip(), err.strip()[-200:], out2.strip(), err2.strip()))

    # ---- 4. gated -----------------------------------------------------------------
    util, code, out = ctlib.measure_cap(
        checks, machine, "image",
        lambda s: podman.start("capped", image, ctlib.escape_argv(s), args=served("capped"), user=65534))
    ctlib.check_escape(checks, "4: an image root", util, code, out)

    # ---- 5. a plain directory as the root -------------------------------------------
    script = ["/bin/sh", "-c", WRITE + "; cat /etc/ld.so.preload 2>/dev/null; true"]
    code, out, err = podman.run("rootfs", rootfs, script, args=served("a"))
    checks.expect(code == 0 and all("%s ok" % d in out for d in DIRS) and ctlib.C_SHIM in out,
                  "5: with --rootfs DIR, 4 MiB written to each of /etc, /usr/lib, /run succeed (%d: %s %s)"
                  % (code, out.strip().replace("\n", "; "), err.strip()[-300:]))
    left = ctlib.gpuslice_paths_in(rootfs) + [d for d in ("etc", "usr/lib", "run")
                                              if os.path.exists(os.path.join(rootfs, d, "gs-big"))]
    checks.expect(not left, "5: ... and nothing of gpuslice's, nor what was written under a covered directory, "
                  "reached the directory (%s)" % left)
checks.finish()
