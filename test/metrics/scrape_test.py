"""gpuslice-server's /metrics, scraped live and checked against what the
server reports in its status and what the test did: every family has
HELP and TYPE, histograms are cumulative, counters only grow (a slice
held or a wait going on counts up to the scrape), the figures match the
status JSON, GPU labels carry the index from the driver's /proc, the
target share follows the busy tenants' shares and limits, drops and
reloads are counted by reason and result, and the listener answers
malformed, oversized and unsupported requests with the right status and
stays up when its port is taken."""
import os
import socket
import subprocess
import tempfile
import time

import gsproto
from metricslib import (MetricsServer, family_of, parse, request, scrape, split_response, value, values)
from testlib import CTL, SERVER, Checks, Machine, Server, wait_for

checks = Checks()
U1, U2 = gsproto.uuid_bytes(1), gsproto.uuid_bytes(2)
S1, S2 = gsproto.uuid_str(U1), gsproto.uuid_str(U2)
MiB = 1 << 20

# A fake NVIDIA driver /proc: GPU 2 is on the lower PCI bus, so it is index 0.
# Its device nodes do not exist: the made-up clients' GPUs are not checked
# (--verify-gpus off; hardening/foreign_gpu_test.py checks them).
nvidia = tempfile.mkdtemp(prefix="gpuslice-nvidia-")
for bus, uuid in (("0000:01:00.0", S2), ("0000:02:00.0", S1)):
    os.makedirs(os.path.join(nvidia, "gpus", bus))
    with open(os.path.join(nvidia, "gpus", bus, "information"), "w") as f:
        f.write("Model: \t\t NVIDIA H100\nIRQ:   \t\t 42\nGPU UUID: \t %s\nDevice Minor: \t 0\n" % uuid)

machine = Machine()
server = MetricsServer(machine, {"a": "share = 3\nmemory = 1G\n", "b": "share = 1\nlimit = 0.5\n"},
                       args=["--nvidia-dir", nvidia, "--verify-gpus", "off", "--max-devices-per-tenant", "2",
                             "--max-clients-per-tenant", "4"])
a = gsproto.Client(server.socket("a"))
a.device(0, U1)
a.device(1, U2)
b = gsproto.Client(server.socket("b"))
b.device(0, U1)

# Memory: 300 MiB counted, 800 MiB more refused (1 GiB cap), 100 MiB freed.
ok1 = a.lease_granted(0, 1, 300 * MiB)
ok2 = a.lease_granted(0, 2, 800 * MiB)
a.mem(gsproto.MEM_FREE, 0, 100 * MiB)
checks.expect(ok1 and ok1["status"] == gsproto.LEASE_GRANTED and ok1["granted"] == 300 * MiB and ok2 and
              ok2["status"] == gsproto.LEASE_REFUSED, "300 MiB counted, 800 MiB more refused")

# Five handoffs a -> b on GPU 1: b waits while a holds.
for _ in range(5):
    a.acquire(0)
    ga = a.expect(gsproto.GRANT)
    b.acquire(0)
    time.sleep(0.005)
    a.release(0, ga["grant"])
    gb = b.expect(gsproto.GRANT)
    b.release(0, gb["grant"])
time.sleep(0.05)

text = scrape(server.port)
m = parse(text)
status = server.status()

# The format: every family announced, every sample in a family, no duplicates.
families = set(m["type"])
checks.expect(families == set(m["help"]) and len(families) >= 20, "%d families, each with HELP and TYPE" % len(families))
orphans = [n for n, _, _ in m["samples"] if family_of(n, m["type"]) is None]
checks.expect(not orphans, "every sample belongs to an announced family (%s)" % orphans[:3])
keys = [(n, frozenset(l.items())) for n, l, _ in m["samples"]]
checks.expect(len(keys) == len(set(keys)), "no series twice")
checks.expect(all(n.endswith("_total") for n, t in m["type"].items() if t == "counter"), "counters end in _total")


