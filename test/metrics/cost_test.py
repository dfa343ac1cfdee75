"""What a scrape costs the server: 100 tenants on 8 GPUs each (800 tenant
and GPU pairs, every figure non-zero), scraped 50 times; the server's CPU
time per scrape (from /proc/PID/schedstat, in ns) must be at most 5 ms.
Meanwhile another tenant's grants keep coming: a scrape is written a
piece at a time, so none waits long for it. The server's CPU time for
those grants is measured first, alone, by count, and taken out of the
scrapes' (on a loaded machine the scrapes take longer, more grants come
meanwhile, and they were billed to the scrapes)."""
import os
import statistics
import threading
import time

import gsproto
from metricslib import parse, populated_server, scrape, server_run_ns
from testlib import Checks, LoadWatch, Machine

TENANTS, GPUS, SCRAPES = 100, 8, 50
checks = Checks()
machine = Machine()
server, clients = populated_server(machine, TENANTS, GPUS, {"probe": "share = 1\n"})


def run_ns():
    return server_run_ns(server)


text = scrape(server.port)
pairs = [s for s in parse(text)["samples"] if s[0] == "gpuslice_tenant_gpu_seconds_total"]
checks.expect(len(pairs) == TENANTS * GPUS, "%d tenant and GPU pairs in a scrape of %d bytes" % (len(pairs), len(text)))

probe = gsproto.Client(server.socket("probe"))
probe.device(0, gsproto.uuid_bytes(99))
grants, stop = [], threading.Event()


def probing():
    while not stop.is_set():
        took = probe.grant_latency(0, timeout=2.0)
        grants.append(took if took is not None else 2.0)
        time.sleep(0.001)


# What one of the probe's grants costs the server, alone: by count.
BASELINE_GRANTS = 200
cpu_base = run_ns()
for _ in range(BASELINE_GRANTS):
    probe.grant_latency(0, timeout=2.0)
    time.sleep(0.001)
per_grant_ns = (run_ns() - cpu_base) / BASELINE_GRANTS

cpu0 = run_ns()
thread = threading.Thread(target=probing)
watch = LoadWatch()
thread.start()
start = time.monotonic()
# SCRAPES scrapes at least, and on until 20 of the other tenant's grants
# were measured meanwhile: both by count.
scrapes = 0
while scrapes < SCRAPES or (len(grants) < 20 and scrapes < 20 * SCRAPES):
    scrape(server.port)
    scrapes += 1
wall = time.monotonic() - start
stop.set()
thread.join()
watch.stop()
probe_ns = per_grant_ns * len(grants)
per_scrape = max(0.0, run_ns() - cpu0 - probe_ns) / scrapes / 1e6
print("server CPU per scrape of %d x %d: %.2f ms (%d bytes; %.1f ms wall each, client included); "
      "probe grants during the scrapes: median %.2f ms, max %.2f ms of %d, %.3f ms of server CPU each (taken out)"
      % (TENANTS, GPUS, per_scrape, len(text), 1000 * wall / scrapes, 1000 * statistics.median(grants),
         1000 * max(grants), len(grants), per_grant_ns / 1e6))
print("over %d scrapes; %s" % (scrapes, watch))
checks.expect(per_scrape <= 5.0, "a scrape of %d tenants x %d GPUs costs the server %.2f ms of CPU (<= 5 ms; %s)"
              % (TENANTS, GPUS, per_scrape, watch))
checks.expect(len(grants) >= 20 and statistics.median(grants) < 0.005,
              "another tenant's grants meanwhile: median %.2f ms of %d (%s)" % (1000 * statistics.median(grants), len(grants), watch))
server.stop()
checks.finish()
