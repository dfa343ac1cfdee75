"""Time-slice shares under gpuslice-server, judged by the fakecuda meter: a
smoke run of each property on the real server, shim and simulated driver
(a weighted split, a limit, work conservation, a tenant of several
processes, a token per GPU).

The split among two to four tenants of any weights, and limits, are
proven exactly over thousands of seeded runs by the simulation (test/sim:
a clean run's shares within 0.5 points of the weights, limits in held
time), which runs the scheduler and the server's and the shim's glue
unchanged; what only this test shows is that the real programs around
them, the sockets, the threads, the drain on the driver's events,
deliver them."""
import sys
import time

from testlib import SPIN, Checks, LoadWatch, Machine, Server, tenant_shares

checks = Checks()
# How busy a lone tenant keeps the device: 85 % (beside a busy loop on 2
# CPUs the simulated device, whose threads need the CPU too, was kept 92.8
# to 97 % busy; one token for both GPUs would leave GPU 1 idle while b
# holds GPU 0). The sanitizer builds (--no-timing, several times slower):
# 75 %.
BUSY = 0.85 if "--no-timing" not in sys.argv[1:] else 0.75
WINDOW = 5.0   # seconds measured; CI tolerance is +-3 points over 5 s
WARMUP = 0.7   # let every process connect and queue work first


def measure(server, tenants, seconds=WINDOW):
    """Starts one spin per entry of tenants (a list of tenant names), measures
    a window after the warm-up, and returns ({tenant: share}, utilization,
    the window's LoadWatch)."""
    procs = [(t, server.spin(t, WARMUP + seconds + 0.5)) for t in tenants]
    time.sleep(WARMUP)
    snap = server.machine.snapshot()
    load = LoadWatch()
    time.sleep(seconds)
    meter = server.machine.meter(since=snap)
    load.stop()
    pids = {}
    for t, p in procs:
        pids.setdefault(t, []).append(p.pid)
    for t, p in procs:
        p.communicate()
        checks.expect(p.returncode == 0, "spin in tenant %s exits 0" % t)
    return tenant_shares(meter, pids), meter["devices"][0]["utilization"], load


def near(value, target, points):
    return abs(value - target) <= points / 100.0


# 1. Two busy tenants at 3:1.
machine = Machine()
server = Server(machine, {"a": "share = 3\n", "b": "share = 1\n"})
shares, util, load = measure(server, ["a", "b"])
checks.expect(near(shares["a"], 0.75, 3) and near(shares["b"], 0.25, 3),
              "3:1 -> 75/25 +-3 (got %.1f/%.1f; %s)" % (100 * shares["a"], 100 * shares["b"], load))
server.stop()

# 2. A lone tenant with limit 0.3, then a lone tenant without a limit.
machine = Machine()
server = Server(machine, {"capped": "limit = 0.3\n", "free": "share = 1\n"})
shares, util, load = measure(server, ["capped"])
checks.expect(shares["capped"] > 0 and util <= 0.31,
              "lone tenant with limit 0.3 uses <= 31%% of the device (got %.1f%%; %s)" % (100 * util, load))
shares, util, load = measure(server, ["free"], seconds=3)
checks.expect(util >= BUSY, "lone tenant without a limit gets >= %d%% (got %.1f%%; %s)" % (100 * BUSY, 100 * util, load))
server.stop()

# 3. Two processes in tenant a against one in tenant b, equal shares.
machine = Machine()
server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
shares, util, load = measure(server, ["a", "a", "b"])
checks.expect(near(shares["a"], 0.5, 3) and near(shares["b"], 0.5, 3),
              "2 processes in a vs 1 in b -> 50/50 by tenant +-3 (got %.1f/%.1f; %s)"
              % (100 * shares["a"], 100 * shares["b"], load))
server.stop()

# 4. Tokens are per GPU: tenant a busy on both GPUs, b only on GPU 0. a runs
# independent work on each GPU, so it says it is no gang (by default a tenant
# on two GPUs is one, and gets its slices on both at once: gangs_test.py).
machine = Machine(devices=2)
server = Server(machine, {"a": "share = 1\ngang = off\n", "b": "share = 1\n"})
procs = [(t, dev, machine.spawn([SPIN, "--seconds", str(WARMUP + 4.5), "--device", str(dev)],
                                env=server.tenant_env(t))) for t, dev in (("a", 0), ("a", 1), ("b", 0))]
time.sleep(WARMUP)
snap = machine.snapshot()
load = LoadWatch()
time.sleep(4.0)
meter = machine.meter(since=snap)
load.stop()
share = {(p["pid"], p["device"]): p["share"] for p in meter["processes"]}
for _, _, p in procs:
    p.communicate()
a0, a1, b0 = (share.get((p.pid, dev), 0.0) for _, dev, p in procs)
checks.expect(abs(a0 - 0.5) <= 0.03 and abs(b0 - 0.5) <= 0.03,
              "GPU 0 is split 50/50 between a and b (%.1f/%.1f; %s)" % (100 * a0, 100 * b0, load))
util1 = meter["devices"][1]["utilization"]
checks.expect(a1 >= 0.99 and util1 >= BUSY,
              "GPU 1 is a's alone: a separate token (%.1f%% busy, >= %d%%; %s)" % (100 * util1, 100 * BUSY, load))
server.stop()

checks.finish()
