"""fakecuda's engine: one kernel at a time per device across processes,
served in arrival order, so N busy processes get about 1/N each and the
device stays busy. Judged by the fakecuda meter."""
import time

from testlib import SPIN, Checks, Machine, parse_line

checks = Checks()
machine = Machine()

# Two busy processes, 5 s each. They wait for their kernels by sleeping:
# two processes spinning in their waits would starve the simulated
# device's own threads on a machine of two cores.
snap = machine.snapshot()
start = time.monotonic()
procs = [machine.spawn([SPIN, "--seconds", "5", "--kernel-us", "1000", "--blocking-sync"]) for _ in range(2)]
outs = [p.communicate()[0] for p in procs]
wall = time.monotonic() - start
meter = machine.meter(since=snap)
shares = {p["pid"]: p["share"] for p in meter["processes"]}
checks.expect(all(p.returncode == 0 for p in procs), "both spin processes exit 0")
for out in outs:
    line = parse_line(out, "spin")
    pid = int(line["pid"])
    checks.expect(abs(shares.get(pid, 0) - 0.5) <= 0.05,
                  "pid %d gets 50%% +- 5 points (meter: %.3f)" % (pid, shares.get(pid, 0)))
busy = meter["devices"][0]["busy_ns"] / 1e9
checks.expect(busy >= 0.95 * wall, "device busy %.2f s of %.2f s wall (>= 95%%)" % (busy, wall))
kernels = sum(int(parse_line(o, "spin")["kernels"]) for o in outs)
checks.expect(meter["devices"][0]["kernels"] == kernels,
              "meter counts every kernel the processes launched (%d)" % kernels)

# Three busy processes with different kernel lengths still split by time.
snap = machine.snapshot()
procs = [machine.spawn([SPIN, "--seconds", "3", "--kernel-us", str(us), "--blocking-sync"]) for us in (500, 1000, 2000)]
for p in procs:
    p.communicate()
meter = machine.meter(since=snap)
for p in meter["processes"]:
    checks.expect(abs(p["share"] - 1 / 3) <= 0.07,
                  "3 processes: pid %d gets a third +- 7 points (meter: %.3f)" % (p["pid"], p["share"]))

checks.finish()
