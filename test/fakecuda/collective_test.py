"""fakecuda's collective kernels: two ranks of one group on devices 0 and 1
of one state file (spin --collective). Each collective holds its device
until both ranks have started it, then runs its own length; a rank that
starts late keeps its peer's device busy meanwhile; a rank that never comes
ends the wait after FAKECUDA_COLLECTIVE_TIMEOUT_NS; a waiting collective is
time-sliced against another process like any kernel. Judged by the
fakecuda meter and the processes' own wall times.

With --no-timing (the sanitizer builds, whose workers are slow) the same
runs are judged with wide margins."""
import subprocess
import sys
import time

from testlib import SPIN, Checks, LoadWatch, Machine, parse_line

TIMING = "--no-timing" not in sys.argv[1:]
checks = Checks()
machine = Machine(devices=2)

KERNEL_US = 2000
COUNT = 500                      # 1 s of collectives per rank
WORK_S = COUNT * KERNEL_US / 1e6
SLACK = 1.0 if TIMING else 3.0   # how far a ratio may stray, in units of the plain margin


def rank(group, r, nranks=2, count=COUNT, device=None, env=None, stderr=None):
    argv = [SPIN, "--collective", "%d:%d:%d" % (group, r, nranks), "--count", str(count),
            "--kernel-us", str(KERNEL_US), "--device", str(r if device is None else device),
            "--blocking-sync"]
    return machine.spawn(argv, env=env or machine.env, stderr=stderr)


def finish(proc, timeout=60):
    out = proc.communicate(timeout=timeout)
    return proc.returncode, parse_line(out[0], "spin"), out[1]


def busy_by_pid(meter):
    return {(p["pid"], p["device"]): p["busy_ns"] / 1e9 for p in meter["processes"]}


# ---- (a) both ranks run: each collective takes its own length ----------------
snap = machine.snapshot()
watch = LoadWatch()
procs = [rank(1, 0), rank(1, 1)]
results = [finish(p) for p in procs]
meter = machine.meter(since=snap)
watch.stop()
checks.expect(all(rc == 0 and line for rc, line, _ in results), "(a) both ranks exit 0 and report")
lines = [line for _, line, _ in results]
if all(lines):
    checks.expect(all(line["collective"] == "1:%d:2" % i for i, line in enumerate(lines)),
                  "(a) the report line ends with collective=GROUP:RANK:NRANKS")
    checks.expect(all(int(line["kernels"]) == COUNT for line in lines), "(a) each rank ran %d collectives" % COUNT)
    # The rank that starts second never waits long: its wall time is the
    # collectives' own.
    fastest = min(float(line["wall_s"]) for line in lines)
    checks.expect(0.95 * WORK_S <= fastest <= (1 + 0.3 * SLACK) * WORK_S,
                  "(a) %d collectives of %d us take %.2f s (wall %.3f s; %s)" % (COUNT, KERNEL_US, WORK_S, fastest, watch))
    busy = busy_by_pid(meter)
    for i, line in enumerate(lines):
        b = busy.get((int(line["pid"]), i), 0.0)
        checks.expect(0.97 * WORK_S <= b <= float(line["wall_s"]) + 0.05,
                      "(a) rank %d: device %d busy %.3f s, between the collectives' %.2f s and its wall %s s"
                      % (i, i, b, WORK_S, line["wall_s"]))
    checks.expect(meter["devices"][0]["kernels"] == COUNT and meter["devices"][1]["kernels"] == COUNT,
                  "(a) the meter counts %d kernels on each device" % COUNT)

