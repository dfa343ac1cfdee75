"""Plain runc with gpuslice-hook in config.json, at createRuntime for one
container (uid 65534, read-only root) and prestart for the other: both
run in the host's namespaces and enter the container's mount namespace.
Two containers at 3:1 split 75/25; gpuslicectl status knows them by host
PID and container ID (from their cgroup path); a process without
LD_PRELOAD is gated by /etc/ld.so.preload; an unknown tenant does not
start and the error names it; nothing was written into the image."""
import os

import ctlib
import runtimes
from ctlib import Checks, Cleanup, Server

ctlib.require({"runc": "runc"})
ctlib.require_hook()
checks = Checks()
with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"))
    server = Server(machine, ctlib.tenants())
    cleanup.add(server.stop)
    runc = runtimes.Runc(machine, server)
    cleanup.add(runc.cleanup)

    ctlib.measure_split(
        checks, machine, server, "runc",
        lambda s: runc.start("a", rootfs, ctlib.spin_argv(s), "a", "createRuntime", user=65534, read_only=True),
        lambda s: runc.start("b", rootfs, ctlib.spin_argv(s), "b", "prestart"))
    util, code, out = ctlib.measure_cap(
        checks, machine, "runc",
        lambda s: runc.start("capped", rootfs, ctlib.escape_argv(s), "capped", "createRuntime", user=65534,
                             read_only=True))
    ctlib.check_escape(checks, "runc", util, code, out)

    code, out = runc.run("unknown", rootfs, ["/bin/true"], "nope", "createRuntime")
    checks.expect(code != 0 and "unknown tenant 'nope'" in out,
                  "runc: an unknown tenant does not start and the error names it (%d: %s)"
                  % (code, out.strip()[-240:]))
    left = ctlib.gpuslice_paths_in(rootfs)
    checks.expect(not left, "runc: nothing of gpuslice's was written into the image (%s)" % left)
checks.finish()
