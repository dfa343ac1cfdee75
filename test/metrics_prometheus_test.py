"""End to end with a real Prometheus (Debian's `prometheus`, run here as a
child with its own configuration, storage and port): it scrapes
gpuslice-server every second while two tenants spin at 3:1 on fakecuda.
The rate of gpuslice_tenant_gpu_seconds_total over 10 s, asked of
Prometheus' HTTP API, must split 75/25 +-3 points and agree with
fakecuda's meter of true device time over the same 10 s within 2 points;
every expression of the Grafana dashboard must evaluate, and the alert
rules must load."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

from metricslib import MetricsServer, free_port, need
from testlib import Checks, LoadWatch, Machine, tenant_shares

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
prometheus = need("prometheus", "prometheus")
checks = Checks()

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

    spins = {t: server.spin(t, 16) for t in ("a", "b")}
    time.sleep(3.0)  # connected, queued, and a few scrapes in
    snap = machine.snapshot()
    watch = LoadWatch()
    t0 = time.time()
    time.sleep(10.0)
    t1 = time.time()
    meter = tenant_shares(machine.meter(since=snap), {t: [p.pid] for t, p in spins.items()})
    watch.stop()
    time.sleep(1.5)  # the scrape just after t1 is in
    result = query("rate(gpuslice_tenant_gpu_seconds_total[%ds])" % round(t1 - t0), t1)
    rates = {r["metric"]["tenant"]: float(r["value"][1]) for r in result["data"]["result"]}
    total = sum(rates.values())
    prom_share = {t: rates.get(t, 0) / total for t in ("a", "b")} if total else {"a": 0, "b": 0}
    meter_total = sum(meter.values())
    meter_share = {t: meter[t] / meter_total for t in ("a", "b")} if meter_total else {"a": 0, "b": 0}
    checks.expect(abs(prom_share["a"] - 0.75) <= 0.03 and abs(prom_share["b"] - 0.25) <= 0.03,
                  "Prometheus: rate over 10 s splits %.1f/%.1f (75/25 +-3; %s)"
                  % (100 * prom_share["a"], 100 * prom_share["b"], watch))
    checks.expect(all(abs(prom_share[t] - meter_share[t]) <= 0.02 for t in ("a", "b")),
                  "and agrees with fakecuda's meter %.1f/%.1f within 2 points" % (100 * meter_share["a"], 100 * meter_share["b"]))
    stamps = query("up[%ds]" % round(t1 - t0), t1)["data"]["result"]
    print("rates (GPU seconds per second): a %.3f b %.3f; fakecuda meter (device busy): a %.3f b %.3f; scrapes at "
          "t0 + %s s" % (rates.get("a", 0), rates.get("b", 0), meter["a"], meter["b"],
                         [round(float(v[0]) - t0, 2) for v in stamps[0]["values"]] if stamps else "?"))
    checks.expect(all(abs(rates.get(t, 0) - meter[t]) <= 0.02 for t in ("a", "b")),
                  "each tenant's rate is its fraction of true device time within 2 points")

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
