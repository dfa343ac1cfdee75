"""NVML inside a tenant, measured side by side in one run on fakecuda and
the simulated NVML:

1. An nvmlDeviceGetMemoryInfo call (a linked client, 20000 calls each
   way): median without the shim, and with it inside a capped tenant
   (answers cached 100 ms, so nearly every call is the cache's).
2. Another tenant's handoff (release -> blocked launch returns, the
   handoff_bench pair of server_bench.py) with nothing else running, while
   a third tenant's process calls NVML 10 000 times a second through the
   shim, and while a third tenant's bare client sends 10 000 USAGE_QUERYs
   a second straight to the server; medians, and the server's CPU.

Prints one line per figure with its target, and for each target a
BENCH-RESULT line (test/bench/bench_result.py; --targets prints their
declarations)."""
import os
import statistics
import subprocess
import sys
import time

from bench_result import Target, Targets  # noqa: E402

SHIFT_RULE = "the two baselines' difference + 20 us"
TARGETS = Targets("bench/nvml_bench", [
    Target("nvml.memory_info", "nvmlDeviceGetMemoryInfo in a capped tenant, median of 20000 calls", "us", "<=", 50),
    Target("nvml.handoff_nvml_flood", "another tenant's handoff while a third tenant's process calls NVML "
           "10000 times a second: its median's distance from the mean of two baselines without", "us", "<=",
           rule=SHIFT_RULE),
    Target("nvml.handoff_raw_flood", "another tenant's handoff while a third tenant's bare client sends the "
           "server 10000 USAGE_QUERYs a second: its median's distance from the mean of two baselines without",
           "us", "<=", rule=SHIFT_RULE),
])
TARGETS.declare_if_asked()

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from testlib import BUILD, SHIM, Machine, Server  # noqa: E402

HANDOFF = os.path.join(BUILD, "test", "bench", "handoff_bench")
PROBE = os.path.join(BUILD, "test", "helpers", "nvml_probe")
results = []


def report(name, value, target, ok):
    results.append(ok)
    print("%-52s %-40s target %-22s %s" % (name, value, target, "met" if ok else "NOT MET"), flush=True)


def median_ns(env, calls=20000):
    out = subprocess.run([PROBE, "bench", str(calls)], env=env, capture_output=True, text=True, timeout=120).stdout
    return int(out.split("=")[1]) if out.startswith("median_ns=") else None


# 1. One memory query, with and without the shim.
machine = Machine()
server = Server(machine, {"m": "memory = 2G\n"})
plain = dict(machine.env)
inside = server.tenant_env("m")
pairs = []
for _ in range(3):  # alternated, so that the machine's load falls on both alike
    pairs.append((median_ns(plain), median_ns(inside)))
server.stop()
without = statistics.median(p[0] for p in pairs if p[0] is not None) / 1000.0
within = statistics.median(p[1] for p in pairs if p[1] is not None) / 1000.0
ok = TARGETS.result("nvml.memory_info", within, note="%.2f us without the shim" % without)
report("nvmlDeviceGetMemoryInfo, median of 20000 calls", "%.2f us in a tenant, %.2f us without the shim" % (within, without),
       "<= 50 us", ok)


# 2. Handoffs of tenants a and b while tenant c queries NVML.
def handoffs(server, machine, rounds=150):
    launcher = machine.spawn([HANDOFF, "launcher", str(rounds * 4)], env=server.tenant_env("b"))
    time.sleep(0.3)
    holder = machine.spawn([HANDOFF, "holder", server.socket("a"), str(rounds)])
    releases = [int(l.split()[1]) for l in holder.communicate()[0].splitlines() if l.startswith("released")]
    launcher.kill()
    returns = [tuple(map(int, l.split()[1:])) for l in launcher.communicate()[0].splitlines() if l.startswith("returned")]
    samples = []
    for t1, blocked in returns:
        before = [r for r in releases if r <= t1]
        if blocked > 500000 and before and t1 - before[-1] < 3000000:
            samples.append((t1 - before[-1]) / 1000.0)
    return samples


machine = Machine()
server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n", "c": "memory = 1G\n"})
uuid = machine.meter()["devices"][0]["uuid"]
rows = {}
for label in ("nothing else", "NVML 10000/s", "raw 10000/s", "nothing else again"):
    flood = None
    if label.startswith("NVML"):
        flood = machine.spawn([PROBE, "flood", "60", "10000"], env=server.tenant_env("c"))
    elif label.startswith("raw"):
        flood = machine.spawn([PROBE, "raw", server.socket("c"), uuid, "600000", "10000"])
    time.sleep(0.3)
    cpu0 = server.cpu_seconds()
    t0 = time.monotonic()
    samples = handoffs(server, machine)
    cpu = (server.cpu_seconds() - cpu0) / (time.monotonic() - t0)
    if flood:
        flood.kill()
        out = flood.communicate()[0].strip()
    rows[label] = (samples, cpu)
    print("  %-20s handoff median %s (n=%d), server CPU %.1f %%%s" % (
        label, "%.0f us" % statistics.median(samples) if samples else "-", len(samples), 100 * cpu,
        "" if not flood else ""), flush=True)
server.stop()
base = [statistics.median(rows[k][0]) for k in ("nothing else", "nothing else again") if rows[k][0]]
for label, target in (("NVML 10000/s", "nvml.handoff_nvml_flood"), ("raw 10000/s", "nvml.handoff_raw_flood")):
    s = rows[label][0]
    if not s or not base:
        TARGETS.result(target, None, note="no samples")
        report("handoff while tenant c floods (%s)" % label, "no samples", "within the baseline's spread", False)
        continue
    med = statistics.median(s)
    # Unchanged within noise: no further from the two baselines' mean than
    # they are from each other, plus 20 us for a loaded 2-core machine.
    noise = abs(base[0] - base[-1]) + 20.0
    ok = TARGETS.result(target, abs(med - statistics.mean(base)), limit=noise,
                        note="median %.0f us, baselines %s us; server CPU %.1f %%" % (
                            med, "/".join("%.0f" % b for b in base), 100 * rows[label][1]))
    report("handoff while tenant c floods (%s)" % label,
           "%.0f us median (baselines %s; server CPU %.1f %%)" % (med, "/".join("%.0f" % b for b in base),
                                                                 100 * rows[label][1]),
           "baseline +- %.0f us" % noise, ok)

print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