def histogram_ok(parsed, name):
    """Buckets cumulative, +Inf == _count, for every series of a histogram."""
    series = {}
    for n, l, v in parsed["samples"]:
        if n == name + "_bucket":
            key = frozenset((k, x) for k, x in l.items() if k != "le")
            series.setdefault(key, []).append((float(l["le"]), v))
    for key, buckets in series.items():
        counts = [v for _, v in sorted(buckets)]
        count = value(parsed, name + "_count", **dict(key))
        if counts != sorted(counts) or counts[-1] != count or sorted(buckets)[-1][0] != float("inf"):
            return False
    return bool(series)


for h in ("gpuslice_gpu_handoff_seconds", "gpuslice_tenant_gpu_slice_overrun_seconds"):
    checks.expect(histogram_ok(m, h), "%s: cumulative buckets, +Inf equals _count" % h)

# GPU labels: the index from the driver's /proc (bus order), the UUID as dcgm-exporter writes it.
checks.expect(value(m, "gpuslice_gpu_slices_total", UUID=S1, gpu=1) is not None and
              value(m, "gpuslice_gpu_slices_total", UUID=S2, gpu=0) is not None,
              "GPU labels: UUID and gpu index from /proc/driver/nvidia (bus order)")

# The figures against the status JSON (the GPUs are idle: nothing in progress).
st = {(t["name"], d["uuid"]): dict(d, clients=t["clients"], share=t["share"], limit=t["limit"])
      for t in status["tenants"] for d in t["devices"]}
mismatches = []
for (tenant, uuid), d in st.items():
    lab = {"tenant": tenant, "UUID": uuid}
    pairs = [("gpuslice_tenant_gpu_slices_total", d["slices"], 0),
             ("gpuslice_tenant_gpu_seconds_total", d["gpu_ms"] / 1000, 0.0002),
             ("gpuslice_tenant_gpu_wait_seconds_total", d["wait_ms"] / 1000, 0.0002),
             ("gpuslice_tenant_gpu_memory_bytes", d["mem_used"], 0),
             ("gpuslice_tenant_gpu_memory_peak_bytes", d["mem_peak"], 0),
             ("gpuslice_tenant_gpu_oom_refusals_total", d["oom_refusals"], 0),
             ("gpuslice_tenant_gpu_slice_overrun_seconds_count", d["slices"], 0)]
    for name, want, tol in pairs:
        got = value(m, name, **lab)
        if got is None or abs(got - want) > tol:
            mismatches.append("%s %s/%s: %s vs %s" % (name, tenant, uuid[-4:], got, want))
checks.expect(not mismatches, "per tenant and GPU: slices, GPU time, wait, memory, peak, OOM refusals match the "
              "status (%s)" % mismatches[:3])
checks.expect(value(m, "gpuslice_tenant_gpu_memory_bytes", tenant="a", UUID=S1) == 200 * MiB and
              value(m, "gpuslice_tenant_gpu_memory_peak_bytes", tenant="a", UUID=S1) == 300 * MiB and
              value(m, "gpuslice_tenant_gpu_memory_limit_bytes", tenant="a", UUID=S1) == 1 << 30 and
              value(m, "gpuslice_tenant_gpu_oom_refusals_total", tenant="a", UUID=S1) == 1,
              "memory: 200 MiB counted, peak 300 MiB, cap 1 GiB, one refusal")
checks.expect(not values(m, "gpuslice_tenant_gpu_memory_limit_bytes", tenant="b"),
              "a tenant without a cap has no memory_limit series")
checks.expect(value(m, "gpuslice_tenant_share", tenant="a") == 3 and value(m, "gpuslice_tenant_limit_ratio", tenant="b")
              == 0.5 and value(m, "gpuslice_tenant_processes", tenant="a") == 1 and
              value(m, "gpuslice_tenant_quantum_seconds", tenant="a") == 0.02, "per tenant: share, limit, quantum, processes")
handoffs = value(m, "gpuslice_gpu_handoffs_total", UUID=S1)
checks.expect(handoffs is not None and handoffs >= 5 and
              handoffs == value(m, "gpuslice_gpu_handoff_seconds_count", UUID=S1) and
              value(m, "gpuslice_gpu_handoff_seconds_sum", UUID=S1) < 0.01 * handoffs,
              "%s handoffs a -> b counted, each well under 10 ms in the histogram" % handoffs)
