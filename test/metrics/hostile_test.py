"""Slow and malicious scrapers cost the scheduler nothing measurable. The
same run twice, side by side: once with no scraper, once while scrapers
never send their request (20), send 1 MB request heads (5), hold 1000
connections, and read a scrape 1 KiB every 100 ms (4). Each run measures
the handoff latency (a release -> the next tenant's blocked launch
returns, handoff_bench) and the shares of two tenants at 3:1 on
fakecuda's meter. The attacked run must match the quiet one: median
handoff within 100 % + 250 us, p90 within 100 % + 1 ms (margins for a busy
neighbour, whose load moves from one run to the next: beside a busy loop
on 2 CPUs the medians were 83 to 199 us, the p90s 115 to 468 us, in
either run; a server loop that stalls on the scrapers moves them by
milliseconds), shares within 2 points; a real scrape still succeeds
meanwhile, and the server's log stays small. The handoff's own figures
are a benchmark (bench/metrics_bench.py)."""
import os
import statistics
import subprocess
import sys
import time

from metricslib import MetricsServer, handoff_latencies, percentile, scrape
from testlib import Checks, LoadWatch, Machine, tenant_shares

HOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "helpers", "scrape_hog.py")
checks = Checks()


def run(attacked):
    machine = Machine()
    server = MetricsServer(machine, {"a": "share = 3\n", "b": "share = 1\n", "h": "share = 1\n", "l": "share = 1\n"})
    hog = None
    log0 = server.log_size()
    if attacked:
        hog = subprocess.Popen([sys.executable, HOG, str(server.port), "60", "--silent", "20", "--big-header", "5",
                                "--flood", "1000", "--slow-read", "4"], stdout=subprocess.PIPE, text=True)
        checks.expect(hog.stdout.readline().strip() == "ready", "scrapers connected")
        time.sleep(1.0)
    cpu0 = server.cpu_seconds()
    watch = LoadWatch()
    latencies = handoff_latencies(server, "h", "l", 120)
    watch.stop()
    a, b = server.spin("a", 6.5), server.spin("b", 6.5)
    time.sleep(1.0)
    snap = machine.snapshot()
    scraped = []
    for _ in range(5):
        start = time.monotonic()
        try:
            scraped.append("gpuslice_build_info" in scrape(server.port) and time.monotonic() - start)
        except OSError as e:
            scraped.append(False)
            print("scrape failed after %.3f s: %r" % (time.monotonic() - start, e))
        time.sleep(max(0, 1.0 - (time.monotonic() - start)))
    shares = tenant_shares(machine.meter(since=snap), {"a": [a.pid], "b": [b.pid]})
    for p in (a, b):
        p.communicate()
    cpu = server.cpu_seconds() - cpu0
    if hog:
        hog.terminate()
        print("scrapers: %s" % hog.communicate()[0].strip())
    log = server.log_size() - log0
    alive = server.proc.poll() is None
    server.stop()
    return {"lat": latencies, "shares": shares, "scraped": scraped, "cpu": cpu, "log": log, "alive": alive,
            "load": watch}


quiet = run(False)
loud = run(True)
for name, r in (("no scraper", quiet), ("hostile scrapers", loud)):
    print("%-17s handoff median %.0f us p90 %.0f us (n=%d); shares %.1f/%.1f; server CPU %.2f s; log %d bytes; "
          "scrapes %s" % (name, statistics.median(r["lat"]) if r["lat"] else -1, percentile(r["lat"], 0.9),
                          len(r["lat"]), 100 * r["shares"]["a"], 100 * r["shares"]["b"], r["cpu"], r["log"],
                          ["%.3f s" % s if s else "failed" for s in r["scraped"]]))
checks.expect(len(quiet["lat"]) >= 50 and len(loud["lat"]) >= 50, "handoffs measured in both runs (%d, %d)"
              % (len(quiet["lat"]), len(loud["lat"])))
mq, ml = statistics.median(quiet["lat"] or [0]), statistics.median(loud["lat"] or [1e9])
load = "without: %s; with: %s" % (quiet["load"], loud["load"])
checks.expect(ml <= 2 * mq + 250, "median handoff with hostile scrapers %.0f us vs %.0f us without (%s)" % (ml, mq, load))
pq, pl = percentile(quiet["lat"], 0.9), percentile(loud["lat"], 0.9)
checks.expect(pl <= 2 * pq + 1000, "p90 handoff %.0f us vs %.0f us (%s)" % (pl, pq, load))
checks.expect(all(abs(r["shares"]["a"] - 0.75) <= 0.03 for r in (quiet, loud)) and
              abs(quiet["shares"]["a"] - loud["shares"]["a"]) <= 0.02,
              "shares 75/25 in both, within 2 points of each other (%.1f, %.1f)"
              % (100 * quiet["shares"]["a"], 100 * loud["shares"]["a"]))
# Within 1 s, or 2 s for a connection whose SYN found the kernel's queue
# full behind the flood and was sent again (TCP's first retransmission
# comes a second later): that wait is the kernel's, not the server's.
checks.expect(all(loud["scraped"]) and max(loud["scraped"]) < 2.0 and sorted(loud["scraped"])[-2] < 1.0,
              "a real scrape succeeds meanwhile, each within 1 s, one within 2 s (%s)" % loud["scraped"])
checks.expect(loud["alive"] and loud["log"] < 20000, "the server stays up, its log small (%d bytes)" % loud["log"])
checks.finish()
