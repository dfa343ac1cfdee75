"""CDI with podman: a test-owned gpuslice-server writes its spec into
/etc/cdi (podman 4.3 has no --cdi-spec-dir; the file is removed at the
end), and `podman run --device gpuslice.io/tenant=NAME` puts a container
into a tenant. Two containers at 3:1 split 75/25, one of them as uid 65534
on a read-only root; gpuslicectl status knows them; a process without
LD_PRELOAD is still gated; a container handed its tenant's device
twice (as gpuslice-dra answers a claim of two requests) starts in it;
an unknown tenant does not start and the error
names it; a tenant added or removed is in (out of) the spec within 2 s and
podman follows; a running container reconnects after the server restarts."""
import json
import os
import subprocess
import time

import ctlib
import runtimes
from ctlib import Checks, Cleanup, Server

ctlib.require({"podman": "podman", "runc": "runc"})
CDI_DIR = "/etc/cdi"
SPEC = os.path.join(CDI_DIR, "gpuslice.json")
if os.path.exists(SPEC):
    # A spec left by a test run that was killed names run directories that
    # are gone (or none, after --uninstall): remove it. Any other belongs
    # to a server in use.
    try:
        with open(SPEC) as f:
            dirs = [m["hostPath"] for d in json.load(f)["devices"] for m in d["containerEdits"]["mounts"]
                    if m["containerPath"] == ctlib.C_RUN_DIR]
    except (OSError, ValueError, KeyError, TypeError):
        dirs = ["?"]
    if not any(os.path.exists(d) for d in dirs):  # none at all: an uninstall's inert spec
        print("removing a stale %s (its tenants' directories are gone)" % SPEC)
        os.unlink(SPEC)
    else:
        ctlib.skip("%s exists: another gpuslice-server writes there" % SPEC)
# Names no other spec on this host can have.
prefix = "t%d-" % os.getpid()
checks = Checks()
with Cleanup() as cleanup:
    machine = ctlib.SharedMachine()
    cleanup.add(machine.cleanup)
    rootfs = ctlib.build_rootfs(os.path.join(machine.dir, "rootfs"))
    os.makedirs(CDI_DIR, exist_ok=True)
    cleanup.add(lambda: os.path.exists(SPEC) and os.unlink(SPEC))
    server = Server(machine, ctlib.tenants(prefix), cdi_dir=CDI_DIR)
    cleanup.add(server.stop)
    podman = runtimes.Podman(machine)
    cleanup.add(podman.cleanup)

    def device(tenant):
        return ["--device", "gpuslice.io/tenant=" + prefix + tenant]

    ctlib.measure_split(
        checks, machine, server, "CDI",
        lambda s: podman.start("a", rootfs, ctlib.spin_argv(s), args=device("a"), user=65534, read_only=True),
        # gpuslice-dra answers each result of a claim with the tenant's
        # device, so a container using two requests of one claim is handed
        # the same CDI name twice: "b" is.
        lambda s: podman.start("b", rootfs, ctlib.spin_argv(s), args=device("b") + device("b")))
    util, code, out = ctlib.measure_cap(
        checks, machine, "CDI",
        lambda s: podman.start("capped", rootfs, ctlib.escape_argv(s), args=device("capped"), user=65534,
                               read_only=True))
    ctlib.check_escape(checks, "CDI", util, code, out)

    # A server restart (a DaemonSet upgrade): running containers have the
    # tenant's directory bind-mounted, so the new server must make its
    # socket in that same directory for them to reconnect.
    before = machine.live_ids()
    c = podman.start("restart", rootfs, ctlib.spin_argv(7), args=device("a"), user=65534, read_only=True)
    ctlib.wait_new_id(machine, before)
    pid = c.host_pid()
    server.stop()
    server.start()
    start = time.monotonic()
    back = False
    while not back and time.monotonic() - start < 5:
        time.sleep(0.1)
        back = any(p["pid"] == pid for t in server.status()["tenants"] for p in t["processes"])
    took = time.monotonic() - start
    if not back:  # its GPU work would wait for the server for ever
        subprocess.run(["podman", "kill", c.name], capture_output=True)
    code, out = c.wait()
    checks.expect(back and code == 0, "CDI: after the server restarts, a running container reconnects (%s) "
                  "and finishes (%d)" % ("within %.1f s" % took if back else "not within 5 s", code))

    code, out, err = podman.run("unknown", rootfs, ["/bin/true"], args=device("nope"))
    checks.expect(code != 0 and prefix + "nope" in err,
                  "CDI: an unknown tenant does not start and the error names it (%d: %s)" % (code, err.strip()))

    probe = ["/bin/sh", "-c", "test -S /run/gpuslice/gpuslice.sock && cat /etc/ld.so.preload"]
    server.write_tenant(prefix + "late", "share = 1\n")
    start = time.monotonic()
    while prefix + "late" not in open(SPEC).read() and time.monotonic() - start < 2:
        time.sleep(0.01)
    took = time.monotonic() - start
    code, out, err = podman.run("late", rootfs, probe, args=device("late"), user=65534)
    checks.expect(took < 2 and code == 0 and "libgpuslice.so" in out,
                  "CDI: a tenant added is in the spec within 2 s (%.3f s) and podman runs it (%d: %s)"
                  % (took, code, (out + err).strip()))
    os.unlink(os.path.join(server.conf, prefix + "late.conf"))
    start = time.monotonic()
    while prefix + "late" in open(SPEC).read() and time.monotonic() - start < 2:
        time.sleep(0.01)
    took = time.monotonic() - start
    code, out, err = podman.run("gone", rootfs, probe, args=device("late"))
    checks.expect(took < 2 and code != 0 and prefix + "late" in err,
                  "CDI: a tenant removed leaves the spec within 2 s (%.3f s); podman then refuses it (%d: %s)"
                  % (took, code, err.strip()))
    server.stop()
    checks.expect(os.path.exists(SPEC) and prefix + "a" in open(SPEC).read(),
                  "CDI: the server's spec stays in %s when it stops (a restart; the test removes it)" % CDI_DIR)
checks.finish()
