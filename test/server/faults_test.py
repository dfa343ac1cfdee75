"""Faults: nothing hangs and nothing crashes the application. A killed
holder frees the GPU at once; a stopped one loses its slice after the
grace period; the server can die and come back under either policy; bad
clients are dropped alone; and a client cannot act as another tenant."""
import json
import os
import signal
import subprocess
import sys
import time

from testlib import PROTO_CLIENT, Checks, LoadWatch, Machine, Server, tenant_shares

# --no-timing (the sanitizer builds, several times slower): the same
# events, judged with wide margins; the plain build judges the timing.
TIMING = "--no-timing" not in sys.argv[1:]

checks = Checks()


def kernels(machine, pid):
    for p in machine.meter()["processes"]:
        if p["pid"] == pid:
            return p["kernels"]
    return 0


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def holder(server):
    devices = server.status()["devices"]
    return devices[0]["holder"] if devices else None


def finished_ok(procs, what):
    for p in procs:
        p.communicate(timeout=60)
    checks.expect(all(p.returncode == 0 for p in procs), "%s: every application exits 0 (%s)"
                  % (what, [p.returncode for p in procs]))


# ---- SIGKILL of the holder --------------------------------------------------------
machine = Machine()
server = Server(machine, {"a": "quantum_ms = 1000\n", "b": "share = 1\n"})
a = server.spin("a", 30)
wait_for(lambda: holder(server) == "a")
b = server.spin("b", 30)
wait_for(lambda: holder(server) == "a" and server.status()["devices"][0]["queue"] == ["b"])
wait_for(lambda: holder(server) == "a" and server.status()["devices"][0].get("slice_remaining_ms", 0) > 600)
before = kernels(machine, b.pid)
time.sleep(0.05)
stable = kernels(machine, b.pid) == before
watch = LoadWatch()
a.kill()
killed = time.monotonic()
ran = wait_for(lambda: kernels(machine, b.pid) > before, timeout=2.0)
delay = (time.monotonic() - killed) * 1000
watch.stop()
limit_ms = 50 if TIMING else 250
checks.expect(stable and ran and delay <= limit_ms,
              "SIGKILL of the holder: the next tenant runs within %d ms (%.1f ms; %s)" % (limit_ms, delay, watch))
a.wait()
b.kill()
b.wait()
server.stop()

# ---- SIGSTOP / SIGCONT of the holder -------------------------------------------------
machine = Machine()
server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"}, grace_ms=250)
a = server.spin("a", 8)
b = server.spin("b", 8)
time.sleep(1.0)
a.send_signal(signal.SIGSTOP)
time.sleep(0.4)  # past the deadline + grace of any slice a held
snap = machine.snapshot()
watch = LoadWatch()
time.sleep(1.0)
stopped = tenant_shares(machine.meter(since=snap), {"b": [b.pid]})
checks.expect(stopped["b"] >= 0.9, "with the holder stopped, the other tenant gets the GPU (%.1f%%; %s)"
              % (100 * stopped["b"], watch.stop()))
a.send_signal(signal.SIGCONT)
time.sleep(1.0)
snap = machine.snapshot()
watch = LoadWatch()
time.sleep(2.5)
shares = tenant_shares(machine.meter(since=snap), {"a": [a.pid], "b": [b.pid]})
checks.expect(abs(shares["a"] - 0.5) <= 0.05, "after SIGCONT the shares recover to 50/50 (%.1f/%.1f; %s)"
              % (100 * shares["a"], 100 * shares["b"], watch.stop()))
finished_ok([a, b], "SIGSTOP/SIGCONT")
checks.expect("did not release within 250 ms" in server.log(), "the stopped holder's slice was revoked and logged")
server.stop()

# ---- the server dies and comes back, under both policies --------------------------------
for policy in ("wait", "open"):
    machine = Machine()
    server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
    a = server.spin("a", 8, GPUSLICE_ON_SERVER_DOWN=policy)
    b = server.spin("b", 8, GPUSLICE_ON_SERVER_DOWN=policy)
    time.sleep(1.5)
    server.kill(signal.SIGKILL)
    time.sleep(0.2)
    snap = machine.snapshot()
    watch = LoadWatch()
    time.sleep(1.0)
    down = machine.meter(since=snap)
    watch.stop()
    busy = down["devices"][0]["utilization"]
    if policy == "wait":
        checks.expect(busy < 0.05, "wait: with the server down, GPU work waits (utilization %.1f%%)" % (100 * busy))
    else:
        both = tenant_shares(down, {"a": [a.pid], "b": [b.pid]})
        # Unthrottled, the two keep the GPU 94-95 % busy here, and 84.7 %
        # was seen once in a fresh-clone run; under `wait` it is under 5 %:
        # 80 % still tells the policies apart.
        checks.expect(busy > (0.8 if TIMING else 0.6) and min(both.values()) > 0.2,
                      "open: with the server down, both run unthrottled (utilization %.1f%%; %s)" % (100 * busy, watch))
    server.start()
    time.sleep(1.5)  # reconnection: at most 1 s between tries
    snap = machine.snapshot()
    watch = LoadWatch()
    time.sleep(2.0)
    shares = tenant_shares(machine.meter(since=snap), {"a": [a.pid], "b": [b.pid]})
    checks.expect(abs(shares["a"] - 0.5) <= 0.05, "%s: after the restart the shares recover (%.1f/%.1f; %s)"
                  % (policy, 100 * shares["a"], 100 * shares["b"], watch.stop()))
    finished_ok([a, b], "server restart, " + policy)
    server.stop()

# ---- malformed clients are dropped alone ----------------------------------------------
machine = Machine()
server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
a = server.spin("a", 14)
time.sleep(0.5)
for kind in ("short", "magic", "version", "type", "length", "field", "oversized", "unexpected", "silent"):
    out = subprocess.run([PROTO_CLIENT, server.socket("b"), "bad", kind], capture_output=True, text=True,
                         timeout=30).stdout
    checks.expect(out.strip().endswith("closed"), "malformed (%s): connection closed (%s)" % (kind, out.strip()))
    if kind == "version":
        checks.expect("protocol version mismatch" in out, "version mismatch: the client is told clearly (%s)" % out.strip())
before = kernels(machine, a.pid)
time.sleep(0.3)
checks.expect(kernels(machine, a.pid) > before and server.proc.poll() is None,
              "the server and the well-behaved client carry on")
log = server.log()
checks.expect(log.count("connection closed") >= 9, "one log line per dropped connection (%d)" % log.count("connection closed"))
a.kill()
a.wait()
server.stop()

# ---- a client cannot act as another tenant --------------------------------------------
machine = Machine()
server = Server(machine, {"a": "share = 1\n", "b": "quantum_ms = 1000\n"})
out = subprocess.run([PROTO_CLIENT, server.socket("a"), "hello"], capture_output=True, text=True).stdout
checks.expect(out.strip() == "welcome a", "a client on a's socket is tenant a, whatever it says (%s)" % out.strip())
b = server.spin("b", 30)
wait_for(lambda: holder(server) == "b" and server.status()["devices"][0].get("slice_remaining_ms", 0) > 700)
uuid = server.status()["devices"][0]["uuid"][4:].replace("-", "")
out = subprocess.run([PROTO_CLIENT, server.socket("a"), "steal", uuid, "300"], capture_output=True,
                     text=True, timeout=30).stdout
checks.expect(out.strip() == "no-grant", "releasing b's grants from a's socket does not free b's slice (%s)" % out.strip())
checks.expect(holder(server) == "b", "b still holds its slice")
b.kill()
b.wait()
server.stop()

checks.finish()
