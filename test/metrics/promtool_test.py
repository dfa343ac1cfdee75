"""The metrics against Prometheus' own tools and the deploy/ files: a live
scrape passes `promtool check metrics`, the alert rules pass `promtool
check rules` and their unit tests (test/metrics/gpuslice_rules_test.yml),
and the Grafana dashboard is valid JSON whose every expression and
variable names only metrics the live server exposes."""
import json
import os
import re
import subprocess
import time

import gsproto
from metricslib import MetricsServer, need, parse, scrape
from testlib import Checks, Machine

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
RULES = os.path.join(ROOT, "deploy", "prometheus", "gpuslice-rules.yml")
RULES_TEST = os.path.join(ROOT, "test", "metrics", "gpuslice_rules_test.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "gpuslice.json")
promtool = need("promtool", "prometheus")
checks = Checks()

# A server with something in every family: two tenants, memory, handoffs.
machine = Machine()
server = MetricsServer(machine, {"a": "share = 3\nmemory = 1G\n", "b": "share = 1\nlimit = 0.5\n"})
a, b = gsproto.Client(server.socket("a")), gsproto.Client(server.socket("b"))
for c in (a, b):
    c.device(0, gsproto.uuid_bytes(1))
a.lease_granted(0, 1, 1 << 20)
for _ in range(3):
    a.acquire(0)
    g = a.expect(gsproto.GRANT)
    b.acquire(0)
    a.release(0, g["grant"])
    b.release(0, b.expect(gsproto.GRANT)["grant"])
a.acquire(0)  # a holds now: holder_info has a series
a.expect(gsproto.GRANT)
text = scrape(server.port)
lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
checks.expect(lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(),
              "promtool check metrics: no problem in a live scrape (%s%s)" % (lint.stdout[:300], lint.stderr[:300]))

rules = subprocess.run([promtool, "check", "rules", RULES], capture_output=True, text=True)
checks.expect(rules.returncode == 0 and "SUCCESS: 2 rules found" in rules.stdout,
              "promtool check rules: deploy/prometheus/gpuslice-rules.yml (%s)" % rules.stdout.strip()[-80:])
unit = subprocess.run([promtool, "test", "rules", os.path.basename(RULES_TEST)], cwd=os.path.dirname(RULES_TEST),
                      capture_output=True, text=True)
checks.expect(unit.returncode == 0 and "SUCCESS" in unit.stdout,
              "promtool test rules: each alert fires for its tenant only (%s)" % (unit.stdout + unit.stderr)[-300:])

# The dashboard: valid JSON, and only metrics this server exposes.
with open(DASHBOARD) as f:
    dashboard = json.load(f)
exposed = {n for n, _, _ in parse(text)["samples"]}
labels = {}
for n, l, _ in parse(text)["samples"]:
    labels.setdefault(n, set()).update(l)
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}


def metric_names(expr):
    """The metric names in a PromQL expression: identifiers outside strings,
    label matchers, ranges and grouping clauses that are not functions."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    return [m.group(1) for m in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", e)
            if m.group(1) not in KEYWORDS and not re.match(r"^\d", m.group(1))]


exprs = []


def walk(node):
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            exprs.append(node["expr"])
        for v in node.values():
            walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)


walk(dashboard.get("panels", []))
unknown = sorted({n for e in exprs for n in metric_names(e) if n not in exposed})
checks.expect(len(exprs) >= 10 and not unknown, "the dashboard's %d expressions name only exposed metrics (unknown: %s)"
              % (len(exprs), unknown))
named = {n for e in exprs for n in metric_names(e)}
for want in ("gpuslice_tenant_gpu_seconds_total", "gpuslice_tenant_gpu_target_ratio", "gpuslice_tenant_gpu_memory_bytes",
             "gpuslice_tenant_gpu_memory_limit_bytes", "gpuslice_gpu_handoff_seconds_bucket"):
    checks.expect(want in named, "the dashboard draws %s" % want)
bad_vars = []
for var in dashboard["templating"]["list"]:
    q = var.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    m = re.match(r"label_values\((\w+),\s*(\w+)\)", q or "")
    if var["type"] == "query" and (not m or m.group(1) not in exposed or m.group(2) not in labels.get(m.group(1), ())):
        bad_vars.append(var["name"])
checks.expect(not bad_vars, "its variables take label values of exposed metrics (%s)" % bad_vars)
ids = [p["id"] for p in dashboard["panels"]]
checks.expect(len(ids) == len(set(ids)) and dashboard.get("uid") == "gpuslice", "panel ids unique, uid set")
server.stop()
checks.finish()
