"""End to end with a real Prometheus (Debian's `prometheus`, run here as a
child with its own configuration, storage and port): it scrapes
gpuslice-server every second while two tenants spin at 3:1 on fakecuda.
The rate of gpuslice_tenant_gpu_seconds_total over a window of ten
scrapes (about 10 s), asked of Prometheus' HTTP API, must split 75/25 +-3
points and agree with fakecuda's meter of true device time over the same
window: each tenant is charged at least what it used (less at most the
idle refund, 1/32 of what it held, and 1 point for the windows' edges), and
all tenants together at most what they used plus the time the device sat
idle (a slice is charged from its grant to its release, so a tenant whose
process is slow to wake on a loaded machine is charged for the device
time it left idle: 2 to 4 points of the window on a lightly loaded
machine, 7 to 11 beside a busy loop; comparing each rate with the meter
within 2 points failed there). Every expression of the
Grafana dashboard must evaluate, and the alert rules must load."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

from metricslib import MetricsServer, free_port, need
from testlib import Checks, LoadWatch, Machine

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
prometheus = need("prometheus", "prometheus")
checks = Checks()
SCRAPES = 10  # the measured window, in scrapes
EDGES = 0.01  # the meter's window and Prometheus' extrapolated one differ at their edges

machine = Machine()
server = MetricsServer(machine, {"a": "share = 3\nmemory = 1G\n", "b": "share = 1\n"})
work = tempfile.mkdtemp(prefix="gpuslice-prometheus-")
rules = os.path.join(work, "gpuslice-rules.yml")
shutil.copy(os.path.join(ROOT, "deploy", "prometheus", "gpuslice-rules.yml"), rules)
with open(os.path.join(work, "prometheus.yml"), "w") as f:
    f.write("""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%s]
scrape_configs:
  - job_name: gpuslice
    static_configs:
      - targets: ['127.0.0.1:%d']