# ---- (b) rank 1 starts 1 s late: rank 0's device is busy meanwhile -----------
snap = machine.snapshot()
watch = LoadWatch()
t0 = time.monotonic()
p0 = rank(2, 0)
time.sleep(1.0)
delay = time.monotonic() - t0
p1 = rank(2, 1)
results = [finish(p0), finish(p1)]
meter = machine.meter(since=snap)
watch.stop()
checks.expect(all(rc == 0 and line for rc, line, _ in results), "(b) both ranks exit 0 and report")
if all(line for _, line, _ in results):
    busy = busy_by_pid(meter)
    b0 = busy.get((int(results[0][1]["pid"]), 0), 0.0)
    b1 = busy.get((int(results[1][1]["pid"]), 1), 0.0)
    waited = b0 - b1
    checks.expect(abs(waited - delay) <= 0.15 * SLACK * delay + 0.05,
                  "(b) rank 0's device is busy %.3f s longer than rank 1's: the %.3f s it waited for rank 1 (%s)"
                  % (waited, delay, watch))
    wall0 = float(results[0][1]["wall_s"])
    checks.expect(abs(wall0 - (delay + WORK_S)) <= 0.15 * SLACK * (delay + WORK_S),
                  "(b) rank 0 took %.3f s: the wait plus its collectives (%.3f s; %s)" % (wall0, delay + WORK_S, watch))

# ---- (c) a rank that never comes: the timeout ends each collective -----------
timeout_env = dict(machine.env, FAKECUDA_COLLECTIVE_TIMEOUT_NS="400000000")
snap = machine.snapshot()
start = time.monotonic()
p = rank(3, 0, count=2, env=timeout_env, stderr=subprocess.PIPE)
try:
    rc, line, err = finish(p, timeout=30)
except subprocess.TimeoutExpired:
    p.kill()
    rc, line, err = None, None, ""
wall = time.monotonic() - start
meter = machine.meter(since=snap)
checks.expect(rc == 0 and line is not None, "(c) the lone rank exits 0 after %.2f s instead of hanging" % wall)
timeouts = [l for l in (err or "").splitlines() if "collective group=3" in l and "timed out" in l]
checks.expect(len(timeouts) == 2 and all("waiting for rank(s) 1 to start" in l for l in timeouts),
              "(c) one 'timed out' line per collective, naming the missing rank: %r" % timeouts)
if line:
    b = busy_by_pid(meter).get((int(line["pid"]), 0), 0.0)
    checks.expect(0.78 <= b <= 0.8 + 0.2 * SLACK,
                  "(c) the two collectives held device 0 for their timeouts: busy %.3f s of 0.8 s" % b)

# ---- (d) a waiting collective is time-sliced against another process ---------
# Rank 0 waits 1.5 s for rank 1 while a plain spin shares device 0: the
# device is split about evenly over the wait, and the spin keeps going.
snap = machine.snapshot()
watch = LoadWatch()
p0 = rank(4, 0, count=1)
other = machine.spawn([SPIN, "--seconds", "1.5", "--kernel-us", "1000", "--device", "0", "--blocking-sync"])
time.sleep(1.5)
p1 = rank(4, 1, count=1)
results = [finish(p0), finish(other), finish(p1)]
meter = machine.meter(since=snap)
watch.stop()
checks.expect(all(rc == 0 for rc, _, _ in results), "(d) all three processes exit 0")
if all(line for _, line, _ in results):
    shares = {(p["pid"], p["device"]): p["share"] for p in meter["processes"]}
    s0 = shares.get((int(results[0][1]["pid"]), 0), 0.0)
    s_other = shares.get((int(results[1][1]["pid"]), 0), 0.0)
    checks.expect(abs(s0 - 0.5) <= 0.1 * SLACK and abs(s_other - 0.5) <= 0.1 * SLACK,
                  "(d) device 0 split between the waiting collective and a spin: %.3f / %.3f (%s)" % (s0, s_other, watch))

# ---- bad arguments ----------------------------------------------------------
for bad in (["--collective", "0:0:2", "--count", "1"], ["--collective", "1:2:2", "--count", "1"],
            ["--collective", "1:0:65", "--count", "1"], ["--collective", "1:0", "--count", "1"],
            ["--collective", "1:0:2"]):
    r = subprocess.run([SPIN] + bad, env=machine.env, capture_output=True, text=True)
    checks.expect(r.returncode == 1 and "spin:" in r.stderr, "spin %s is a usage error (exit %d)"
                  % (" ".join(bad), r.returncode))

checks.finish()
