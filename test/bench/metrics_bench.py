"""Benchmarks of gpuslice-server's /metrics, on fakecuda: what a scrape of
100 tenants x 8 GPUs costs the server (CPU per scrape, bytes), and the
handoff latency (release -> the next tenant's blocked launch returns,
handoff_bench) side by side: no scraper, slow scrapers (20 that never
send, 4 reading 1 KiB every 100 ms), and every hostile scraper of
metrics_hostile_test.py at once. One line per figure with its target."""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from metricslib import (MetricsServer, handoff_latencies, percentile, populated_server, scrape,  # noqa: E402
                        server_run_ns)
from testlib import Machine  # noqa: E402

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
report("scrape of 100 tenants x 8 GPUs: server CPU", "%.2f ms per scrape (%d bytes)" % (per, size), "<= 5 ms",
       per <= 5)
server.stop()

# 2. Handoff latency without and with scrapers, one server each.
ATTACKS = {
    "no scraper": [],
    "slow scrapers": ["--silent", "20", "--slow-read", "4"],
    "every hostile scraper": ["--silent", "20", "--big-header", "5", "--flood", "1000", "--slow-read", "4"],
}
baseline = None
for name, attack in ATTACKS.items():
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
    report("handoff, %s" % name, "%.0f us median, p90 %.0f us (n=%d)" % (med, p90, len(lat)),
           "<= none x1.5+50us", ok)

print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
