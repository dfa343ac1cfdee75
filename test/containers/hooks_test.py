"""podman with gpuslice-hook from a hooks directory (deploy/oci/gpuslice.json,
stage createContainer: the hook runs inside the container's mount
namespace, as CRI-O runs hooks.d hooks too): the annotation
gpuslice.io/tenant=NAME puts a container into a tenant, which the hook's
rule --allow '*=/PARENT/*' admits for the containers run with
--cgroup-parent /PARENT. Two containers at
3:1 split 75/25, one as uid 65534 on a read-only root; gpuslicectl status
knows them; a process without LD_PRELOAD is gated by the mounted
/etc/ld.so.preload (a hook cannot set the environment: the preload list is
all there is); an unknown tenant does not start and the error names it;
and the hook wrote nothing into the image."""
import json
import os

import ctlib
import runtimes
from ctlib import Checks, Cleanup, Server

ctlib.require({"podman": "podman", "runc": "runc"})
ctlib.require_hook()
checks = Checks()
with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    # The hook admits any tenant for the containers of this cgroup parent.
    parent = "gpuslice-test-%d" % os.getpid()
    cleanup.add(lambda: runtimes.remove_cgroups(parent))  # after the containers are gone
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"))
    server = Server(machine, ctlib.tenants())
    cleanup.add(server.stop)
    hooks_dir = os.path.join(machine.dir, "hooks.d")
    os.mkdir(hooks_dir)
    with open(os.path.join(hooks_dir, "gpuslice.json"), "w") as f:
        json.dump(runtimes.hook_config(server.run_dir, allow=["*=/%s/*" % parent]), f)
    podman = runtimes.Podman(machine, ["--hooks-dir", hooks_dir], ["--cgroup-parent", "/" + parent])
    cleanup.add(podman.cleanup)

    def tenant(name):
        return ["--annotation", "gpuslice.io/tenant=" + name]

    ctlib.measure_split(
        checks, machine, server, "hooks.d",
        lambda s: podman.start("a", rootfs, ctlib.spin_argv(s), args=tenant("a"), user=65534, read_only=True),
        lambda s: podman.start("b", rootfs, ctlib.spin_argv(s), args=tenant("b")))
    util, code, out = ctlib.measure_cap(
        checks, machine, "hooks.d",
        lambda s: podman.start("capped", rootfs, ctlib.escape_argv(s), args=tenant("capped"), user=65534))
    ctlib.check_escape(checks, "hooks.d", util, code, out)

    code, out, err = podman.run("unknown", rootfs, ["/bin/true"], args=tenant("nope"))
    checks.expect(code != 0 and "unknown tenant 'nope'" in err,
                  "hooks.d: an unknown tenant does not start and the error names it (%d: %s)"
                  % (code, err.strip()[-240:]))
    code, out, err = podman.run("plain", rootfs, ["/bin/sh", "-c", "cat /etc/ld.so.preload || echo none"])
    checks.expect(code == 0 and "none" in out,
                  "hooks.d: a container without the annotation is left alone (%d: %s)" % (code, (out + err).strip()))
    left = ctlib.gpuslice_paths_in(rootfs)
    checks.expect(not left, "hooks.d: nothing of gpuslice's was written into the image (%s)" % left)
checks.finish()
