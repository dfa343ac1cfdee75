"""Gangs: tenants whose processes run collectives across GPUs 0 and 1 get
their slices on both GPUs at once, judged by the fakecuda meter.

Two gang tenants (two ranks each, one per GPU, collectives of 1 ms in a
loop) at 1:1, and a third tenant busy on GPU 1 alone:
  - every tenant progresses: GPU 1 splits 1:1:1 (+-4 points), GPU 0 1:1
    between the gangs;
  - no slice is revoked for overstaying its grace (the server log);
  - each gang's collective rate is at least 90 % of what a gang alone
    gets, scaled by its share of GPU 1 (1/3).
The second gang's rank 1 starts a second after its rank 0, as a real job's
ranks do: its rank 0 runs alone meanwhile (a tenant with one GPU is no
gang), starts a collective and waits in it for rank 1, so that only its
rank 1 ever asks for a GPU until the gang runs on both. Such a gang once
never gathered its GPUs (about 3 runs in 5 of this test).
The tenants use 40 ms slices: each gang slice costs a gathering and the
ranks' catch-up at its end, about 10 % of a 20 ms slice here and 1-3 % of
a 40 ms one (docs/BENCHMARKS.md).
Then the same with `gang = off`: slices granted crosswise leave collectives
waiting for a rank that cannot run, until the grace period takes the slice
back. That part shows what the test guards against; it must see
revocations, or it is not testing anything."""
import json
import sys
import time

from testlib import SPIN, Checks, LoadWatch, Machine, Server

checks = Checks()
KERNEL_US = 1000
WARMUP = 1.0
WINDOW = 5.0
STALLED_RATE = 50  # collectives/s below which a gang counts as stalled (about 300 expected)
COUNT = 100000  # more collectives than the run needs: the ranks are killed after it


LATE_RANK_S = 1.0  # how much later the second gang's rank 1 starts


def gang_ranks(machine, server, tenant, group, late=0.0):
    ranks = []
    for r in (0, 1):
        if r == 1 and late:
            time.sleep(late)
        ranks.append(machine.spawn([SPIN, "--collective", "%d:%d:2" % (group, r), "--count", str(COUNT),
                                    "--kernel-us", str(KERNEL_US), "--device", str(r)],
                                   env=server.tenant_env(tenant)))
    return ranks


def kernels(meter, pid, device):
    for p in meter["processes"]:
        if p["pid"] == pid and p["device"] == device:
            return p["kernels"], p["busy_ns"]
    return 0, 0


def stop(procs):
    for p in procs:
        p.kill()
        p.communicate()


def run(confs, with_neighbours):
    """Returns (collective rates of g1 and g2 per second, device time per
    tenant and GPU in the window, server log, the window's LoadWatch)."""
    machine = Machine(devices=2, FAKECUDA_COLLECTIVE_TIMEOUT_NS="60000000000")
    server = Server(machine, confs)
    procs = {"g1": gang_ranks(machine, server, "g1", 1)}
    if with_neighbours:
        procs["c"] = [machine.spawn([SPIN, "--seconds", str(LATE_RANK_S + WARMUP + WINDOW + 30), "--device", "1",
                                     "--kernel-us", str(KERNEL_US)], env=server.tenant_env("c"))]
        procs["g2"] = gang_ranks(machine, server, "g2", 2, late=LATE_RANK_S)
    time.sleep(WARMUP)
    snap = machine.snapshot()
    log_start = server.log_size()
    watch = LoadWatch()
    time.sleep(WINDOW)
    meter = machine.meter(since=snap)
    watch.stop()
    # A gang that hardly progressed: show the server's view while it is
    # still stuck, so that a rare stall can be told apart from slowness.
    gangs_on = not any("gang = off" in conf for conf in confs.values())
    if gangs_on and any(kernels(meter, ps[0].pid, 0)[0] < STALLED_RATE * WINDOW for t, ps in procs.items() if t != "c"):
        print("a gang ran fewer than %d collectives/s; the server's status and log meanwhile:" % STALLED_RATE)
        print(json.dumps(server.status(), indent=1))
        print(server.log()[log_start:][-4000:])
    rates, busy = {}, {}
    for tenant, ps in procs.items():
        for dev in (0, 1):
            busy[(tenant, dev)] = sum(kernels(meter, p.pid, dev)[1] for p in ps) / 1e9
        if tenant != "c":
            # a collective completes on both ranks: count rank 0's
            rates[tenant] = kernels(meter, ps[0].pid, 0)[0] / WINDOW
    for ps in procs.values():
        stop(ps)
    log = server.log()[log_start:]  # the window only: ranks start one after the other
    server.stop()
    return rates, busy, log, watch


def split(busy, tenants, dev):
    total = sum(busy[(t, dev)] for t in tenants) or 1.0
    return {t: busy[(t, dev)] / total for t in tenants}


GANG = "share = 1\nquantum_ms = 40\n"
alone, _, _, alone_load = run({"g1": GANG}, False)
rates, busy, log, load = run({"g1": GANG, "g2": GANG, "c": "share = 1\nquantum_ms = 40\n"}, True)
print("lone gang: %.0f collectives/s; together: g1 %.0f/s, g2 %.0f/s" % (alone["g1"], rates["g1"], rates["g2"]))
gpu1 = split(busy, ("g1", "g2", "c"), 1)
gpu0 = split(busy, ("g1", "g2"), 0)
print("GPU 1 split g1/g2/c: %s; GPU 0 split g1/g2: %s" % (
    "/".join("%.1f" % (100 * gpu1[t]) for t in ("g1", "g2", "c")),
    "/".join("%.1f" % (100 * gpu0[t]) for t in ("g1", "g2"))))
checks.expect(all(abs(gpu1[t] - 1 / 3) <= 0.04 for t in gpu1),
              "GPU 1 splits 1:1:1 between the two gangs and the lone tenant (+-4 points; %s)" % load)
checks.expect(all(abs(gpu0[t] - 0.5) <= 0.04 for t in gpu0), "GPU 0 splits 1:1 between the gangs (+-4 points; %s)" % load)
revoked = log.count("did not release within")
checks.expect(revoked == 0, "no slice revoked for overstaying its grace (%d)" % revoked)
for g in ("g1", "g2"):
    checks.expect(rates[g] >= 0.9 * alone["g1"] / 3,
                  "gang %s runs %.0f collectives/s, >= 90%% of a lone gang's %.0f/s at its share of 1/3 (lone "
                  "gang: %s; together: %s)" % (g, rates[g], alone["g1"], alone_load, load))

# Without gangs: the failure this guards against.
OFF = "share = 1\ngang = off\n"
rates_off, _, log_off, _ = run({"g1": OFF, "g2": OFF, "c": "share = 1\n"}, True)
revoked_off = log_off.count("did not release within")
print("gang = off: g1 %.0f/s, g2 %.0f/s, %d revocations" % (rates_off["g1"], rates_off["g2"], revoked_off))
checks.expect(revoked_off > 0 or min(rates_off.values()) < 0.9 * alone["g1"] / 3,
              "with gang = off the crosswise grants show (revocations or lost throughput)")
checks.finish()