held = value(m, "gpuslice_gpu_held_seconds_total", UUID=S1)
used = sum(v for v in values(m, "gpuslice_tenant_gpu_seconds_total", UUID=S1).values())
checks.expect(held is not None and abs(held - used) < 1e-6, "GPU held time is the tenants' GPU time (%.6f, %.6f)"
              % (held or 0, used))
checks.expect(value(m, "gpuslice_gpu_slices_total", UUID=S1) ==
              sum(values(m, "gpuslice_tenant_gpu_slices_total", UUID=S1).values()), "GPU slices: the tenants' slices")
checks.expect(not values(m, "gpuslice_gpu_holder_info") and
              all(v == 0 for v in values(m, "gpuslice_tenant_gpu_target_ratio").values()),
              "idle: no holder, every target 0")
build = values(m, "gpuslice_build_info")
checks.expect(len(build) == 1 and value(m, "gpuslice_start_time_seconds") > time.time() - 600,
              "build info and start time")

# gpuslicectl top reads the same status (its JSON reader runs in every build).
top = subprocess.run([CTL, "--run-dir", server.run_dir, "top", "--once"], capture_output=True, text=True)
top_rows = [l.split() for l in top.stdout.splitlines() if l.split()[:1] in (["a"], ["b"])]
checks.expect(top.returncode == 0 and len(top_rows) == 3 and ["a", "0100ed5e", "3", "1.00", "1"] == top_rows[0][:5],
              "gpuslicectl top --once: a on two GPUs, b on one (%s)" % top_rows)

# Work in progress: a holds, b waits. Counters grow between two scrapes.
a.acquire(0)
ga = a.expect(gsproto.GRANT)
b.acquire(0)
first = parse(scrape(server.port))
time.sleep(0.05)
second = parse(scrape(server.port))
grew = [n for n in ("gpuslice_tenant_gpu_seconds_total",) if
        value(second, n, tenant="a", UUID=S1) - value(first, n, tenant="a", UUID=S1) < 0.04]
grew += [n for n in ("gpuslice_tenant_gpu_wait_seconds_total",) if
         value(second, n, tenant="b", UUID=S1) - value(first, n, tenant="b", UUID=S1) < 0.04]
checks.expect(not grew and value(second, "gpuslice_gpu_held_seconds_total", UUID=S1) -
              value(first, "gpuslice_gpu_held_seconds_total", UUID=S1) >= 0.04,
              "a slice held and a wait going on count up to the scrape (50 ms apart)")
checks.expect(value(second, "gpuslice_gpu_holder_info", UUID=S1, tenant="a") == 1, "holder_info names a")
checks.expect(abs(value(second, "gpuslice_tenant_gpu_target_ratio", tenant="a", UUID=S1) - 0.75) < 1e-6 and
              abs(value(second, "gpuslice_tenant_gpu_target_ratio", tenant="b", UUID=S1) - 0.25) < 1e-6,
              "both busy at 3:1: targets 0.75 and 0.25")
a.release(0, ga["grant"])
gb = b.expect(gsproto.GRANT)
third = parse(scrape(server.port))
checks.expect(abs(value(third, "gpuslice_tenant_gpu_target_ratio", tenant="b", UUID=S1) - 0.5) < 1e-6 and
              value(third, "gpuslice_tenant_gpu_target_ratio", tenant="a", UUID=S1) == 0,
              "b alone busy: its target is its limit, 0.5")
b.release(0, gb["grant"])
shrunk = [(n, l) for n, l, v in first["samples"] if (n.endswith("_total") or n.endswith("_count") or
          n.endswith("_sum") or n.endswith("_bucket")) and (value(third, n, **l) or 0) < v]
checks.expect(not shrunk, "no counter went down over three scrapes (%s)" % shrunk[:2])

# Drops by reason, reloads by result.
before = parse(scrape(server.port))
bad = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
bad.connect(server.socket("b"))
bad.send(b"not a gpuslice message at all")
greedy = gsproto.Client(server.socket("a"))
try:
    greedy.device(2, gsproto.uuid_bytes(10))  # a third GPU for tenant a, over its limit of 2
