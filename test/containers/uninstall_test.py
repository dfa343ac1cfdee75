"""gpuslice-server --uninstall with podman and CDI (issue 29): running
containers carry on ungated, and new containers that still name a tenant
start, without the shim.

Before, there was no uninstall: the server's spec went with it (new
containers naming a tenant failed to start) and running processes with the
default `wait` policy waited for a server for ever.

A container of a `limit = 0.3` tenant (uid 65534, read-only root) runs,
held to 30 % by the fakecuda meter. `gpuslice-server --uninstall` stops
the server and takes gpuslice off: the container's process runs on and
takes the whole device (over 85 %), and says why in its log. A new
container that names the tenant (`--device gpuslice.io/tenant=...`)
starts: it has no tenant directory at /run/gpuslice, no preload list
(podman leaves empty mount points in a --rootfs directory) and no
LD_PRELOAD, but GPUSLICE_UNINSTALLED=1, and its spin runs ungated. A container that
names no tenant starts too."""
import os
import subprocess
import time

import ctlib
import runtimes
from ctlib import Checks, Cleanup, Server
from testlib import SERVER

ctlib.require({"podman": "podman", "runc": "runc"})
spec = ctlib.claim_cdi_spec()
prefix = "u%d-" % os.getpid()
checks = Checks()
with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"))
    cleanup.add(lambda: os.path.exists(spec) and os.unlink(spec))
    server = Server(machine, ctlib.tenants(prefix), cdi_dir=ctlib.CDI_DIR)
    cleanup.add(server.stop)
    podman = runtimes.Podman(machine)
    cleanup.add(podman.cleanup)
    device = ["--device", "gpuslice.io/tenant=" + prefix + "capped"]

    before = machine.live_ids()
    running = podman.start("running", rootfs, ctlib.spin_argv(12), args=device + ["-e", "GPUSLICE_LOG=info"],
                           user=65534, read_only=True)
    ctlib.wait_new_id(machine, before)
    time.sleep(0.5)
    snap = machine.snapshot()
    time.sleep(2.0)
    gated = machine.meter(since=snap)["devices"][0]["utilization"]
    checks.expect(gated <= 0.36, "before: the limit = 0.3 tenant's container uses %.1f%% of the device" % (100 * gated))

    u = subprocess.run([SERVER, "--uninstall", "--run-dir", server.run_dir, "--cdi-dir", ctlib.CDI_DIR],
                       capture_output=True, text=True, timeout=60)
    checks.expect(u.returncode == 0 and server.proc.poll() is not None,
                  "--uninstall stops the server and exits 0 (%d: %s)" % (u.returncode, u.stderr.strip()[-300:]))
    time.sleep(0.5)
    snap = machine.snapshot()
    time.sleep(2.0)
    ungated = machine.meter(since=snap)["devices"][0]["utilization"]
    checks.expect(ungated >= 0.85, "after: the running container carries on ungated: %.1f%% of the device"
                  % (100 * ungated))
    code, out = running.wait()
    checks.expect(code == 0 and "spin: " in out and "gpuslice was uninstalled from this node" in out,
                  "it finishes, and its log says it ran ungated because of the uninstall (%d: %s)"
                  % (code, out.strip()[-300:]))

    probe = ["/bin/sh", "-c", "echo LD_PRELOAD=[$LD_PRELOAD] UNINSTALLED=[$GPUSLICE_UNINSTALLED]; "
             "test -e /run/gpuslice/on-server-down && echo HAS-TENANT-DIR; test -s /etc/ld.so.preload && echo HAS-PRELOAD; "
             "exec " + " ".join([ctlib.C_SPIN, "--seconds", "1", "--kernel-us", "1000", "--blocking-sync"])]
    code, out, err = podman.run("new", rootfs, probe, args=device, user=65534, read_only=True)
    rate = float((out.split("kernels_per_s=") + ["0"])[1].split()[0] or 0)
    checks.expect(code == 0 and "LD_PRELOAD=[] UNINSTALLED=[1]" in out and "HAS-" not in out,
                  "a new container naming the tenant starts without gpuslice (%d: %s)" % (code, (out + err).strip()[-300:]))
    checks.expect(rate >= 450, "... and runs ungated: %.0f 1-ms kernels a second (the tenant's limit is 0.3)" % rate)
    code, out, err = podman.run("plain", rootfs, ["/bin/true"])
    checks.expect(code == 0, "a container naming no tenant starts (%d: %s)" % (code, err.strip()[-200:]))
checks.finish()
