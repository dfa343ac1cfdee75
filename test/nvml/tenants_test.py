"""NVML inside a tenant (issue 27), on the simulated NVML (test/fakenvml)
beside fakecuda, with two tenants on one 16 GiB GPU, caps 2 GiB and 6 GiB,
shares 1:3, each holding memory and running kernels.

1. No server: NVML's answers through the shim are NVML's own, on the
   dlopen+dlsym path (test/lib/nvml_ctypes.py) and the linked one
   (nvml_probe).
2. Memory and processes: each tenant sees its cap as total, its count as
   used (equal to fakecuda's meter of what its processes hold), free =
   cap - used, and exactly its own processes, with the memory the meter
   shows for each, on every list (compute v1, v2, v3, the detail list);
   both paths.
3. Utilization: each tenant's utilization.gpu, sampled 17 times over a
   5 s window, averages within 3 points of its share of device time by
   fakecuda's meter over that window, or above it by at most the time the
   device ran nothing (the server's figure is the time the tenant held
   the GPU, idle moments of its slices included).
4. Hostile: a process of tenant a asks NVML about b's pids (names), asks
   the server directly (the socket) about the GPU and about made-up UUIDs,
   and floods it with 2000 requests: it never sees a pid or a byte of b,
   the flood is answered LIMITED past 20 a second, and the server spends
   little CPU on it.
"""
import json
import os
import subprocess
import sys
import time

import nvml_ctypes
from testlib import BUILD, MEMHOG, SHIM, Checks, Machine, Server, load_note

CTYPES = nvml_ctypes.__file__
PROBE = os.path.join(BUILD, "test", "helpers", "nvml_probe")
GIB = 1 << 30
TIMING = "--no-timing" not in sys.argv  # sanitizer builds: shares are not judged
checks = Checks()


