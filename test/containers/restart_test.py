"""A server restart (an upgrade) under load, with podman and CDI (issue
29): no container start fails, and running containers carry on.

Before, SIGTERM removed the CDI spec, so a container asked for while the
server restarted failed ("unresolvable CDI devices gpuslice.io/tenant=...").

Two long containers keep tenants a and b (3:1) busy. Meanwhile the
server is restarted twice, with 1.5 s without any server each time, and
containers of tenant a are started without a pause from before the first
restart to after the second, one after the other, each running 100 1-ms
kernels; one more is started while no server runs, deliberately. Checks:
every `podman run` starts and its spin exits 0 (some of them while no
server ran); the long containers reconnect after each restart and finish;
and after the restarts a and b split 75/25 again."""
import os
import subprocess
import threading
import time

import ctlib
import runtimes
from ctlib import Checks, Cleanup, Server

ctlib.require({"podman": "podman", "runc": "runc"})
spec = ctlib.claim_cdi_spec()
prefix = "r%d-" % os.getpid()
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

    def device(tenant):
        return ["--device", "gpuslice.io/tenant=" + prefix + tenant]

    def connected(pid):
        try:
            return any(p["pid"] == pid for t in server.status()["tenants"] for p in t["processes"])
        except (subprocess.CalledProcessError, ValueError):
            return False

    before = machine.live_ids()
    long_a = podman.start("long-a", rootfs, ctlib.spin_argv(32), args=device("a"), user=65534, read_only=True)
    id_a = ctlib.wait_new_id(machine, before)
    long_b = podman.start("long-b", rootfs, ctlib.spin_argv(30), args=device("b"))
    ctlib.wait_new_id(machine, before | {id_a})

    # Containers one after the other, throughout the restarts.
    results = []  # (started at, stopped server?, exit code, output)
    down = []     # (from, to) while no server ran
    stop_loop = threading.Event()

    def loop():
        n = 0
        while not stop_loop.is_set():
            n += 1
            t0 = time.monotonic()
            code, out, err = podman.run("short-%d" % n, rootfs,
                                        [ctlib.C_SPIN, "--count", "100", "--kernel-us", "1000", "--blocking-sync"],
                                        args=device("a"), user=65534, read_only=True)
            results.append((t0, code, (out + err).strip()))

    t = threading.Thread(target=loop, daemon=True)
    cleanup.add(lambda: (stop_loop.set(), t.join(timeout=180)))  # before podman.cleanup, whatever happens
    t.start()
    time.sleep(2.0)
    gap = None
    for i in range(2):
        server.stop()
        t0 = time.monotonic()
        if i == 0:  # one container asked for while certainly no server runs
            gap = podman.start("in-gap", rootfs, ctlib.spin_argv(1), args=device("a"), user=65534, read_only=True)
        time.sleep(max(0.0, 1.5 - (time.monotonic() - t0)))
        server.start()
        down.append((t0, time.monotonic()))
        back = ctlib.testlib.wait_for(lambda: connected(long_a.host_pid()) and connected(long_b.host_pid()), 5.0)
        checks.expect(back, "restart %d: both long containers reconnect within 5 s" % (i + 1))
        time.sleep(2.0)
    stop_loop.set()
    t.join(timeout=180)

    failed = [(code, out[-200:]) for _, code, out in results if code != 0 or "spin: " not in out]
    during = [r for r in results if any(a - 0.5 <= r[0] <= b for a, b in down)]
    checks.expect(len(results) >= 4 and not failed,
                  "%d containers started one after the other throughout two restarts: none failed (%s)"
                  % (len(results), failed[:2]))
    code, out = gap.wait()
    checks.expect(code == 0 and "spin: " in out,
                  "a container asked for while no server ran starts, and finishes once one is back (%d: %s)"
                  % (code, out.strip()[-200:]))
    print("%d of them were started within 0.5 s before or during a gap" % len(during))

    ids = {"a": id_a}
    snap = machine.snapshot()
    time.sleep(4.0)
    meter = machine.meter(since=snap)
    shares = {p["id"]: p["share"] for p in meter["processes"]}
    sa = shares.get(id_a, 0.0)
    sb = sum(s for pid, s in shares.items() if pid != id_a)
    checks.expect(abs(sa - 0.75) <= 0.05, "after the restarts the long containers split 3:1 again (%.1f/%.1f)"
                  % (100 * sa, 100 * sb))
    for name, c in (("a", long_a), ("b", long_b)):
        code, out = c.wait()
        checks.expect(code == 0 and "spin: " in out, "long container %s finishes (%d: %s)"
                      % (name, code, out.strip()[-200:]))
checks.finish()
