"""Benchmarks of gpuslice-server's /metrics, on fakecuda: what a scrape of
100 tenants x 8 GPUs costs the server (CPU per scrape, bytes), and the
handoff latency (release -> the next tenant's blocked launch returns,
handoff_bench) side by side: no scraper, slow scrapers (20 that never
send, 4 reading 1 KiB every 100 ms), and every hostile scraper of
metrics/hostile_test.py at once; and another tenant's ACQUIRE -> GRANT
with none, with 16 scrapers back to back, with a slowloris, and with both,
phases taken in turn on one server. One line per figure with its target,
and for each target a BENCH-RESULT line (test/bench/bench_result.py;
--targets prints their declarations)."""
import os
import signal
import statistics
import subprocess
import sys
import time

from bench_result import Target, Targets  # noqa: E402

HANDOFF_RULE = "1.5 x the median with no scraper + 50 us"
GRANT = "another tenant's ACQUIRE -> GRANT, median of 450, "
TARGETS = Targets("bench/metrics_bench", [
    Target("metrics.scrape_cpu", "server CPU per scrape of 100 tenants x 8 GPUs, mean of 50", "ms", "<=", 5),
    Target("metrics.handoff_slow_scrapers", "handoff median while 20 scrapers never send and 4 read 1 KiB every "
           "100 ms", "us", "<=", rule=HANDOFF_RULE),
    Target("metrics.handoff_hostile_scrapers", "handoff median under every hostile scraper at once (also 5 "
           "sending 1 MB heads, 1000 held connections)", "us", "<=", rule=HANDOFF_RULE),
    Target("metrics.grant_quiet", GRANT + "no scraper", "ms", "<=", 1),
    Target("metrics.grant_scrapers", GRANT + "16 scrapers back to back", "ms", "<=", 1),
    Target("metrics.grant_slowloris", GRANT + "a slowloris", "ms", "<=", 1),
    Target("metrics.grant_scrapers_slowloris", GRANT + "16 scrapers back to back and a slowloris", "ms", "<=", 1),
])
TARGETS.declare_if_asked()

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from metricslib import (MetricsServer, handoff_latencies, percentile, populated_server, scrape,  # noqa: E402
                        server_run_ns)
from testlib import Machine  # noqa: E402
import gsproto  # noqa: E402

HOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers", "scrape_hog.py")
results = []


def report(name, value, target, ok):
    results.append(ok)
    print("%-52s %-34s target %-14s %s" % (name, value, target, "met" if ok else "NOT MET"), flush=True)


# 1. Scrape cost.
machine = Machine()
server, clients = populated_server(machine, 100, 8)
size = len(scrape(server.port))
cpu0 = server_run_ns(server)
for _ in range(50):
    scrape(server.port)
per = (server_run_ns(server) - cpu0) / 50 / 1e6
ok = TARGETS.result("metrics.scrape_cpu", per, note="%d bytes a scrape" % size)
report("scrape of 100 tenants x 8 GPUs: server CPU", "%.2f ms per scrape (%d bytes)" % (per, size), "<= 5 ms", ok)
server.stop()

# 2. Handoff latency without and with scrapers, one server each.
ATTACKS = {
    "no scraper": (None, []),
    "slow scrapers": ("metrics.handoff_slow_scrapers", ["--silent", "20", "--slow-read", "4"]),
    "every hostile scraper": ("metrics.handoff_hostile_scrapers",
                              ["--silent", "20", "--big-header", "5", "--flood", "1000", "--slow-read", "4"]),
}
baseline = None
for name, (target, attack) in ATTACKS.items():
    machine = Machine()
    server = MetricsServer(machine, {"h": "share = 1\n", "l": "share = 1\n"})
    hog = None
    if attack:
        hog = subprocess.Popen([sys.executable, HOG, str(server.port), "120"] + attack, stdout=subprocess.PIPE,
                               text=True)
        hog.stdout.readline()
        time.sleep(1.0)
    lat = handoff_latencies(server, "h", "l", 200)
    if hog:
        hog.terminate()
        hog.communicate()
    server.stop()
    med, p90 = statistics.median(lat) if lat else float("nan"), percentile(lat, 0.9)
    if baseline is None:
        baseline = med
    ok = bool(lat) and med <= 1.5 * baseline + 50
    if target:  # the first is the baseline itself
        ok = TARGETS.result(target, med if lat else None, limit=1.5 * baseline + 50,
                            note="p90 %.0f us, n=%d; no scraper: %.0f us" % (p90, len(lat), baseline))
    report("handoff, %s" % name, "%.0f us median, p90 %.0f us (n=%d)" % (med, p90, len(lat)),
           "<= none x1.5+50us", ok)

# 3. ACQUIRE -> GRANT of another tenant while scrapers never stop: 8
# tenants on 2 GPUs each (a scrape of about 51 KB); each phase times 150
# grants 2 ms apart; the phases are taken in turn three times.
machine = Machine()
server = MetricsServer(machine, dict({"t%d" % i: "share = 1\n" for i in range(8)}, probe="share = 1\n"))
others = []
for i in range(8):
    c = gsproto.Client(server.socket("t%d" % i))
    for slot in range(2):
        c.device(slot, gsproto.uuid_bytes(slot))
        c.grant_latency(slot)
    others.append(c)
probe = gsproto.Client(server.socket("probe"))
probe.device(0, gsproto.uuid_bytes(9))
PHASES = {"no scraper": [], "16 scrapers back to back": [["--scrapers", "16"]],
          "a slowloris": [["--slowloris", "1"]], "16 scrapers and a slowloris": [["--scrapers", "16"], ["--slowloris", "1"]]}
PHASE_TARGETS = dict(zip(PHASES, ("metrics.grant_quiet", "metrics.grant_scrapers", "metrics.grant_slowloris",
                                  "metrics.grant_scrapers_slowloris")))
grants = {name: [] for name in PHASES}
cpu = {name: 0.0 for name in PHASES}
loris_bytes = {name: 0 for name in PHASES}
for _ in range(3):
    for name, hogs in PHASES.items():
        procs = [subprocess.Popen([sys.executable, HOG, str(server.port), "600"] + a, stdout=subprocess.PIPE, text=True)
                 for a in hogs]
        for p in procs:
            p.stdout.readline()
        time.sleep(0.3 if procs else 0)
        cpu0 = server.cpu_seconds()
        for _ in range(150):
            took = probe.grant_latency(0, timeout=5.0)
            grants[name].append(1000 * (took if took is not None else 5.0))
            time.sleep(0.002)
        cpu[name] += server.cpu_seconds() - cpu0
        for p, a in zip(procs, hogs):
            p.send_signal(signal.SIGTERM)
            done = dict(kv.split("=") for kv in p.communicate()[0].split()[1:])
            if a[0] == "--slowloris":
                loris_bytes[name] += int(done["sent"])
server.stop()
quiet = statistics.median(grants["no scraper"])
for name in PHASES:
    med = statistics.median(grants[name])
    extra = " loris %d KB" % (loris_bytes[name] >> 10) if loris_bytes[name] else ""
    ok = TARGETS.result(PHASE_TARGETS[name], med, note="p90 %.3f ms; server CPU %.2f s%s"
                        % (percentile(grants[name], 0.9), cpu[name], extra))
    report("ACQUIRE->GRANT, %s" % name, "%.3f ms median, p90 %.3f (cpu %.2f s%s)"
           % (med, percentile(grants[name], 0.9), cpu[name], extra), "<= 1 ms median", ok)

print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