except OSError:
    pass
c_conf = os.path.join(server.conf, "c.conf")
server.write_tenant("c", "share = 1\n")
wait_for(lambda: os.path.exists(server.socket("c")), 5)
c = gsproto.Client(server.socket("c"))
os.unlink(c_conf)
server.write_tenant("d", "share = banana\n")
extra = []
for _ in range(5):
    try:
        extra.append(gsproto.Client(server.socket("b"), hello=False))
    except OSError:
        pass


def drops(parsed, reason):
    return value(parsed, "gpuslice_clients_dropped_total", reason=reason)


want = {"protocol": 1, "device_limit": 1, "tenant_removed": 1, "connection_limit": 1}
ok = wait_for(lambda: all(drops(parse(scrape(server.port)), r) - drops(before, r) >= n for r, n in want.items()), 5)
after = parse(scrape(server.port))
checks.expect(ok, "drops by reason: %s" % {r: drops(after, r) - drops(before, r) for r in want})
checks.expect(value(after, "gpuslice_config_reloads_total", result="rejected") -
              value(before, "gpuslice_config_reloads_total", result="rejected") == 1 and
              value(after, "gpuslice_config_reloads_total", result="applied") -
              value(before, "gpuslice_config_reloads_total", result="applied") >= 2,
              "reloads: the bad file rejected, c's addition and removal applied")
for s in extra + [bad]:
    s.close()

# HTTP: what is not a plain GET of /metrics.
port = server.port
cases = [
    (b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    (b"GET /metrics HTTP/1.1\r\n\r\n", 400),
    (b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET /" + b"a" * 400 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 200),
]
wrong = []
for raw, want_code in cases:
    code = split_response(request(port, raw))[0]
    if code != want_code:
        wrong.append("%r -> %d, not %d" % (raw[:30], code, want_code))
checks.expect(not wrong, "404, 405, 400 without Host, 505, 414, and / answered (%s)" % wrong)
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000)
s.settimeout(5)
reply = b""
try:
    while True:
        data = s.recv(4096)
        if not data:
            break
        reply += data
except OSError:
    pass
s.close()
checks.expect(reply.startswith(b"HTTP/1.1 431 "), "a head over 8 KiB: 431 (%r)" % reply[:40])
code, headers, body = split_response(request(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
checks.expect(code == 200 and body == b"" and "version=0.0.4" in headers.get("content-type", ""), "HEAD: headers only")
old = scrape(port, version="1.0")
checks.expect(set(parse(old)["type"]) == families, "HTTP/1.0: the same families, without chunks")
checks.expect(server.proc.poll() is None, "the server is still up")
server.stop()

# --metrics '' serves nothing; a bad address is a usage error.
machine2 = Machine()
quiet = Server(machine2, {"a": "share = 1\n"}, args=["--metrics", ""])
time.sleep(0.2)
checks.expect("metrics: serving" not in quiet.log(), "--metrics '': no listener")
quiet.stop()
rc = subprocess.run([SERVER, "--metrics", "localhost:80x", "--config-dir", "/nonexistent"],
                    capture_output=True, text=True)
checks.expect(rc.returncode == 1 and "--metrics" in rc.stderr, "--metrics localhost:80x: usage error (exit %d)"
              % rc.returncode)

# A port already taken: the server runs on, and serves once the port is free.
holder = socket.socket()
holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
holder.bind(("127.0.0.1", 0))
holder.listen(1)
taken = holder.getsockname()[1]
machine3 = Machine()
busy = Server(machine3, {"a": "share = 1\n"}, args=["--metrics", "127.0.0.1:%d" % taken])
checks.expect(wait_for(lambda: "cannot listen on 127.0.0.1:%d" % taken in busy.log(), 2) and busy.proc.poll() is None,
              "port taken: logged, and the token server runs on")
holder.close()
checks.expect(wait_for(lambda: "metrics: serving" in busy.log(), 7) and "gpuslice_build_info" in scrape(taken),
              "the port freed: served within 5 s")
busy.stop()
checks.finish()