""" % (json.dumps(rules), server.port))
web = free_port()
log = open(os.path.join(work, "prometheus.log"), "w")
prom = subprocess.Popen([prometheus, "--config.file=" + os.path.join(work, "prometheus.yml"),
                         "--storage.tsdb.path=" + os.path.join(work, "data"),
                         "--web.listen-address=127.0.0.1:%d" % web], stdout=log, stderr=log)
API = "http://127.0.0.1:%d" % web


def get(path, **params):
    url = API + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode()) if path.startswith("/api") else r.read().decode()


def query(expr, at):
    return get("/api/v1/query", query=expr, time="%.3f" % at)


try:
    deadline = time.monotonic() + 30
    ready = False
    while time.monotonic() < deadline and not ready and prom.poll() is None:
        try:
            ready = "Ready" in get("/-/ready")
        except OSError:
            time.sleep(0.2)
    checks.expect(ready, "Prometheus is up on 127.0.0.1:%d" % web)
    # Targets reach the scrape loops a few seconds after start: wait for the first scrape.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not query('up{job="gpuslice"} == 1', time.time())["data"]["result"]:
        time.sleep(0.2)

    # The spins outlast any window; they are stopped once it is measured.
    spins = {t: server.spin(t, 90) for t in ("a", "b")}
    time.sleep(3.0)  # connected, queued, and a few scrapes in
    snap = machine.snapshot()
    watch = LoadWatch()
    t0 = time.time()
    # The window is ten successful scrapes, however long they take on a
    # loaded machine.
    scrapes, deadline = 0, time.monotonic() + 60
    while scrapes < SCRAPES and time.monotonic() < deadline:
        time.sleep(0.25)
        now = time.time()
        found = query('sum_over_time(up{job="gpuslice"}[%dms])' % int(1000 * (now - t0)), now)["data"]["result"]
        scrapes = int(float(found[0]["value"][1])) if found else 0
    t1 = time.time()
    meter_json = machine.meter(since=snap)
    watch.stop()
    checks.expect(scrapes >= SCRAPES, "Prometheus scraped the server %d times in %.1f s (%d wanted)"
                  % (scrapes, t1 - t0, SCRAPES))
    # The scrape after t1 is in (none of the window's is still on its way).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not query('timestamp(up{job="gpuslice"}) > %.3f' % t1, time.time())["data"]["result"]:
        time.sleep(0.2)
    window = "%dms" % int(1000 * (t1 - t0))
    result = query("rate(gpuslice_tenant_gpu_seconds_total[%s])" % window, t1)
    rates = {r["metric"]["tenant"]: float(r["value"][1]) for r in result["data"]["result"]}
    total = sum(rates.values())
    prom_share = {t: rates.get(t, 0) / total for t in ("a", "b")} if total else {"a": 0, "b": 0}
    # True device time as a fraction of the window's wall time.
    wall = meter_json["wall_ns"]
    busy = {p["pid"]: p["busy_ns"] for p in meter_json["processes"]}
    used = {t: busy.get(p.pid, 0) / wall for t, p in spins.items()}
    idle = max(0.0, 1.0 - meter_json["devices"][0]["busy_ns"] / wall)
    checks.expect(abs(prom_share["a"] - 0.75) <= 0.03 and abs(prom_share["b"] - 0.25) <= 0.03,
                  "Prometheus: rate over %d scrapes splits %.1f/%.1f (75/25 +-3; %s)"
                  % (scrapes, 100 * prom_share["a"], 100 * prom_share["b"], watch))
    stamps = query("up[%s]" % window, t1)["data"]["result"]
    print("rates (GPU seconds per second): a %.3f b %.3f; fakecuda meter (device busy per second): a %.3f b %.3f, "
          "idle %.3f; scrapes at t0 + %s s" % (rates.get("a", 0), rates.get("b", 0), used["a"], used["b"], idle,
                                               [round(float(v[0]) - t0, 2) for v in stamps[0]["values"]] if stamps else "?"))
    checks.expect(all(rates.get(t, 0) >= used[t] - rates.get(t, 0) / 32 - EDGES for t in ("a", "b")),
                  "each tenant's rate is at least the device time it used, less the idle refund and %d points "
                  "(a %.3f >= %.3f, b %.3f >= %.3f)" % (100 * EDGES, rates.get("a", 0), used["a"], rates.get("b", 0), used["b"]))
    excess = total - used["a"] - used["b"]
    checks.expect(excess <= idle + EDGES,
                  "the tenants' rates exceed the device time they used by %.1f points in all: at most the time the "
                  "device was idle (%.1f) and %d points" % (100 * excess, 100 * idle, 100 * EDGES))

    # Every dashboard expression evaluates; the share panels have data.
    with open(os.path.join(ROOT, "deploy", "grafana", "gpuslice.json")) as f:
        text = f.read()
    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node["expr"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(text)["panels"])
    failed, empty = [], []
    for e in found:
        q = e.replace("$__rate_interval", "5s").replace("$tenant", ".*").replace("$gpu", ".*")
        try:
            r = query(q, t1)
        except OSError as err:
            failed.append("%s: %s" % (e, err))
            continue
        if r.get("status") != "success":
            failed.append(e)
        elif not r["data"]["result"] and ("gpu_seconds_total" in e or "target_ratio" in e or "memory_limit" in e):
            empty.append(e)
    checks.expect(not failed, "all %d dashboard expressions evaluate in Prometheus (%s)" % (len(found), failed[:2]))
    checks.expect(not empty, "the share, target and memory panels have data (%s)" % empty[:2])
    loaded = get("/api/v1/rules")["data"]["groups"]
    names = {r["name"]: r.get("health") for g in loaded for r in g["rules"]}
    checks.expect(names.get("GpusliceTenantBelowTargetShare") == "ok" and names.get("GpusliceTenantMemoryNearCap") == "ok",
                  "the alert rules load and evaluate (%s)" % names)
    for p in spins.values():
        p.kill()
        p.communicate()
finally:
    prom.terminate()
    try:
        prom.wait(timeout=10)
    except subprocess.TimeoutExpired:
        prom.kill()
        prom.wait()
    log.close()
    server.stop()
    shutil.rmtree(work, ignore_errors=True)
checks.finish()
