"""The rows of test/gpu/check.sh: each check runs real tenants under
gpuslice-server, measures one figure and compares it with its target. Writes
the Markdown table to standard output and to --out, and exits 0 when every
row passed or was skipped, 1 otherwise.

  gpu_check.py --build DIR --out FILE [--simulate]

On a GPU the programs use the machine's libcuda.so.1; with --simulate they
run on fakecuda (DIR/test/fakecuda), the simulated driver, with a fresh
simulated GPU per row.
"""
import argparse
import datetime
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description="gpuslice GPU check rows")
parser.add_argument("--build", required=True, help="a configured and built meson build directory")
parser.add_argument("--out", required=True, help="where to write the Markdown table")
parser.add_argument("--simulate", action="store_true", help="run on fakecuda instead of a GPU")
ARGS = parser.parse_args()
BUILD = os.path.abspath(ARGS.build)
os.environ["GPUSLICE_BUILD_DIR"] = BUILD
sys.path.insert(0, os.path.join(HERE, ".."))
import testlib  # noqa: E402  (reads GPUSLICE_BUILD_DIR)

SIMULATE = ARGS.simulate
SHARE_POINTS = 3.0        # rows 1 and 2: achieved share within +-3 percentage points
CPU_LIMIT_PCT = 1.0       # row 4: the shim's threads, % of one core
OVERHEAD_LIMIT_NS = 20.0  # row 5: added ns per cuLaunchKernel
SPIN_SECONDS = 8 if SIMULATE else 20
CPU_SECONDS = 10
CAPTURE_OPS = 20000
CAPTURE_APP = os.path.join(BUILD, "test", "capture_app")
# The whole run stops waiting after this many seconds (8 minutes on a GPU
# with the build; 2 simulated): a hung program fails its row, and the rows
# not started by then are skipped.
BUDGET_S = 100 if SIMULATE else 390
DEADLINE = time.monotonic() + BUDGET_S


def within(seconds):
    """seconds, or what is left of the run's budget if that is less."""
    return max(1.0, min(seconds, DEADLINE - time.monotonic()))
BENCH = os.path.join(BUILD, "test", "launch_overhead_bench")


class Row:
    def __init__(self, number, check, target):
        self.number, self.check, self.target = number, check, target
        self.measured, self.result = "-", "FAIL"

    def passed(self, ok, measured):
        self.measured, self.result = measured, "PASS" if ok else "FAIL"
        return self

    def failed(self, measured):
        return self.passed(False, measured)

    def skipped(self, reason):
        self.result = "skipped (%s)" % reason
        return self