def ctypes_report(env):
    out = subprocess.run([sys.executable, CTYPES], env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        print(out.stdout, out.stderr)
        return None
    return json.loads(out.stdout)


def probe(env, *args):
    out = subprocess.run([PROBE] + list(args), env=env, capture_output=True, text=True, timeout=60)
    return dict(kv.split("=", 1) for kv in out.stdout.split()) if out.returncode == 0 else {"error": out.stderr}


def stable(report):
    """What must not change between two reads of an idle GPU."""
    g = report["gpus"][0]
    return {k: g[k] for k in ("uuid", "memory", "memory_v2", "procs_v1", "procs_v2", "procs_v3", "detail",
                              "procs_graphics", "procs_mps", "names")}


def hog(env, mb, count):
    p = subprocess.Popen([MEMHOG, "--chunk-mb", str(mb), "--count", str(count), "--hold"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    checks.expect("allocated=%d" % count in line, "memhog %d x %d MiB holds its memory (%s)" % (count, mb, line.strip()))
    return p


def meter_memory(machine):
    return {p["pid"]: p["mem_used"] for p in machine.meter()["processes"] if p["alive"]}


machine = Machine(devices=1, memory="16G")
server = Server(machine, {"a": "memory = 2G\nshare = 1\nquantum_ms = 100\n",
                          "b": "memory = 6G\nshare = 3\nquantum_ms = 100\n"})
procs = []
try:
    env = {"a": server.tenant_env("a"), "b": server.tenant_env("b")}
    hogs = {"a": hog(env["a"], 512, 2), "b": hog(env["b"], 1024, 3)}
    procs += hogs.values()
    pids = {t: {hogs[t].pid} for t in "ab"}

    # ---- 1. no server: NVML's own answers ---------------------------------------
    plain = dict(machine.env)
    noserver = dict(machine.env, LD_PRELOAD=SHIM, GPUSLICE_SOCKET="/nonexistent/gpuslice.sock")
    for policy in ("wait", "open"):
        ref = ctypes_report(plain)
        got = ctypes_report(dict(noserver, GPUSLICE_ON_SERVER_DOWN=policy))
        checks.expect(ref and got and stable(ref) == stable(got),
                      "no server (%s): every answer through the shim, dlopen+dlsym path, is NVML's own" % policy)
        a, b = probe(plain, "report"), probe(dict(noserver, GPUSLICE_ON_SERVER_DOWN=policy), "report")
        checks.expect(a.get("rc") == "0" and {k: a.get(k) for k in ("total", "used", "free", "pids")} ==
                      {k: b.get(k) for k in ("total", "used", "free", "pids")},
                      "no server (%s): the linked path's answers are NVML's own (%s)" % (policy, b))
    checks.expect(ref and ref["gpus"][0]["memory"]["total"] == 16 * GIB and
                  sorted(p["pid"] for p in ref["gpus"][0]["procs_v3"]["procs"]) == sorted(pids["a"] | pids["b"]),
                  "without the shim NVML shows the whole GPU and both tenants' processes")

    # ---- 2. memory and processes ------------------------------------------------------
    caps = {"a": 2 * GIB, "b": 6 * GIB}
    truth = meter_memory(machine)
    for t in "ab":
        r = ctypes_report(env[t])
        g = r["gpus"][0] if r and r["gpus"] else {}
        held = sum(truth.get(p, 0) for p in pids[t])
        m = g.get("memory", {})
        checks.expect(m == {"total": caps[t], "used": held, "free": caps[t] - held},
                      "tenant %s: memory v1 is its cap %d, its use %d (the meter) and the rest (%s)" % (t, caps[t], held, m))
        m2 = g.get("memory_v2", {})
        checks.expect(m2.get("total") == caps[t] and m2.get("used") == held and m2.get("free") == caps[t] - held,
                      "tenant %s: memory v2 the same (%s)" % (t, m2))
        for key in ("procs_v1", "procs_v2", "procs_v3", "detail"):
            listed = {p["pid"]: p["used"] for p in g.get(key, {}).get("procs", [])}
            checks.expect(listed == {p: truth.get(p) for p in pids[t]},
                          "tenant %s: %s lists exactly its own processes, each with its memory (%s)" % (t, key, listed))
        linked = probe(env[t], "report")
        checks.expect(linked.get("total") == str(caps[t]) and linked.get("used") == str(held) and
                      set(linked.get("pids", "").split(",")) == {str(p) for p in pids[t]},
                      "tenant %s: the linked path reports the same (%s)" % (t, linked))

    # ---- 3. utilization -----------------------------------------------------------------
    spins = {t: server.spin(t, 30, kernel_us=2000, depth=8) for t in "ab"}
    procs += spins.values()
    for t in "ab":
        pids[t].add(spins[t].pid)
    time.sleep(2.5)
    snap = machine.snapshot()
    began = time.monotonic()
    # While both run: tenant a's per-process samples are its own.
    r = ctypes_report(env["a"])
    own = {s["pid"] for s in r["gpus"][0]["samples"]["samples"]} if r else set()
    checks.expect(own and own <= pids["a"], "tenant a: per-process utilization samples are its own processes' (%s)" % own)
    time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
    samples = {t: [] for t in "ab"}
    for i in range(17):  # t0 + 1 s .. t0 + 5 s, each covering the second before it
        for t in "ab":
            r = probe(env[t], "report")
            if r.get("rc") == "0":
                samples[t].append(int(r["gpu"]))
        time.sleep(0.2)
    meter = machine.meter(since=snap)
    wall = meter["wall_ns"]
    # The server reports its charges: the time the tenant held the GPU. A
    # slice's idle moments (a handoff, a launcher late for a CPU) count as
    # held, so the figure lies between the tenant's device time by the
    # meter and that plus the time the device ran nothing. Beside a busy
    # loop b read 74.6 % where its kernels ran 71.2 % and the device sat
    # idle about 5 %. The whole GPU's figure (95 % or more) or the other
    # tenant's (a quarter or three quarters) is far outside.
    idle_pct = 100.0 * max(0, wall - sum(p["busy_ns"] for p in meter["processes"])) / wall
    for t in "ab":
        busy = sum(p["busy_ns"] for p in meter["processes"] if p["pid"] in pids[t])
        truth_pct = 100.0 * busy / wall
        mean = sum(samples[t]) / len(samples[t]) if samples[t] else -100
        checks.expect(len(samples[t]) == 17 and (truth_pct - 3.0 <= mean <= truth_pct + idle_pct + 3.0 or not TIMING),
                      "tenant %s: utilization.gpu averages %.1f %% over %d samples; the meter says its kernels ran "
                      "%.1f %% and the device ran nothing %.1f %% (from 3 points under the first to 3 over their sum)%s"
                      % (t, mean, len(samples[t]), truth_pct, idle_pct, load_note()))

    # ---- 4. hostile -------------------------------------------------------------------------
    r = ctypes_report(env["a"])
    text = json.dumps(r)
    foreign = [p for p in pids["b"] if str(p) in text]
    checks.expect(r and not foreign, "tenant a's whole NVML report names no pid of b (%s)" % foreign)
    code = ("import sys; sys.path.insert(0, %r); import nvml_ctypes as n; x = n.Nvml(); "
            "print(' '.join(str(x.name(p)[0]) for p in %r))" % (os.path.dirname(CTYPES), sorted(pids["b"])))
    out = subprocess.run([sys.executable, "-c", code], env=env["a"], capture_output=True, text=True, timeout=60)
    checks.expect(out.stdout.split() == ["6"] * len(pids["b"]),
                  "tenant a: nvmlSystemGetProcessName of b's pids is NVML_ERROR_NOT_FOUND (%s)" % out.stdout.strip())
    uuid = machine.meter()["devices"][0]["uuid"]
    cpu0 = server.cpu_seconds()
    start = time.monotonic()
    raw = probe(machine.env, "raw", server.socket("a"), uuid, "2000", "20000")
    spent = time.monotonic() - start
    cpu = server.cpu_seconds() - cpu0
    a_pids = {int(p) for p in raw.get("pids", "").split(",") if p}
    checks.expect(raw.get("other") == "0" and int(raw.get("ok", 0)) >= 1 and a_pids <= pids["a"] and
                  not a_pids & pids["b"] and int(raw.get("used", -1)) <= caps["a"],
                  "the socket: tenant a asking about the GPU gets only its own processes and use (%s)" % raw)
    checks.expect(int(raw.get("ok", 0)) <= 20 + 25 * spent and int(raw.get("limited", 0)) >= 1500,
                  "the socket: 2000 requests in %.2f s are answered, past 20 a second LIMITED (%s)" % (spent, raw))
    checks.expect(cpu < (0.5 if TIMING else 2.0), "the server spent %.3f s of CPU on 2000 requests" % cpu)
    time.sleep(1.1)  # the bucket refills
    made_up = probe(machine.env, "raw", server.socket("a"), "ab" * 16, "1", "10")
    checks.expect(made_up.get("ok") == "1" and made_up.get("pids") == "" and made_up.get("used") == "0",
                  "the socket: a made-up UUID gets the tenant's cap and zeros (%s)" % made_up)
finally:
    for p in procs:
        try:
            if not p.stdin:
                p.terminate()  # a spin still running
            else:
                p.stdin.close()
            p.wait(timeout=30)
        except Exception:
            p.kill()
    server.stop()
checks.finish()
