"""The bare route, podman with -v and -e: two containers in tenants at 3:1
split the GPU 75/25, gpuslicectl status knows them by host PID and
container ID, and a process that drops LD_PRELOAD is still gated by the
mounted /etc/ld.so.preload; without that mount the same process escapes
(so the check can fail). An unknown tenant has no directory to mount: the
container does not start."""
import os

import ctlib
import runtimes
from ctlib import C_PRELOAD, C_RUN_DIR, C_SHIM, SHIM, Checks, Cleanup, Server

ctlib.require({"podman": "podman", "runc": "runc"})
checks = Checks()
with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"))
    server = Server(machine, ctlib.tenants())
    cleanup.add(server.stop)
    podman = runtimes.Podman(machine)
    cleanup.add(podman.cleanup)

    def bare(tenant, preload=True):
        """The README's bare route for a tenant."""
        args = ["-v", "%s/tenants/%s:%s:ro" % (server.run_dir, tenant, C_RUN_DIR),
                "-v", "%s:%s:ro" % (SHIM, C_SHIM), "-e", "LD_PRELOAD=" + C_SHIM]
        if preload:
            args += ["-v", "%s/cdi/ld.so.preload:%s:ro" % (server.run_dir, C_PRELOAD)]
        return args

    ctlib.measure_split(
        checks, machine, server, "bare -v/-e",
        lambda s: podman.start("a", rootfs, ctlib.spin_argv(s), args=bare("a"), user=65534, read_only=True),
        lambda s: podman.start("b", rootfs, ctlib.spin_argv(s), args=bare("b")))
    util, code, out = ctlib.measure_cap(
        checks, machine, "bare",
        lambda s: podman.start("capped", rootfs, ctlib.escape_argv(s), args=bare("capped"), user=65534))
    ctlib.check_escape(checks, "bare -v/-e", util, code, out)
    util, code, out = ctlib.measure_cap(
        checks, machine, "bare",
        lambda s: podman.start("escape", rootfs, ctlib.escape_argv(s), args=bare("capped", preload=False)))
    ctlib.check_escape(checks, "bare -v/-e, no preload list", util, code, out, gated=False)
    code, out, err = podman.run("unknown", rootfs, ["/bin/true"], args=bare("nope"))
    checks.expect(code != 0 and "tenants/nope" in err,
                  "bare -v/-e: an unknown tenant's directory does not exist: the container does not start and "
                  "the error names it (%d: %s)" % (code, err.strip()[-200:]))
checks.finish()