class Node:
    """One machine for one row: on a GPU, this one; simulated, a fresh
    fakecuda state. Has what testlib.Server needs (dir, env)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gpuslice-check-")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
        if SIMULATE:
            self.env.update({"LD_LIBRARY_PATH": testlib.FAKECUDA_DIR,
                             "FAKECUDA_STATE": os.path.join(self.dir, "fakecuda.state")})
            subprocess.run([testlib.SPIN, "--count", "1", "--kernel-us", "1"], env=self.env, check=True,
                           stdout=subprocess.DEVNULL)

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Tenants:
    """gpuslice-server with the given {tenant: share} on a fresh Node (and
    each tenant's extra configuration lines); every process started with
    start() is killed by close()."""

    def __init__(self, shares, extra=None):
        self.node = Node()
        self.server = testlib.Server(self.node, {t: "share = %g\n%s" % (s, (extra or {}).get(t, ""))
                                                 for t, s in shares.items()}, grace_ms=1000)
        self.procs = []

    def start(self, tenant, argv, stdin=False, **extra_env):
        env = self.server.tenant_env(tenant, **extra_env)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, bufsize=1)
        self.procs.append(proc)
        return proc

    def slices(self):
        """{tenant: (slices, gpu_ms)} summed over devices, from gpuslicectl."""
        status = self.server.status()
        return {t["name"]: (sum(d["slices"] for d in t["devices"]), sum(d["gpu_ms"] for d in t["devices"]))
                for t in status["tenants"]}

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.server.stop()
        self.node.cleanup()


class Lines:
    """The output lines of a process, read by a thread, with timeouts."""

    def __init__(self, proc):
        self.proc, self.lines, self.seen = proc, queue.Queue(), []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, prefixes, timeout):
        """The first line starting with one of prefixes, or None at the end
        of the output or after timeout seconds."""
        deadline = time.monotonic() + within(timeout)
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self.lines.put(None)
                return None
            self.seen.append(line)
            if line.startswith(tuple(prefixes)):
                return line

    def tail(self, n=3):
        return " / ".join(self.seen[-n:]) or "no output"


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def finish(proc, timeout):
    """Waits for proc; returns its whole remaining output."""
    try:
        out, _ = proc.communicate(timeout=within(timeout))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or ""


# ---- 1. spin at 3:1 ----------------------------------------------------------

def row_spin():
    row = Row(1, "spin, two tenants at share 3:1, %d s of 1 ms kernels each" % SPIN_SECONDS,
              "75 / 25 %% +-%g pp" % SHARE_POINTS)
    tenants = Tenants({"a": 3, "b": 1})
    try:
        argv = [testlib.SPIN, "--seconds", str(SPIN_SECONDS), "--kernel-us", "1000", "--depth", "16"]
        procs = {t: tenants.start(t, argv) for t in ("a", "b")}
        runs = {}
        for t, p in procs.items():
            out = finish(p, SPIN_SECONDS + 60)
            runs[t] = testlib.parse_line(out, "spin")
            if p.returncode != 0 or not runs[t]:
                return row.failed("spin in tenant %s failed (exit %s): %s" % (t, p.returncode, out.strip()[-200:]))
        work = {t: int(r["kernels"]) * float(r["kernel_us"]) for t, r in runs.items()}
        share = {t: 100 * w / sum(work.values()) for t, w in work.items()}
        ok = abs(share["a"] - 75) <= SHARE_POINTS and abs(share["b"] - 25) <= SHARE_POINTS
        return row.passed(ok, "%.1f / %.1f %% (kernels %s / %s)" % (share["a"], share["b"], runs["a"]["kernels"],
                                                                    runs["b"]["kernels"]))
    finally:
        tenants.close()


# ---- 2. PyTorch matmul at 3:1 -------------------------------------------------

def torch_missing():
    """Why the PyTorch rows cannot run, or None."""
    probe = subprocess.run([sys.executable, "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    if probe.returncode == 3:
        return "PyTorch has no CUDA device"
    last = (probe.stderr.strip().splitlines() or ["import failed"])[-1]
    return "PyTorch with CUDA not available: %s" % last[:80]


def row_matmul(missing):
    row = Row(2, "PyTorch 4096x4096 bf16 matmul loops, two tenants at 3:1, %d s" % SPIN_SECONDS,
              "ratio 3.0 (75 / 25 %% +-%g pp)" % SHARE_POINTS)
    if SIMULATE:
        return row.skipped("simulate: needs PyTorch")
    if missing:
        return row.skipped(missing)
    tenants = Tenants({"a": 3, "b": 1})
    try:
        argv = [sys.executable, os.path.join(HERE, "torch_matmul.py"), "--seconds", str(SPIN_SECONDS)]
        procs = {t: tenants.start(t, argv, stdin=True) for t in ("a", "b")}
        lines = {t: Lines(p) for t, p in procs.items()}
        for t in procs:
            if not lines[t].until(["ready"], 120):
                return row.failed("tenant %s never got ready: %s" % (t, lines[t].tail()))
        for p in procs.values():
            p.stdin.write("go\n")
            p.stdin.flush()
        iters = {}
        for t, p in procs.items():
            line = lines[t].until(["torch_matmul:"], SPIN_SECONDS + 120)
            if not line:
                return row.failed("tenant %s: %s" % (t, lines[t].tail()))
            iters[t] = int(fields(line)["iterations"])
        if not iters["b"]:
            return row.failed("tenant b finished no matmul (a: %d)" % iters["a"])
        share = 100 * iters["a"] / (iters["a"] + iters["b"])
        return row.passed(abs(share - 75) <= SHARE_POINTS, "ratio %.2f (%.1f / %.1f %%, %d / %d matmuls)" % (
            iters["a"] / iters["b"], share, 100 - share, iters["a"], iters["b"]))
    finally:
        tenants.close()


# ---- 3. graph capture while losing slices ----------------------------------------

def row_capture(missing):
    if SIMULATE:
        row = Row(3, "capture_app: stream capture of %d launches (mode global, created stream) against a busy "
                     "neighbour at 1:1" % CAPTURE_OPS, "end_capture=CUDA_SUCCESS")
        if not os.path.exists(CAPTURE_APP):
            return row.skipped("capture_app not built")
        tenants = Tenants({"cap": 1, "busy": 1})
        try:
            tenants.start("busy", [testlib.SPIN, "--seconds", "600"])
            time.sleep(0.5)
            before = tenants.slices()
            proc = tenants.start("cap", [CAPTURE_APP, "--launches", str(CAPTURE_OPS), "--mode", "global",
                                         "--stream", "created"])
            out = finish(proc, 120)
            after = tenants.slices()
            ok = proc.returncode == 0 and "end_capture=CUDA_SUCCESS" in out
            got = next((w for w in out.split() if w.startswith("end_capture=")), "no end_capture line")
            return row.passed(ok, "%s, exit %s; slices meanwhile: cap %d, busy %d" % (
                got, proc.returncode, after["cap"][0] - before["cap"][0], after["busy"][0] - before["busy"][0]))
        finally:
            tenants.close()

    row = Row(3, "torch.cuda.graph: capture %d x.add_(1), replay, against a busy spin neighbour at 1:1" % CAPTURE_OPS,
              "capture succeeds, replays give the right value and take slices")
    if missing:
        return row.skipped(missing)
    tenants = Tenants({"cap": 1, "busy": 1})
    try:
        tenants.start("busy", [testlib.SPIN, "--seconds", "600"])
        proc = tenants.start("cap", [sys.executable, os.path.join(HERE, "torch_capture.py"),
                                     "--ops", str(CAPTURE_OPS)], stdin=True)
        lines = Lines(proc)
        if not lines.until(["warm:"], 120):
            return row.failed("warm-up failed: %s" % lines.tail())
        start = tenants.slices()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        captured = lines.until(["captured:", "capture_failed:"], 120)
        if not captured or captured.startswith("capture_failed:"):
            return row.failed("capture failed: %s" % (captured or lines.tail()))
        mid = tenants.slices()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        replayed = lines.until(["replayed:"], 120)
        end = tenants.slices()
        finish(proc, 60)
        if not replayed:
            return row.failed("replay failed: %s" % lines.tail())
        r = fields(replayed)
        lost = mid["busy"][0] - start["busy"][0]
        gated = end["cap"][0] - mid["cap"][0]
        ok = r["ok"] == "1" and gated >= 1 and lost >= 1
        return row.passed(ok, "capture %s ms, neighbour took %d slices meanwhile; %s replays in %s ms, value %s "
                              "(expected %s), %d slices taken for them" % (
                                  fields(captured)["ms"], lost, r["replays"], r["ms"], r["value"], r["expected"],
                                  gated))
    finally:
        tenants.close()


# ---- 4. CPU used by the shim's own threads -----------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def thread_cpu_ns(pid, tid):
    base = "/proc/%d/task/%s/" % (pid, tid)
    try:
        with open(base + "schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    with open(base + "stat") as f:
        after_comm = f.read().rsplit(")", 1)[1].split()
    return (int(after_comm[11]) + int(after_comm[12])) * 1_000_000_000 // CLK_TCK


def threads_cpu(pid):
    """{(tid, comm): cpu ns} for every live thread of pid."""
    result = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                comm = f.read().strip()
            result[(tid, comm)] = thread_cpu_ns(pid, tid)
        except (OSError, ValueError):
            continue
    return result


def row_cpu():
    row = Row(4, "CPU of the shim's threads (gpuslice*), 1 ms spin kernels at 1:1 with a neighbour, %d s" % CPU_SECONDS,
              "<= %g %% of one core per process" % CPU_LIMIT_PCT)
    tenants = Tenants({"a": 1, "b": 1})
    try:
        argv = [testlib.SPIN, "--seconds", str(CPU_SECONDS), "--kernel-us", "1000", "--depth", "16"]
        procs = {t: tenants.start(t, argv) for t in ("a", "b")}
        time.sleep(1.0)
        first = {t: threads_cpu(p.pid) for t, p in procs.items()}
        t0 = time.monotonic()
        time.sleep(CPU_SECONDS - 2.0)
        last = {t: threads_cpu(p.pid) for t, p in procs.items()}
        wall = time.monotonic() - t0
        for t, p in procs.items():
            finish(p, CPU_SECONDS + 60)
            if p.returncode != 0:
                return row.failed("spin in tenant %s failed (exit %s)" % (t, p.returncode))
        pct, names, other = {}, {}, {}
        for t, p in procs.items():
            shim = [k for k in last[t] if k[1].startswith("gpuslice")]
            names[t] = sorted(set(k[1] for k in shim))
            pct[t] = 100 * sum(last[t][k] - first[t].get(k, 0) for k in shim) / (wall * 1e9)
            rest = [k for k in last[t] if k not in shim and k[0] != str(p.pid)]
            other[t] = 100 * sum(last[t][k] - first[t].get(k, 0) for k in rest) / (wall * 1e9)
        if not all(names.values()):
            return row.failed("no thread named gpuslice* in the tenants' processes (other threads than the main "
                              "one: %.2f / %.2f %% of a core)" % (other["a"], other["b"]))
        ok = all(v <= CPU_LIMIT_PCT for v in pct.values())
        return row.passed(ok, "%.2f / %.2f %% of a core (threads: %s)" % (pct["a"], pct["b"], ", ".join(names["a"])))
    finally:
        tenants.close()


# ---- 5. launch overhead -------------------------------------------------------------

def row_overhead():
    row = Row(5, "cuLaunchKernel with and without the shim (launch_overhead_bench)",
              "<= %g ns added per launch" % OVERHEAD_LIMIT_NS)
    node = Node()
    try:
        env = dict(node.env)
        env.update({"GPUSLICE_SOCKET": "/nonexistent/gpuslice.sock", "GPUSLICE_ON_SERVER_DOWN": "open"})
        if SIMULATE:
            env["FAKECUDA_KERNEL_NS"] = "0"
        proc = subprocess.run([BENCH, testlib.SHIM, "2000"], env=env, capture_output=True, text=True,
                              timeout=within(120))
        out = {}
        for line in proc.stdout.splitlines():
            key, _, value = line.partition(":")
            if value.strip():
                out[key.strip()] = value.split()[0]
        if proc.returncode != 0 or "overhead" not in out:
            return row.failed("launch_overhead_bench failed (exit %d): %s" % (proc.returncode, proc.stderr.strip()[-200:]))
        overhead = float(out["overhead"])
        return row.passed(overhead <= OVERHEAD_LIMIT_NS, "%s ns without, %s ns with: %+.1f ns per launch" % (
            out["without shim"], out["with shim"], overhead))
    finally:
        node.cleanup()


# ---- 6. memory cap, each allocator backend ---------------------------------------------

MEMCAP = 2 << 30
BACKENDS = [("native", None), ("cudaMallocAsync", "backend:cudaMallocAsync"),
            ("expandable segments", "expandable_segments:True")]


def peak_memory(node, pid):
    """On fakecuda: the most device memory a process held, by the meter."""
    meter = json.loads(subprocess.run([testlib.STAT, "--json", node.env["FAKECUDA_STATE"]], capture_output=True,
                                      text=True, timeout=30).stdout or "{}")
    return max([p["mem_peak"] for p in meter.get("processes", []) if p["pid"] == pid] or [0])


def process_memory(pid):
    """nvidia-smi's used_memory of a process, 0 if not listed."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        cols = [f.strip() for f in line.split(",")]
        if len(cols) == 2 and cols[0] == str(pid) and cols[1].isdigit():
            return int(cols[1]) << 20
    return 0


def memcap_run(tenants, backend, conf):
    """One backend under the 2 GiB cap: (ok, text)."""
    if SIMULATE:
        # memscript makes the driver calls each backend makes: plain
        # allocations, stream-ordered ones kept by the pool, VMM.
        op = {"native": "alloc %d %d", "cudaMallocAsync": "async %d %d -1",
              "expandable segments": "vmm %d %d"}[backend]
        script = ["init", "default_threshold max", "info"] + [op % (i, 256 << 20) for i in range(1, 12)]
        if backend == "expandable segments":
            script += ["map %d" % i for i in range(1, 12)]
        proc = tenants.start("m", [os.path.join(BUILD, "test", "memscript")], stdin=True)
        out = proc.communicate(input="\n".join(script + ["quit"]) + "\n", timeout=within(60))[0]
        replies = [line for line in out.splitlines() if line.startswith("rc=")]
        info = fields("x " + replies[2]) if len(replies) > 2 else {}
        free, total = int(info.get("free", 0)), int(info.get("total", 0))
        oom = any("CUDA_ERROR_OUT_OF_MEMORY" in r for r in replies[3:])
        peak = peak_memory(tenants.node, proc.pid)
    else:
        env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
        proc = tenants.start("m", [sys.executable, os.path.join(HERE, "torch_memcap.py")], **env)
        peak = 0
        while proc.poll() is None and time.monotonic() < DEADLINE:
            peak = max(peak, process_memory(proc.pid))
            time.sleep(0.1)
        line = testlib.parse_line(finish(proc, 120), "torch_memcap") or {}
        free, total, oom = int(line.get("free", 0)), int(line.get("total", 0)), line.get("oom") == "1"
    ok = 0 < total <= MEMCAP and free <= total and oom and 0 < peak <= MEMCAP
    return ok, "%s: mem_get_info %d/%d MiB, %s, peak %d MiB" % (backend, free >> 20, total >> 20,
                                                                  "OOM past the cap" if oom else "no OOM", peak >> 20)


def row_memcap(missing):
    row = Row(6, "PyTorch under a 2 GiB cap, allocator native / cudaMallocAsync / expandable segments: "
                 "mem_get_info, OutOfMemoryError past it, nvidia-smi used_memory",
              "total <= 2 GiB, OOM, used <= 2 GiB")
    if not SIMULATE and missing:
        return row.skipped(missing)
    results = []
    for backend, conf in BACKENDS:
        tenants = Tenants({"m": 1}, {"m": "memory = 2G\n"})
        try:
            results.append(memcap_run(tenants, backend, conf))
        finally:
            tenants.close()
    return row.passed(all(ok for ok, _ in results), "; ".join(text for _, text in results))


# ---- the table ---------------------------------------------------------------------

def machine_line():
    if SIMULATE:
        return "fakecuda (simulated GPU, --simulate)"
    try:
        gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout.splitlines()
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.split()
        return "%s, driver %s" % (gpu[0] if gpu else "unknown GPU", driver[0] if driver else "unknown")
    except (OSError, subprocess.SubprocessError):
        return "GPU (nvidia-smi unavailable)"


def commit():
    try:
        return subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main():
    started = time.monotonic()
    missing = None if SIMULATE else torch_missing()
    rows = []
    for make in (row_spin, lambda: row_matmul(missing), lambda: row_capture(missing), row_cpu, row_overhead,
                 lambda: row_memcap(missing)):
        t0 = time.monotonic()
        try:
            row = make() if t0 < DEADLINE - 5 else Row(len(rows) + 1, "row %d" % (len(rows) + 1), "-").skipped(
                "the run's %d s budget was spent" % BUDGET_S)
        except Exception as e:  # noqa: BLE001 - a broken row is a failed row, the others still run
            row = Row(len(rows) + 1, "row %d" % (len(rows) + 1), "-").failed("error: %s" % e)
        row.seconds = time.monotonic() - t0
        rows.append(row)
        print("row %d: %s (%.0f s)" % (row.number, row.result, row.seconds), file=sys.stderr, flush=True)
    text = ["# gpuslice GPU check", "",
            "- machine: %s" % machine_line(),
            "- commit: %s, %s" % (commit(), datetime.datetime.now().strftime("%Y-%m-%d %H:%M")),
            "- total time: %.0f s" % (time.monotonic() - started), "",
            "| # | check | measured | target | result |",
            "|---|---|---|---|---|"]
    for r in rows:
        text.append("| %d | %s | %s | %s | %s |" % (r.number, r.check, r.measured.replace("|", "/"), r.target,
                                                   r.result))
    failed = [r for r in rows if r.result == "FAIL"]
    text += ["", "%d passed, %d failed, %d skipped" % (sum(r.result == "PASS" for r in rows), len(failed),
                                                       sum(r.result.startswith("skipped") for r in rows))]
    table = "\n".join(text) + "\n"
    sys.stdout.write(table)
    with open(ARGS.out, "w") as f:
        f.write(table)
    sys.exit(1 if failed else 0)


main()
