"""fakecuda's engine: one kernel at a time per device across processes,
served in arrival order, so N busy processes get about 1/N each and the
device stays busy. Judged by the fakecuda meter."""
import time

from testlib import SPIN, Checks, LoadWatch, Machine, parse_line, wait_for

checks = Checks()
machine = Machine()

RUN_S, WINDOW_S = 6.0, 3.5


def two_spins(label, burners=0, depth=16):
    """Runs two busy processes, each keeping `depth` kernels in flight
    (beside `burners` busy loops of the test's own), and checks the split and how busy the device was kept over a
    window that starts once both have kernels on the device and ends
    before either stops: how busy the device is kept is the engine's
    doing, not the processes' start and exit. The processes wait for
    their kernels by sleeping: two processes spinning in their waits would
    starve the simulated device's own threads on a machine of two cores.
    Returns the spin processes' outputs."""
    loops = [machine.spawn(["sh", "-c", "while :; do :; done"]) for _ in range(burners)]
    snap = machine.snapshot()
    procs = [machine.spawn([SPIN, "--seconds", str(RUN_S), "--kernel-us", "1000", "--blocking-sync",
                            "--depth", str(depth)]) for _ in range(2)]
    started = wait_for(lambda: sum(p["kernels"] > 0 for p in machine.meter(since=snap)["processes"]) == 2,
                       RUN_S - WINDOW_S)
    window = machine.snapshot()
    watch = LoadWatch()
    time.sleep(WINDOW_S)
    meter = machine.meter(since=window)
    watch.stop()
    running = all(p.poll() is None for p in procs)
    for loop in loops:
        loop.kill()
        loop.wait()
    outs = [p.communicate()[0] for p in procs]
    checks.expect(started and running and all(p.returncode == 0 for p in procs),
                  "%s: both spin processes ran through the window and exit 0 (started: %s, still running after "
                  "it: %s, exit %s)" % (label, started, running, [p.returncode for p in procs]))
    shares = {p["pid"]: p["share"] for p in meter["processes"]}
    for p in procs:
        checks.expect(abs(shares.get(p.pid, 0) - 0.5) <= 0.05,
                      "%s: pid %d gets 50%% +- 5 points (meter: %.3f)" % (label, p.pid, shares.get(p.pid, 0)))
    util = meter["devices"][0]["utilization"]
    checks.expect(util >= 0.85, "%s: device busy %.1f %% of the %.1f s window (>= 85 %%; %s)"
                  % (label, 100 * util, WINDOW_S, watch))
    checks.expect(util <= 1.0005, "%s: device busy %.2f %% of the window: never two kernels at once"
                  % (label, 100 * util))
    return outs


# Two busy processes. Busy: 95 % of the window beside a busy loop on 2
# CPUs, 71 % with an engine whose release wakes nobody (waiters see it at
# their next timeout).
snap = machine.snapshot()
outs = two_spins("two processes")
total = machine.meter(since=snap)
kernels = sum(int((parse_line(o, "spin") or {}).get("kernels", -1)) for o in outs)
checks.expect(total["devices"][0]["kernels"] == kernels,
              "meter counts every kernel the processes launched (%d)" % kernels)

# The same with both CPUs kept busy: a GPU switches from one context to the
# next by itself, so how late the host runs the next process's worker
# costs no device time. Each handover is backdated to the moment the last
# holder's work ended; an engine that starts the next context's kernel
# only when its worker thread runs kept the device 51 % busy here. Each
# process keeps 64 ms of kernels in flight, so that what is judged is the
# engine's handovers (one per kernel, the processes' kernels served in
# arrival order), not a process starved of the CPU for longer than its
# queue lasts: with 16 in flight and a third busy loop beside the test's
# two, the device was kept 84.3 % busy.
two_spins("both CPUs busy", burners=2, depth=64)

# Three busy processes with different kernel lengths still split by time.
snap = machine.snapshot()
watch = LoadWatch()
procs = [machine.spawn([SPIN, "--seconds", "3", "--kernel-us", str(us), "--blocking-sync"]) for us in (500, 1000, 2000)]
for p in procs:
    p.communicate()
meter = machine.meter(since=snap)
watch.stop()
for p in meter["processes"]:
    checks.expect(abs(p["share"] - 1 / 3) <= 0.07,
                  "3 processes: pid %d gets a third +- 7 points (meter: %.3f; %s)" % (p["pid"], p["share"], watch))

checks.finish()
