"""The rows of test/gpu/check.sh: each row runs real tenants under
gpuslice-server, measures its figures with a measure of its own (never
gpuslice's bookkeeping) and compares them with its target. Writes a
Markdown table to standard output and to --out, the same as JSON beside it
(--out's name with the suffix .json), and exits 0 when every row passed or
was skipped, 1 otherwise.

  gpu_check.py --build DIR --out FILE [--simulate] [--quick] [--rows LIST]
               [--plant FAULT] [--nvidia-smi PATH]

On a GPU the programs use the machine's libcuda.so.1; with --simulate they
run on fakecuda (DIR/test/fakecuda), the simulated driver, with a fresh
simulated GPU per row. Each row has a time limit of its own, and a row
that fails or runs out of time never stops the next.

--plant graph-gate-bypass | handoff-delay | preemption-ignored (with
--simulate only) preloads a planted fault into row 4's or row 6's tenants,
or row 11's batch tenants (test/gpu/plant_*.c), for the test that shows
those rows fail when gpuslice does (test/gpu/plant_test.py). --plant nvml-passthrough gives row 10's NVML
clients in the tenants no server to ask, so that the shim passes NVML's
own answers through (test/gpu/nvml_row_test.py).

--nvidia-smi PATH is the nvidia-smi row 10 runs (default: the one on
PATH). Simulated, row 10 skips nvidia-smi's part unless one is given: the
real one does not run on the simulated NVML, and its stand-in
(test/gpu/smi_standin.py) is for the test of the row itself
(test/gpu/nvml_row_test.py).
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PLANTS = {"graph-gate-bypass": (4, "plant_graph_bypass.so"), "handoff-delay": (6, "plant_handoff_delay.so"),
          "nvml-passthrough": (10, None), "preemption-ignored": (11, "plant_preemption_ignored.so")}
parser = argparse.ArgumentParser(description="gpuslice GPU check rows")
parser.add_argument("--build", required=True, help="a configured and built meson build directory")
parser.add_argument("--out", required=True, help="where to write the Markdown table")
parser.add_argument("--simulate", action="store_true", help="run on fakecuda instead of a GPU")
parser.add_argument("--quick", action="store_true", help="shorter rows (the test suite)")
parser.add_argument("--rows", help="only these rows, e.g. 1,6,9")
parser.add_argument("--plant", choices=sorted(PLANTS), help="a planted fault (with --simulate only)")
parser.add_argument("--nvidia-smi", help="the nvidia-smi row 10 runs (simulated: a stand-in, else none)")
ARGS = parser.parse_args()
if ARGS.plant and not ARGS.simulate:
    parser.error("--plant is for --simulate only")
BUILD = os.path.abspath(ARGS.build)
os.environ["GPUSLICE_BUILD_DIR"] = BUILD
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import testlib  # noqa: E402  (reads GPUSLICE_BUILD_DIR)
import checkrun  # noqa: E402
from checkrun import (Node, Row, Tenants, busy_in, common_window, fields, handoffs, overlap_in,  # noqa: E402
                      percentile, read_stamps, run_row, start_together, within)

SIMULATE, QUICK = ARGS.simulate, ARGS.quick
checkrun.SIMULATE = SIMULATE
STAMPS = os.path.join(BUILD, "test", "gpu", "stamps")
BENCH = os.path.join(BUILD, "test", "bench", "launch_overhead_bench")


def pick(gpu, simulated, quick):
    return quick if QUICK else simulated if SIMULATE else gpu


# Durations in seconds (GPU, simulated, --quick).
SPIN_S = pick(15, 6, 2.5)            # rows 1, 3: each pair's measured run
BASELINE_S = pick(8, 3, 1.5)         # rows 1, 3: the pair without gpuslice
LIMIT_S = pick(10, 4, 2.5)           # row 2
REPLAY_S = pick(5, 3, 1.5)           # row 4: the graph's replays
INFER_S = pick(8, 3, 1.5)            # row 5, with and without gpuslice
HANDOFF_S = pick(10, 5, 2.5)         # row 6
CPU_S = pick(10, 8, 4)               # row 7
BENCH_BATCHES = pick(2000, 1000, 300)
# Targets.
SHARE_POINTS = 3.0                   # rows 1, 3: achieved share within +-3 percentage points
BUSY_MIN, BUSY_MAX = 0.90, 1.01      # row 1: kernel time / wall (> 1: a leak)
LIMIT = 0.3                          # rows 2, 4
LIMIT_LOW, LIMIT_HIGH = 0.25, 0.32   # row 2
REPLAY_HIGH = LIMIT + 0.05           # row 4
QUANTUM_MS = 20                      # the server's default slice
HANDOFF_QUANTUM_MS = 60              # row 6 (see row_handoff)
HANDOFF_MEDIAN_MS = 1.0
# Simulated, the p99 is reported, not judged: on a small machine shared
# with other work, fakecuda's device threads and the shim's wait tens of
# ms for a CPU now and then.
HANDOFF_P99_MS = None if SIMULATE else 5.0
CPU_LIMIT_PCT = 1.0                  # row 7: the shim's threads, % of one core
# Simulated, row 7 judges the shim's threads by their wake-ups a second
# (about 260 per process; a drainer that polls every millisecond makes
# over 600) and their CPU only against spinning: on a virtual machine one
# wake-up costs 30 to 130 us of CPU depending on the host, for the same
# count (docs/BENCHMARKS.md, "The shim's CPU").
SIM_WAKEUPS_PER_S = 400
SIM_CPU_LIMIT_PCT = 10.0
OVERHEAD_LIMIT_NS = 20.0             # row 7: added ns per cuLaunchKernel
MEMCAP = 2 << 30                     # row 8
KILL_LIMIT_MS = 50.0                 # row 9
CAPTURE_OPS = 20000
NVML_CAPS = {"a": 2 << 30, "b": 6 << 30}  # row 10: the tenants' memory caps
NVML_HOLDERS = [("a", 2), ("b", 6), ("b", 1)]  # row 10: (tenant, 256 MiB allocations held) per process
CONTEXT_BYTES = 300 << 20            # row 10: GPUSLICE_CONTEXT_BYTES, what a context the shim cannot measure counts
# The whole run stops starting rows after this many seconds (a GPU machine
# is lent for minutes): the rows not started by then are skipped.
BUDGET_S = pick(420, 240, 180)
RUN_DEADLINE = time.monotonic() + BUDGET_S


def stamps_run(out, seconds=None, count=None, kernel_us=1000, depth=16, ready=True, wait_go=False):
    argv = [STAMPS, "run", "--kernel-us", str(kernel_us), "--depth", str(depth), "--out", out]
    argv += ["--count", str(count)] if count else ["--seconds", str(seconds)]
    return argv + (["--ready"] if ready else []) + (["--wait-go"] if wait_go else [])


# ---- 1. spin at 3:1 -------------------------------------------------------------------

def stamped_pair(configs, seconds, shim, preloads=None):
    """Runs stamps run in tenants a and b (or, shim False, the same pair
    without gpuslice) over one window, with preloads[tenant] ahead of the
    shim where given; their kernels, or an error text."""
    tenants = Tenants(configs)
    try:
        paths = {t: tenants.node.path("%s.stamps" % t) for t in ("a", "b")}
        if shim:
            def start(t, argv, **kw):
                return tenants.start(t, argv, preload=(preloads or {}).get(t), **kw)
        else:
            def start(t, argv, **kw):
                return tenants.start_bare(argv, **kw)
        procs = {t: start(t, stamps_run(paths[t], seconds, wait_go=True), stdin=True) for t in ("a", "b")}
        error = start_together(procs, "stamps in tenant", 60)
        if error:
            return error
        for t, p in procs.items():
            if p.wait(seconds + 60) != 0:
                return "stamps in %s failed (exit %s): %s" % (t, p.popen.returncode, p.tail())
        kernels = {t: read_stamps(paths[t])["kernel"] for t in paths}
        if not all(kernels.values()):
            return "no kernel stamped (%s)" % ", ".join("%s: %d" % (t, len(k)) for t, k in kernels.items())
        return kernels
    finally:
        tenants.close()


def pair_figures(kernels):
    lo, hi = common_window(kernels["a"], kernels["b"])
    busy = {t: busy_in(k, lo, hi) for t, k in kernels.items()}
    total = sum(busy.values())
    return {"share_a": 100.0 * busy["a"] / total if total else 0.0,
            "busy_over_wall": total / (hi - lo) if hi > lo else 0.0,
            "overlap_ms": overlap_in(kernels["a"], kernels["b"], lo, hi) / 1e6,
            "window_s": (hi - lo) / 1e9, "kernels": {t: len(k) for t, k in kernels.items()}}


def row_spin():
    row = Row(1, "spin: tenants a and b at share 3:1, %g s of 1 ms kernels each; the same pair without gpuslice "
                 "(%g s)" % (SPIN_S, BASELINE_S),
              "a / b 75 / 25 %% +-%g pp; kernel time / wall %.2f to %.2f (above 1: both ran at once)"
              % (SHARE_POINTS, BUSY_MIN, BUSY_MAX),
              "%globaltimer start and end of every kernel (stamps run), over the window both ran")
    shim = stamped_pair({"a": "share = 3\n", "b": "share = 1\n"}, SPIN_S, True)
    if isinstance(shim, str):
        return row.failed(shim)
    f = pair_figures(shim)
    bare = stamped_pair({"a": "share = 3\n", "b": "share = 1\n"}, BASELINE_S, False)
    base = pair_figures(bare) if not isinstance(bare, str) else None
    ok = abs(f["share_a"] - 75) <= SHARE_POINTS and BUSY_MIN <= f["busy_over_wall"] <= BUSY_MAX
    text = "a / b %.1f / %.1f %% of kernel time (kernels %d / %d); kernel time / wall %.3f, both at once %.1f ms" % (
        f["share_a"], 100 - f["share_a"], f["kernels"]["a"], f["kernels"]["b"], f["busy_over_wall"], f["overlap_ms"])
    text += ("; without gpuslice: %.1f / %.1f %%, kernel time / wall %.3f" % (
        base["share_a"], 100 - base["share_a"], base["busy_over_wall"]) if base else "; without gpuslice: %s" % bare)
    return row.passed(ok, text, gpuslice=f, without=base)


# ---- 2. a limit, alone ---------------------------------------------------------------

def row_limit():
    row = Row(2, "limit: one tenant at limit = %g alone, %g s of 1 ms kernels" % (LIMIT, LIMIT_S),
              "kernel time / wall %.2f to %.2f" % (LIMIT_LOW, LIMIT_HIGH),
              "%globaltimer start and end of every kernel (stamps run)")
    tenants = Tenants({"l": "share = 1\nlimit = %g\n" % LIMIT})
    try:
        path = tenants.node.path("l.stamps")
        proc = tenants.start("l", stamps_run(path, LIMIT_S))
        if proc.wait(LIMIT_S + 60) != 0:
            return row.failed("stamps failed (exit %s): %s" % (proc.popen.returncode, proc.tail()))
        kernels = read_stamps(path)["kernel"]
        if len(kernels) < 2:
            return row.failed("%d kernels stamped" % len(kernels))
        lo, hi = kernels[0][0], kernels[-1][1]
        fraction = busy_in(kernels, lo, hi) / (hi - lo)
        return row.passed(LIMIT_LOW <= fraction <= LIMIT_HIGH, "kernel time / wall %.3f (%d kernels in %.2f s)" % (
            fraction, len(kernels), (hi - lo) / 1e9), fraction=fraction, kernels=len(kernels))
    finally:
        tenants.close()


# ---- 3. PyTorch matmul at 3:1 ------------------------------------------------------------

def torch_missing():
    """Why the PyTorch rows cannot run, or None."""
    try:
        probe = subprocess.run([sys.executable, "-c",
                                "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"],
                               capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "import torch took over 120 s"
    if probe.returncode == 0:
        return None
    if probe.returncode == 3:
        return "PyTorch has no CUDA device"
    last = (probe.stderr.strip().splitlines() or ["import failed"])[-1]
    return "PyTorch with CUDA not available to %s: %s" % (sys.executable, last[:80])


def matmul_pair(seconds, shim):
    tenants = Tenants({"a": "share = 3\n", "b": "share = 1\n"})
    try:
        argv = [sys.executable, os.path.join(HERE, "torch_matmul.py"), "--seconds", str(seconds)]
        procs = {t: (tenants.start(t, argv, stdin=True) if shim else tenants.start_bare(argv, stdin=True))
                 for t in ("a", "b")}
        error = start_together(procs, "torch_matmul.py in tenant", 180)
        if error:
            return error
        iters = {}
        for t, p in procs.items():
            line = p.until(["torch_matmul:"], seconds + 120)
            if not line:
                return "tenant %s: %s" % (t, p.tail())
            iters[t] = int(fields(line)["iterations"])
        if not iters["b"]:
            return "tenant b finished no matmul (a: %d)" % iters["a"]
        return iters
    finally:
        tenants.close()


def row_matmul(missing):
    row = Row(3, "PyTorch 4096x4096 bf16 matmul loops, tenants a and b at 3:1, %g s; the same pair without gpuslice "
                 "(%g s)" % (SPIN_S, BASELINE_S),
              "ratio 3.0 (75 / 25 %% +-%g pp)" % SHARE_POINTS,
              "matmuls each program finished (it synchronizes every 8), over one window")
    if SIMULATE:
        return row.skipped("simulate: needs PyTorch")
    if missing:
        return row.skipped(missing)
    iters = matmul_pair(SPIN_S, True)
    if isinstance(iters, str):
        return row.failed(iters)
    bare = matmul_pair(BASELINE_S, False)
    share = 100.0 * iters["a"] / (iters["a"] + iters["b"])
    text = "ratio %.2f (%.1f / %.1f %%, %d / %d matmuls)" % (iters["a"] / iters["b"], share, 100 - share, iters["a"],
                                                          iters["b"])
    text += ("; without gpuslice: ratio %.2f (%d / %d)" % (bare["a"] / bare["b"], bare["a"], bare["b"])
             if not isinstance(bare, str) else "; without gpuslice: %s" % bare)
    return row.passed(abs(share - 75) <= SHARE_POINTS, text, iterations=iters,
                      without=bare if not isinstance(bare, str) else None)


# ---- 4. graph capture while losing slices, then gated replays ------------------------------

def row_capture(missing):
    row = Row(4, ("stamps capture" if SIMULATE else "torch.cuda.graph") +
              ": capture (global mode) of %d small ops in tenant cap (limit %g) while its second thread runs eager "
              "kernels and tenant busy spins; then %g s of replays, busy stopped" % (CAPTURE_OPS, LIMIT, REPLAY_S),
              "capture succeeds; busy's kernels ran inside the capture window and cap lost the GPU to busy there "
              "at least once; replays' GPU time / wall <= %.2f" % REPLAY_HIGH,
              "%globaltimer stamps of busy's kernels, cap's eager kernels and each replay (its first and last "
              "node), the capture window on the host clock")
    if not SIMULATE and missing:
        return row.skipped(missing)
    tenants = Tenants({"cap": "share = 1\nlimit = %g\n" % LIMIT, "busy": "share = 1\n"})
    try:
        busy_path, cap_path, ptx = (tenants.node.path(n) for n in ("busy.stamps", "cap.stamps", "stamp.ptx"))
        busy = tenants.start("busy", stamps_run(busy_path, 600))
        if not busy.until(["ready"], 60):
            return row.failed("the neighbour never got ready: %s" % busy.tail())
        time.sleep(0.3)
        preload = plant_for(4)
        if SIMULATE:
            # Each captured op takes 1 us of simulated device time, so that
            # a replay takes about as long as PyTorch's graph on a GPU.
            cap = tenants.start("cap", [STAMPS, "capture", "--ops", str(CAPTURE_OPS), "--pause-ms", "15",
                                        "--eager-us", "500", "--replay-seconds", str(REPLAY_S), "--wait-go",
                                        "--out", cap_path], stdin=True, preload=preload, FAKECUDA_KERNEL_NS=1000)
        else:
            with open(ptx, "w") as f:
                f.write(subprocess.run([STAMPS, "ptx"], capture_output=True, text=True, check=True, timeout=30,
                                       env=tenants.node.env).stdout)
            cap = tenants.start("cap", [sys.executable, os.path.join(HERE, "torch_capture.py"), "--ops",
                                        str(CAPTURE_OPS), "--pause-ms", "10", "--ptx", ptx, "--replay-seconds", str(REPLAY_S),
                                        "--out", cap_path], stdin=True)
            if not cap.until(["ready:"], 180):
                return row.failed("torch_capture.py never got ready: %s" % cap.tail())
            cap.send()
        captured = cap.until(["captured:", "capture_failed:"], 120)
        busy.signal(signal.SIGTERM)
        busy_rc = busy.wait(60)
        if not captured or captured.startswith("capture_failed:"):
            return row.failed("capture failed: %s" % (captured or cap.tail()))
        end_capture = fields(captured).get("end_capture", "CUDA_SUCCESS")
        if end_capture != "CUDA_SUCCESS":
            return row.failed("capture failed: %s" % captured)
        cap.send()
        done = cap.until(["stamps:" if SIMULATE else "replayed:"], REPLAY_S + 120)
        cap_rc = cap.wait(60)
        if busy_rc != 0:
            return row.failed("the neighbour failed (exit %s): %s" % (busy_rc, busy.tail()))
        if not done or cap_rc != 0:
            return row.failed("cap failed (exit %s): %s" % (cap_rc, done or cap.tail()))
        b, c = read_stamps(busy_path), read_stamps(cap_path)
        offset = b["offset"][0]
        lo, hi = c["window"][0] + offset, c["window"][1] + offset
        inside = {"busy": [k for k in b["kernel"] if lo <= k[0] <= hi], "cap": [k for k in c["eager"] if lo <= k[0] <= hi]}
        lost = sum(1 for f, t, _ in handoffs(inside, lo, hi) if (f, t) == ("cap", "busy"))
        replays = sorted(c["replay"])
        # Each replay's GPU time over the time to the next one's start: the
        # last one is not counted, whose idle time after it is not seen.
        fraction = (sum(e - s for s, e in replays[:-1]) / (replays[-1][0] - replays[0][0])
                    if len(replays) >= 3 else 0.0)
        value_ok = SIMULATE or fields(done).get("ok") == "1"
        ok = end_capture == "CUDA_SUCCESS" and value_ok and lost >= 1 and len(replays) >= 3 and fraction <= REPLAY_HIGH
        text = ("capture %s, window %.0f ms: inside it %d of busy's kernels and %d of cap's eager ones, cap lost the "
                "GPU to busy %d times; %d replays, GPU time / wall %.3f" % (
                    end_capture, (hi - lo) / 1e6, len(inside["busy"]), len(inside["cap"]), lost, len(replays),
                    fraction))
        if not SIMULATE:
            text += ", value %s (expected %s)" % (fields(done).get("value"), fields(done).get("expected"))
        return row.passed(ok, text, window_ms=(hi - lo) / 1e6, busy_inside=len(inside["busy"]),
                          eager_inside=len(inside["cap"]), lost=lost, replays=len(replays), replay_fraction=fraction,
                          clock_uncertainty_us=b["offset"][1] / 1e3)
    finally:
        tenants.close()


def plant_for(row_number):
    """The planted fault's library for this row, or None."""
    if ARGS.plant and PLANTS[ARGS.plant][0] == row_number:
        return os.path.join(BUILD, "test", "gpu", PLANTS[ARGS.plant][1])
    return None


# ---- 5. two inference-like tenants -----------------------------------------------------

def infer_pair(shim):
    tenants = Tenants({"a": "share = 1\n", "b": "share = 1\n"})
    try:
        paths = {t: tenants.node.path("%s.steps" % t) for t in ("a", "b")}
        argv = {t: [STAMPS, "infer", "--graph-kernels", "4", "--kernel-us", "250", "--think-us", "100", "--seconds",
                    str(INFER_S), "--ready", "--wait-go", "--out", paths[t]] for t in paths}
        procs = {t: (tenants.start(t, argv[t], stdin=True) if shim else tenants.start_bare(argv[t], stdin=True))
                 for t in paths}
        error = start_together(procs, "stamps infer in tenant", 60)
        if error:
            return error
        steps = {}
        for t, p in procs.items():
            if p.wait(INFER_S + 60) != 0:
                return "stamps infer in %s failed (exit %s): %s" % (t, p.popen.returncode, p.tail())
            steps[t] = read_stamps(paths[t])["step"]
            if not steps[t]:
                return "tenant %s made no step" % t
        return {t: {"steps": len(s), "p50_ms": percentile(s, 0.5) / 1e6, "p99_ms": percentile(s, 0.99) / 1e6}
                for t, s in steps.items()}
    finally:
        tenants.close()


def row_infer():
    row = Row(5, "inference: tenants a and b at 1:1, each a loop of one graph replay (4 kernels of 250 us) and a "
                 "host synchronization per step, %g s; the same pair without gpuslice" % INFER_S,
              "p99 <= %d ms (the slice) + 2 x p99 without gpuslice (steps made: reported)" % QUANTUM_MS,
              "each step's latency on the host clock (launch to the synchronization's return), steps made")
    with_ = infer_pair(True)
    if isinstance(with_, str):
        return row.failed(with_)
    without = infer_pair(False)
    if isinstance(without, str):
        return row.failed("without gpuslice: " + without)
    bound = QUANTUM_MS + 2 * max(v["p99_ms"] for v in without.values())
    steps_with, steps_without = (sum(v["steps"] for v in d.values()) for d in (with_, without))
    # A step that finds the other tenant's slice under way waits for it:
    # the p99 is bounded by a slice, not by the GPU's own interleaving.
    # Steps are reported: a synchronizing tenant leaves the GPU idle while
    # its host works, which the other tenant filled without gpuslice.
    ok = max(v["p99_ms"] for v in with_.values()) <= bound
    text = "; ".join("%s p50 / p99 %.2f / %.2f ms (%s)" % (
        label, max(v["p50_ms"] for v in d.values()), max(v["p99_ms"] for v in d.values()),
        " + ".join(str(v["steps"]) for v in d.values()) + " steps")
        for label, d in (("gpuslice:", with_), ("without:", without)))
    return row.passed(ok, text + "; bound %.1f ms; steps with / without gpuslice %.2f" % (
        bound, steps_with / steps_without), gpuslice=with_, without=without)


# ---- 6. handoff -------------------------------------------------------------------------

def row_handoff():
    row = Row(6, "handoff: tenants a and b at 1:1 (quantum_ms = %d), %g s of 1 ms kernels each"
                 % (HANDOFF_QUANTUM_MS, HANDOFF_S),
              "median <= %g ms, %s; never both at once" % (
                  HANDOFF_MEDIAN_MS, "p99 <= %g ms" % HANDOFF_P99_MS if HANDOFF_P99_MS else "p99 not judged simulated"),
              "%globaltimer: one tenant's last kernel end to the other's first kernel start, at each change")
    # A slice longer than the default, so that a late grant still leaves
    # its holder time to run: a slow handoff shows as a gap, not as a
    # tenant that never runs.
    config = "share = 1\nquantum_ms = %d\n" % HANDOFF_QUANTUM_MS
    tenants = Tenants({"a": config, "b": config})
    try:
        paths = {t: tenants.node.path("%s.stamps" % t) for t in ("a", "b")}
        preload = plant_for(6)
        procs = {t: tenants.start(t, stamps_run(paths[t], HANDOFF_S, wait_go=True), stdin=True, preload=preload)
                 for t in paths}
        error = start_together(procs, "stamps in tenant", 60)
        if error:
            return row.failed(error)
        for t, p in procs.items():
            if p.wait(HANDOFF_S + 60) != 0:
                return row.failed("stamps in %s failed (exit %s): %s" % (t, p.popen.returncode, p.tail()))
        kernels = {t: read_stamps(paths[t])["kernel"] for t in paths}
        if not all(kernels.values()):
            return row.failed("a tenant ran no kernel (%s)" % ", ".join("%s: %d" % (t, len(k))
                                                                     for t, k in kernels.items()))
        lo, hi = common_window(kernels["a"], kernels["b"])
        gaps = [g / 1e6 for _, _, g in handoffs(kernels, lo, hi)]
        if len(gaps) < 4:
            return row.failed("%d handoffs in %.2f s" % (len(gaps), (hi - lo) / 1e9))
        median, p99 = percentile(gaps, 0.5), percentile(gaps, 0.99)
        ok = median <= HANDOFF_MEDIAN_MS and (not HANDOFF_P99_MS or p99 <= HANDOFF_P99_MS) and min(gaps) > -0.01
        return row.passed(ok, "median %.3f ms, p99 %.3f ms, least %.3f, most %.3f ms, over %d handoffs" % (
            median, p99, min(gaps), max(gaps), len(gaps)), median_ms=median, p99_ms=p99, handoffs=len(gaps),
            least_ms=min(gaps), most_ms=max(gaps))
    finally:
        tenants.close()


# ---- 7. the shim's threads' CPU; launch overhead ----------------------------------------------

def threads_cpu(pid):
    """{(tid, name): (cpu ns, wake-ups)} for every live thread of pid."""
    return {(tid, name): (cpu_ns, wakes) for tid, (name, cpu_ns, wakes) in testlib.thread_figures(pid).items()}


def shim_threads_cpu():
    """The shim's threads' CPU in % of a core and wake-ups a second, per
    process, or an error text."""
    tenants = Tenants({"a": "share = 1\n", "b": "share = 1\n"})
    try:
        argv = [testlib.SPIN, "--seconds", str(CPU_S), "--kernel-us", "1000", "--depth", "16"]
        procs = {t: tenants.start(t, argv) for t in ("a", "b")}
        time.sleep(1.0)
        first = {t: threads_cpu(p.pid) for t, p in procs.items()}
        t0 = time.monotonic()
        time.sleep(CPU_S - 2.0)
        last = {t: threads_cpu(p.pid) for t, p in procs.items()}
        wall = time.monotonic() - t0
        for t, p in procs.items():
            if p.wait(CPU_S + 60) != 0:
                return "spin in tenant %s failed (exit %s)" % (t, p.popen.returncode)
        pct, wakes, names = {}, {}, set()
        for t in procs:
            shim = [k for k in last[t] if k[1].startswith("gpuslice")]
            names.update(k[1] for k in shim)
            if not shim:
                return "no thread named gpuslice* in tenant %s's process" % t
            pct[t] = 100 * sum(last[t][k][0] - first[t].get(k, (0, 0))[0] for k in shim) / (wall * 1e9)
            wakes[t] = sum(last[t][k][1] - first[t].get(k, (0, 0))[1] for k in shim) / wall
        return pct, wakes, sorted(names)
    finally:
        tenants.close()


def launch_overhead():
    """(without, with, overhead) ns per launch, or an error text."""
    node = Node()
    checkrun.CURRENT.cleanups.append(node.cleanup)
    env = dict(node.env)
    env.update({"GPUSLICE_SOCKET": "/nonexistent/gpuslice.sock", "GPUSLICE_ON_SERVER_DOWN": "open"})
    if SIMULATE:
        env["FAKECUDA_KERNEL_NS"] = "0"
    try:
        proc = subprocess.run([BENCH, testlib.SHIM, str(BENCH_BATCHES)], env=env, capture_output=True, text=True,
                              timeout=within(120))
    except subprocess.TimeoutExpired:
        return "launch_overhead_bench ran out of time"
    out = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(":")
        if value.strip():
            out[key.strip()] = value.split()[0]
    if proc.returncode != 0 or "overhead" not in out:
        return "launch_overhead_bench failed (exit %d): %s" % (proc.returncode, proc.stderr.strip()[-200:])
    return float(out["without shim"]), float(out["with shim"]), float(out["overhead"])


def row_cpu_overhead():
    if SIMULATE:
        bound = ("<= %g wake-ups a second and <= %g %% of one core per process; <= %g ns added per launch"
                 % (SIM_WAKEUPS_PER_S, SIM_CPU_LIMIT_PCT, OVERHEAD_LIMIT_NS))
    else:
        bound = "<= %g %% of one core per process; <= %g ns added per launch" % (CPU_LIMIT_PCT, OVERHEAD_LIMIT_NS)
    row = Row(7, "the shim's own threads (gpuslice*) beside 1 ms spin kernels at 1:1, %g s; cuLaunchKernel with and "
                 "without the shim (launch_overhead_bench, no server)" % CPU_S, bound,
              "/proc/PID/task/*/schedstat and voluntary context switches of the threads named gpuslice*; medians "
              "over batches of 500 launches, with and without the shim, in one process")
    cpu = shim_threads_cpu()
    overhead = launch_overhead()
    errors = [x for x in (cpu, overhead) if isinstance(x, str)]
    if errors:
        return row.failed("; ".join(errors))
    (pct, wakes, names), (without, with_, added) = cpu, overhead
    if SIMULATE:
        threads_ok = all(pct[t] <= SIM_CPU_LIMIT_PCT and wakes[t] <= SIM_WAKEUPS_PER_S for t in pct)
    else:
        threads_ok = all(v <= CPU_LIMIT_PCT for v in pct.values())
    ok = threads_ok and added <= OVERHEAD_LIMIT_NS
    return row.passed(ok, "%.2f / %.2f %% of a core, %.0f / %.0f wake-ups a second (threads %s); %.1f ns without, "
                          "%.1f ns with: %+.1f ns per launch"
                      % (pct["a"], pct["b"], wakes["a"], wakes["b"], ", ".join(names), without, with_, added),
                      cpu_pct=pct, wakeups_per_s=wakes, launch_ns={"without": without, "with": with_, "added": added})


# ---- 8. memory cap, each allocator backend -------------------------------------------------

BACKENDS = [("native", None), ("cudaMallocAsync", "backend:cudaMallocAsync"),
            ("expandable segments", "expandable_segments:True")]


class MemorySampler:
    """Device 0's memory in use, whoever holds it, sampled every 20 ms from
    a thread: `nvidia-smi --query-gpu=memory.used` on a GPU, fakecuda's
    meter simulated. Not per process: a process's PID inside a container is
    not the one nvidia-smi lists."""

    def __init__(self, node):
        self.node, self.samples, self.stopping, self.smi = node, [], threading.Event(), None
        if not SIMULATE:
            self.smi = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                         "-i", "0", "-lms", "20"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True)
            checkrun.CURRENT.cleanups.append(self.stop)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        if self.smi:
            for line in self.smi.stdout:
                if line.strip().isdigit():
                    self.samples.append(int(line) << 20)
            return
        while not self.stopping.is_set():
            self.samples.append(fakecuda_used(self.node))
            time.sleep(0.02)

    def count(self):
        return len(self.samples)

    def stop(self):
        self.stopping.set()
        if self.smi and self.smi.poll() is None:
            self.smi.terminate()
            try:
                self.smi.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.smi.kill()
        self.thread.join(timeout=5)
        return max(self.samples or [0])


def fakecuda_used(node):
    meter = json.loads(subprocess.run([testlib.STAT, "--json", node.env["FAKECUDA_STATE"]], capture_output=True,
                                      text=True, timeout=30).stdout or "{}")
    return sum(d["mem_used"] for d in meter.get("devices", [])[:1])


def device_used_now(node):
    """One reading of device 0's memory in use (bytes)."""
    if SIMULATE:
        return fakecuda_used(node)
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, timeout=30).stdout.split()
    return int(out[0]) << 20 if out and out[0].isdigit() else 0


def holder(tenants, tenant, backend, conf):
    """The process that allocates to the cap and holds (None: only a
    context, without gpuslice)."""
    if SIMULATE:
        argv = [testlib.MEMSCRIPT]
        return tenants.start(tenant, argv, stdin=True) if tenant else tenants.start_bare(argv, stdin=True)
    argv = [sys.executable, os.path.join(HERE, "torch_memcap.py")] + ([] if tenant else ["--context-only"])
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
    return tenants.start(tenant, argv, stdin=True, **env) if tenant else tenants.start_bare(argv, stdin=True)


def hold_peak(proc, backend):
    """Drives proc to its peak; returns its "holding:" fields or None."""
    if not SIMULATE:
        line = proc.until(["holding:"], 180)
        return fields(line) if line else None
    # memscript makes the driver calls each backend makes: plain
    # allocations, stream-ordered ones kept by the pool, VMM.
    op = {"native": "alloc %d %d", "cudaMallocAsync": "async %d %d -1", "expandable segments": "vmm %d %d",
          None: None}[backend]
    script = ["init"] + (["default_threshold max", "info"] + [op % (i, 256 << 20) for i in range(1, 12)] if op else [])
    if backend == "expandable segments":
        script += ["map %d" % i for i in range(1, 12)]
    replies = []
    for line in script:
        proc.send(line)
        reply = proc.until(["rc="], 30)
        if not reply:
            return None
        replies.append(reply)
    if not op:
        return {"free": "0", "total": "0", "allocated_mib": "0", "oom": "0"}
    info = fields("x " + replies[2])
    allocs = replies[3:3 + 11]
    held = sum(1 for r in allocs if r.startswith("rc=CUDA_SUCCESS"))
    if backend == "expandable segments":  # backed only once mapped
        held = min(held, sum(1 for r in replies[3 + 11:] if r.startswith("rc=CUDA_SUCCESS")))
    return {"free": info.get("free", "0"), "total": info.get("total", "0"), "allocated_mib": str(256 * held),
            "oom": "1" if any("CUDA_ERROR_OUT_OF_MEMORY" in r for r in allocs) else "0"}


def measure_hold(tenants, tenant, backend, conf, idle):
    """(holding fields, peak device memory above idle) for one process."""
    sampler = MemorySampler(tenants.node)
    proc = holder(tenants, tenant, backend, conf)
    held = hold_peak(proc, backend)
    if held:
        # The peak held while sampled: at least 10 samples at it.
        seen = sampler.count()
        deadline = time.monotonic() + within(10)
        while sampler.count() < seen + 10 and time.monotonic() < deadline:
            time.sleep(0.02)
    proc.send("quit" if SIMULATE else "go")
    proc.wait(60)
    return held, sampler.stop() - idle, proc


def row_memcap(missing):
    row = Row(8, ("memscript (the driver calls of each backend)" if SIMULATE else "PyTorch") +
              " under a 2 GiB cap, allocator native / cudaMallocAsync / expandable segments: mem_get_info, "
              "out of memory past the cap, device memory in use",
              "total <= 2 GiB, free <= total, OOM; device memory above idle <= 2 GiB + one context, and at least "
              "what the program holds",
              "device-wide memory in use (%s every 20 ms) less an idle baseline; one context measured alone"
              % ("fakecuda's meter" if SIMULATE else "nvidia-smi --query-gpu=memory.used"))
    if not SIMULATE and missing:
        return row.skipped(missing)
    results, data = [], {}
    tenants = Tenants({"m": "share = 1\nmemory = 2G\n"})
    try:
        idle = sorted(device_used_now(tenants.node) for _ in range(5))[2]
        held, context, proc = measure_hold(tenants, None, None, None, idle)
        if not held or proc.popen.returncode not in (0, None):
            return row.failed("the context-only process failed: %s" % proc.tail())
        for backend, conf in BACKENDS:
            held, peak, proc = measure_hold(tenants, "m", backend, conf, idle)
            if not held:
                results.append((False, "%s: failed (%s)" % (backend, proc.tail())))
                continue
            free, total, allocated = int(held["free"]), int(held["total"]), int(held["allocated_mib"]) << 20
            oom = held["oom"] == "1"
            ok = oom and 0 < total <= MEMCAP and free <= total and allocated <= peak <= MEMCAP + context
            results.append((ok, "%s: mem_get_info %d/%d MiB, %s, holding %d MiB, device %d MiB above idle" % (
                backend, free >> 20, total >> 20, "OOM past the cap" if oom else "no OOM", allocated >> 20,
                peak >> 20)))
            data[backend] = {"free": free, "total": total, "oom": oom, "allocated": allocated, "peak": peak}
    finally:
        tenants.close()
    text = "; ".join(t for _, t in results) + "; a context alone: %d MiB, idle %d MiB" % (context >> 20, idle >> 20)
    return row.passed(len(results) == len(BACKENDS) and all(ok for ok, _ in results), text, context=context,
                      idle=idle, backends=data)


# ---- 9. SIGKILL of a holder --------------------------------------------------------------

def row_kill():
    row = Row(9, "SIGKILL: tenant a (quantum_ms = 1000) holds the GPU with 1 ms kernels; tenant b waits to launch; "
                 "a is killed",
              "b's first kernel starts within %g ms of the SIGKILL" % KILL_LIMIT_MS,
              "b's first kernel's %globaltimer start against the host clock of the kill (b calibrates one against "
              "the other); b ran nothing before the kill")
    attempts = []
    for attempt in range(3):
        result = kill_once()
        if isinstance(result, str):
            return row.failed(result)
        attempts.append(result)
        if result["waited_ms"] > 0:  # else b was not waiting: a did not hold the GPU at the kill
            ok = result["latency_ms"] <= KILL_LIMIT_MS
            return row.passed(ok, "b's first kernel %.2f ms after the kill (clock within +-%.2f ms), b waiting "
                                  "since %.0f ms before the kill%s" % (
                                      result["latency_ms"], result["uncertainty_ms"], result["waited_ms"],
                                      "" if attempt == 0 else "; attempt %d of 3" % (attempt + 1)),
                              attempts=attempts)
    return row.failed("b ran before the kill in 3 attempts: a never held the GPU", attempts=attempts)


def kill_once():
    tenants = Tenants({"a": "share = 1\nquantum_ms = 1000\n", "b": "share = 1\n"})
    try:
        a = tenants.start("a", stamps_run(tenants.node.path("a.stamps"), 120))
        if not a.until(["ready"], 60):
            return "a never got ready: %s" % a.tail()
        time.sleep(0.5)
        path = tenants.node.path("b.stamps")
        b = tenants.start("b", stamps_run(path, count=50))
        if not b.until(["ready"], 60):
            return "b never got ready: %s" % b.tail()
        ready = time.time_ns()
        time.sleep(0.1)
        killed = time.time_ns()
        a.signal(signal.SIGKILL)
        if b.wait(60) != 0:
            return "b failed (exit %s): %s" % (b.popen.returncode, b.tail())
        stamps = read_stamps(path)
        if not stamps["kernel"]:
            return "b ran no kernel"
        offset, uncertainty = stamps["offset"]
        first = min(s for s, _ in stamps["kernel"]) - offset  # on the host clock
        return {"latency_ms": (first - killed) / 1e6, "waited_ms": (min(first, killed) - ready) / 1e6
                if first > killed else -1.0, "uncertainty_ms": uncertainty / 1e6}
    finally:
        tenants.close()


# ---- 10. NVML and nvidia-smi inside tenants ---------------------------------------------

NVML_VIEW = os.path.join(HERE, "nvml_view.py")
CHUNK = 256 << 20
MIB = 1 << 20
NVML_LISTS = ("procs_v1", "procs_v2", "procs_v3", "detail")
SMI_QUERIES = {"gpu": "--query-gpu=memory.total,memory.used,memory.free,utilization.gpu",
               "apps": "--query-compute-apps=pid,used_memory"}
SMI_FIGURES = ("memory.total", "memory.used", "memory.free", "utilization.gpu")
NVIDIA_SMI = ARGS.nvidia_smi or (None if SIMULATE else "nvidia-smi")
SMI_SIMULATED = ("simulate: nvidia-smi does not run on the simulated NVML, it needs NVML's private export table, "
                 "which fakenvml does not imitate")


def hold_memory(tenants):
    """Starts the processes of NVML_HOLDERS (memscript in its tenant: it
    creates its context, allocates and holds until told to quit):
    [(tenant, proc, bytes it allocated)], or an error text."""
    env = {"GPUSLICE_CONTEXT_BYTES": str(CONTEXT_BYTES)}
    if SIMULATE:
        env["FAKECUDA_CONTEXT_BYTES"] = str(CONTEXT_BYTES)  # fakecuda's contexts hold what the shim counts
    holders = []
    for tenant, chunks in NVML_HOLDERS:
        proc = tenants.start(tenant, [testlib.MEMSCRIPT], stdin=True, **env)
        for line in ["init"] + ["alloc %d %d" % (i, CHUNK) for i in range(chunks)]:
            proc.send(line)
            reply = proc.until(["rc="], 60)
            if not reply or not reply.startswith("rc=CUDA_SUCCESS"):
                return "memscript in tenant %s: %s answered %s" % (tenant, line, reply or proc.tail())
        holders.append((tenant, proc, chunks * CHUNK))
    return holders


def nvml_view(tenants, tenant):
    """GPU 0 as NVML shows it to a process in tenant (None: outside any
    tenant, no shim), from nvml_view.py, or an error text."""
    argv = [sys.executable, NVML_VIEW]
    # The planted fault: no server to ask, so NVML's own answers.
    plant = {"GPUSLICE_SOCKET": "/nonexistent/gpuslice.sock"} if ARGS.plant == "nvml-passthrough" else {}
    proc = tenants.start(tenant, argv, **plant) if tenant else tenants.start_bare(argv)
    rc = proc.wait(60)
    line = next((l for l in proc.seen if l.startswith("{")), None)
    if rc != 0 or not line:
        return "nvml_view.py %s failed (exit %s): %s" % ("in tenant " + tenant if tenant else "outside any tenant",
                                                         rc, proc.tail())
    return json.loads(line)


def listed(view, key):
    """{pid: bytes} of one of a view's process lists."""
    return {p["pid"]: p["used"] for p in view.get(key, {}).get("procs", [])}


def judge_view(view, tenant, own, outside):
    """What of a tenant's NVML view differs from README's promise (texts;
    none: all as promised). own: {pid: bytes} its processes hold as the
    shim counts them. A query NVML itself lacks or refuses outside any
    tenant is not judged."""
    if isinstance(view, str):
        return [view]
    wrong = []
    total = min(NVML_CAPS[tenant], outside["memory"]["total"])
    used = sum(own.values())
    free = total - used
    for key in ("memory", "memory_v2"):
        got = view.get(key, {})
        if outside.get(key, {}).get("rc") != 0:
            continue
        if got.get("rc") != 0:
            wrong.append("%s %s: code %s" % (tenant, key, got.get("rc", "absent")))
            continue
        # free = min(cap - used, physically free)
        free_ok = got["free"] == free if outside[key]["free"] >= free + (64 << 20) else got["free"] <= free
        if got["total"] != total or got["used"] != used or not free_ok:
            wrong.append("%s %s total / used / free %d / %d / %d bytes, not %d / %d / %d" % (
                tenant, key, got["total"], got["used"], got["free"], total, used, free))
    # Its processes launch nothing, while a process outside any tenant
    # keeps the GPU busy: its share of device time is none.
    if outside.get("util", {}).get("rc") == 0 and view.get("util", {}).get("gpu") != 0:
        wrong.append("%s utilization.gpu %s %%, not 0 (code %s)" % (tenant, view.get("util", {}).get("gpu"),
                                                                    view.get("util", {}).get("rc", "absent")))
    for key in NVML_LISTS:
        if outside.get(key, {}).get("rc") != 0:
            continue
        if view.get(key, {}).get("rc") != 0:
            wrong.append("%s %s: code %s" % (tenant, key, view.get(key, {}).get("rc", "absent")))
        elif listed(view, key) != own:
            wrong.append("%s %s lists %s, not its own %s" % (tenant, key, mib_map(listed(view, key)), mib_map(own)))
    return wrong


def mib_map(pids):
    """{pid: bytes} as "PID (N MiB), ..." (MiB rounded down, as nvidia-smi shows them)."""
    return ", ".join("%d (%d MiB)" % (p, b // MIB) for p, b in sorted(pids.items())) or "none"


def smi(tenants, tenant, query):
    """nvidia-smi's answer to one of SMI_QUERIES, in tenant (None: outside
    any tenant): its exit status, the rows of its CSV table (None if none
    was found) and the end of its output."""
    argv = [NVIDIA_SMI, SMI_QUERIES[query], "--format=csv"]
    proc = tenants.start(tenant, argv) if tenant else tenants.start_bare(argv)
    rc = proc.wait(60)
    return {"rc": rc, "rows": smi_table(proc.seen, SMI_QUERIES[query]), "output": proc.seen[-12:]}


def smi_table(lines, query):
    """The rows (lists of fields) after nvidia-smi's CSV header for query,
    or None when the header is not in lines."""
    names = query.split("=", 1)[1].split(",")
    for i, line in enumerate(lines):
        if line.startswith(names[0]):
            rows = [[f.strip() for f in l.split(",")] for l in lines[i + 1:]]
            return [r for r in rows if len(r) == len(names) and (number(r[0]) is not None or r[0].startswith("["))]
    return None


def number(field):
    """The number a field of nvidia-smi's CSV starts with ("2048 MiB",
    "0 %"), or None ("[N/A]", "[Not Supported]")."""
    m = re.match(r"\d+", field or "")
    return int(m.group(0)) if m else None


def whose(value, tenant, whole, slack):
    """Whether a figure nvidia-smi showed in a tenant is the tenant's (what
    NVML's public calls answer it) or the whole GPU's (what nvidia-smi shows
    outside any tenant), within slack."""
    if value is None:
        return "not shown"
    mine = tenant is not None and abs(value - tenant) <= slack
    everyone = whole is not None and abs(value - whole) <= slack
    return ("the same either way" if mine and everyone else "the tenant's" if mine else
            "the whole GPU's" if everyone else "neither the tenant's (%s) nor the whole GPU's (%s)" % (tenant, whole))


def unit(value, index):
    """A figure of SMI_FIGURES with its unit."""
    return "-" if value is None else "%d %s" % (value, "MiB" if index < 3 else "%")


def smi_apps(answer):
    return {number(r[0]): number(r[1]) for r in answer["rows"] or [] if number(r[0]) is not None}


def smi_part(tenants, views, own):
    """nvidia-smi's two queries in each tenant and outside any: (texts of
    what broke, the report's text, data). Each figure shown in a tenant is
    classed as the tenant's or the whole GPU's; only nvidia-smi's working
    as it does outside any tenant is judged (README: what it reads through
    NVML's private export table is the whole GPU's)."""
    outside = {q: smi(tenants, None, q) for q in SMI_QUERIES}
    inside = {t: {q: smi(tenants, t, q) for q in SMI_QUERIES} for t in NVML_CAPS}
    wrong, texts, classes = [], [], {}
    out_gpu = (outside["gpu"]["rows"] or [[]])[0]
    out_gpu = [number(f) for f in out_gpu] + [None] * (4 - len(out_gpu))
    out_apps = smi_apps(outside["apps"])
    for t in NVML_CAPS:
        for q in SMI_QUERIES:
            got, ref = inside[t][q], outside[q]
            if got["rc"] != ref["rc"] or (got["rows"] is None) != (ref["rows"] is None):
                wrong.append("nvidia-smi %s in %s: exit %s%s, outside any tenant exit %s%s" % (
                    q, t, got["rc"], "" if got["rows"] is not None else " without its table", ref["rc"],
                    "" if ref["rows"] is not None else " without its table"))
        view = views[t] if isinstance(views[t], dict) else {}
        mem, util = view.get("memory", {}), view.get("util", {})
        mine = [mem["total"] // MIB, mem["used"] // MIB, mem["free"] // MIB] if mem.get("rc") == 0 else [None] * 3
        mine.append(util.get("gpu") if util.get("rc") == 0 else None)
        row = (inside[t]["gpu"]["rows"] or [[]])[0]
        shown = [number(f) for f in row] + [None] * (4 - len(row))
        classes[t] = {name: whose(shown[i], mine[i], out_gpu[i], 1 if i < 3 else 2)
                      for i, name in enumerate(SMI_FIGURES)}
        apps = smi_apps(inside[t]["apps"])
        pids, own_pids, all_pids = set(apps), set(own[t]), set(out_apps)
        classes[t]["apps"] = ("not shown" if inside[t]["apps"]["rows"] is None else
                              "the same either way" if pids == own_pids == all_pids else
                              "the tenant's" if pids == own_pids else
                              "the whole GPU's" if pids == all_pids else "neither the tenant's nor the whole GPU's")
        others = sorted(p for p in pids - own_pids if p is not None)
        texts.append("in %s: %s; apps %s (%s%s)" % (
            t, ", ".join("%s %s (%s)" % (name, unit(shown[i], i), classes[t][name]) for i, name in enumerate(SMI_FIGURES)),
            ", ".join("%s (%s MiB)" % (p, m) for p, m in sorted(apps.items())) or "none", classes[t]["apps"],
            ", not its own among them: %s" % ", ".join(map(str, others)) if others else ""))
    unchanged = ["%s %s" % (t, name) for t in NVML_CAPS for name, c in classes[t].items() if c == "the whole GPU's"]
    texts.append("outside any tenant: %s; apps %s" % (
        ", ".join("%s %s" % (name, unit(out_gpu[i], i)) for i, name in enumerate(SMI_FIGURES)),
        ", ".join("%s (%s MiB)" % (p, m) for p, m in sorted(out_apps.items())) or "none"))
    texts.append("left the whole GPU's by the shim: %s" % (", ".join(unchanged) or "none"))
    return wrong, "nvidia-smi " + "; ".join(texts), {"inside": inside, "outside": outside, "classes": classes,
                                                      "unchanged": unchanged}


def server_counts(tenants):
    """The server's count of each tenant's memory on GPU 0 (reported, not
    judged: it is the bookkeeping NVML answers from), or None."""
    try:
        status = tenants.server.status()
        return {t["name"]: sum(d.get("mem_used", 0) for d in t.get("devices", [])[:1]) for t in status["tenants"]}
    except Exception:  # noqa: BLE001 - a report only
        return None


def row_nvml():
    caps = " and ".join("%s (memory = %dG: %s)" % (t, c >> 30, " and ".join(
        "%d MiB" % (n * CHUNK // MIB) for h, n in NVML_HOLDERS if h == t)) for t, c in NVML_CAPS.items())
    row = Row(10, "NVML and nvidia-smi inside tenants %s, each amount held by one process (memscript); in each "
                  "tenant and outside any: an NVML client through ctypes (nvml_view.py), `nvidia-smi %s --format=csv` and "
                  "`nvidia-smi %s --format=csv`" % (caps, SMI_QUERIES["gpu"], SMI_QUERIES["apps"]),
              "in each tenant, NVML's memory (v1, v2): total = its cap, used = what its processes allocated + %d MiB "
              "per context, free = total - used; utilization.gpu 0 (it launches nothing; a process outside any tenant "
              "keeps the GPU busy); compute process lists (v1, v2, v3, detail): exactly its own pids, "
              "each with its count; nvidia-smi exits as it does outside any tenant, its figures reported as the "
              "tenant's or the whole GPU's, not judged (README: what it reads through NVML's export table is the "
              "whole GPU's)%s" % (CONTEXT_BYTES // MIB, "; fakecuda's meter holds the same per process, NVML "
                                  "outside any tenant lists every holder" if SIMULATE else ""),
              "the holders' own allocations (memscript's answers) and the context charge the row sets "
              "(GPUSLICE_CONTEXT_BYTES); %s" % ("fakecuda's meter per process" if SIMULATE else
                                                "nvidia-smi and NVML outside any tenant, reported"))
    if NVIDIA_SMI and not shutil.which(NVIDIA_SMI):
        return row.skipped("%s not found" % ("nvidia-smi on PATH" if NVIDIA_SMI == "nvidia-smi" else NVIDIA_SMI))
    tenants = Tenants({t: "share = 1\nmemory = %dG\n" % (cap >> 30) for t, cap in NVML_CAPS.items()})
    try:
        # The GPU busy meanwhile, with a process and memory of no tenant's.
        busy = tenants.start_bare([testlib.SPIN, "--seconds", "60", "--kernel-us", "1000", "--blocking-sync"])
        holders = hold_memory(tenants)
        if isinstance(holders, str):
            return row.failed(holders)
        own = {t: {} for t in NVML_CAPS}
        for t, proc, allocated in holders:
            own[t][proc.pid] = allocated + CONTEXT_BYTES
        time.sleep(0.3)  # idle headroom leased to the holders goes back within 40 ms
        outside = nvml_view(tenants, None)
        if isinstance(outside, str) or outside.get("memory", {}).get("rc") != 0:
            return row.failed("NVML outside any tenant: %s" % outside)
        views = {t: nvml_view(tenants, t) for t in NVML_CAPS}
        wrong = [w for t in NVML_CAPS for w in judge_view(views[t], t, own[t], outside)]
        everyone = {pid: b for t in own for pid, b in own[t].items()}
        data = {"caps": NVML_CAPS, "context_bytes": CONTEXT_BYTES, "expected": own, "nvml": views, "outside": outside}
        if SIMULATE:
            meter = json.loads(subprocess.run([testlib.STAT, "--json", tenants.node.env["FAKECUDA_STATE"]],
                                              capture_output=True, text=True, timeout=30).stdout or "{}")
            held = {p["pid"]: p["mem_used"] for p in meter.get("processes", []) if p["pid"] in everyone}
            data["meter"] = held
            if held != everyone:
                wrong.append("fakecuda's meter holds %s, not %s" % (mib_map(held), mib_map(everyone)))
            if not set(everyone) <= set(listed(outside, "procs_v3")):
                wrong.append("NVML outside any tenant lists %s, not every holder" % mib_map(listed(outside, "procs_v3")))
        counts = server_counts(tenants)
        data["server_count"] = counts
        if busy.popen.poll() is not None:
            wrong.append("spin outside any tenant stopped early (exit %s): %s" % (busy.popen.returncode, busy.tail()))
        parts = ["NVML in %s: total / used / free %s MiB, utilization.gpu %s %%, pids %s" % (
            t, "%d / %d / %d" % tuple(views[t]["memory"][k] // MIB for k in ("total", "used", "free"))
            if isinstance(views[t], dict) and views[t].get("memory", {}).get("rc") == 0 else "-",
            views[t].get("util", {}).get("gpu", "-") if isinstance(views[t], dict) else "-",
            mib_map(listed(views[t], "procs_v3")) if isinstance(views[t], dict) else "-") for t in NVML_CAPS]
        parts.append("expected used %s MiB (allocated + %d MiB per context)%s" % (
            " / ".join("%s %d" % (t, sum(own[t].values()) // MIB) for t in NVML_CAPS), CONTEXT_BYTES // MIB,
            "; fakecuda's meter: %s" % mib_map(data["meter"]) if SIMULATE else ""))
        parts.append("outside any tenant, spin (pid %d) running kernels: NVML total / used / free %d / %d / %d MiB, "
                     "utilization.gpu %s %%, pids %s" % ((busy.pid,) + tuple(
                         outside["memory"][k] // MIB for k in ("total", "used", "free")) + (
                         outside.get("util", {}).get("gpu", "-"), mib_map(listed(outside, "procs_v3")))))
        if counts:
            parts.append("the server's count %s MiB" % " / ".join("%s %d" % (t, counts.get(t, 0) // MIB)
                                                                   for t in NVML_CAPS))
        if not NVIDIA_SMI:
            data["nvidia_smi"] = {"skipped": SMI_SIMULATED}
            parts.append("nvidia-smi: skipped (%s)" % SMI_SIMULATED)
        else:
            smi_wrong, smi_text, data["nvidia_smi"] = smi_part(tenants, views, own)
            wrong += smi_wrong
            parts.append(smi_text)
        text = "; ".join((["wrong: " + "; ".join(wrong)] if wrong else []) + parts)
        for _, proc, _ in holders:
            proc.send("quit")
        return row.passed(not wrong, text, wrong=wrong, busy_pid=busy.pid, **data)
    finally:
        tenants.close()


# ---- 11. latency classes: an inference service beside a training job ----------------------

# Targets (issue 30's table): as class = latency beside a batch program at
# 1:1, the inference steps' p99 at most 4 ms; the batch program keeps 90 %
# of the device time the inference tenant leaves; a latency tenant that
# never stops launching splits 50 / 50 +- 2 points with a batch tenant.
# Simulated, on a small shared machine, the median is judged instead of
# the p99 (at most 4 ms and a quarter of the same pair's as batch; the p99
# is reported) and 75 % kept, as test/server/latency_class_test.py does.
LATENCY_STEPS = pick(600, 600, 200)   # each inference run, by count
LATENCY_ALONE_S = pick(3, 2, 1)       # the batch program alone, its rate
LATENCY_SPLIT_S = pick(8, 5, 2.5)     # the never-stopping latency tenant
LATENCY_P99_MS = 4.0
LATENCY_P50_MS = 4.0
LATENCY_KEPT = 0.75 if SIMULATE else 0.90
LATENCY_SPLIT_POINTS = 2.0


def latency_programs(missing):
    """(inference argv for an output path, batch argv likewise, what they
    are): PyTorch on a GPU that has it, stamps otherwise."""
    if not SIMULATE and not missing:
        return (lambda out: [sys.executable, os.path.join(HERE, "torch_infer.py"), "--steps", str(LATENCY_STEPS),
                             "--think-ms", "5", "--out", out],
                lambda out: [sys.executable, os.path.join(HERE, "torch_train.py"), "--out", out],
                "PyTorch: a 3-layer fp16 model under torch.cuda.graph, one replay per request, 5 ms between "
                "requests, beside a 4-layer bf16 MLP trained with SGD")
    return (lambda out: [STAMPS, "infer", "--graph-kernels", "4", "--kernel-us", "250", "--think-us", "5000",
                         "--count", str(LATENCY_STEPS), "--ready", "--wait-go", "--out", out],
            lambda out: stamps_run(out, 3600),
            "stamps infer (a graph of 4 kernels of 250 us, a synchronization, 5 ms asleep) beside stamps run "
            "(1 ms kernels, 16 in flight)" + ("" if SIMULATE else "; %s" % missing))


def inference_run(tenants, tenant, argv, shim, label):
    """One inference run of LATENCY_STEPS steps: its figures, or an error
    text."""
    path = tenants.node.path("%s.steps" % label)
    start = tenants.start if shim else (lambda t, a, **kw: tenants.start_bare(a, **kw))
    proc = start(tenant, argv(path), stdin=True)
    if not proc.until(["ready"], 180):
        return "%s: never got ready: %s" % (label, proc.tail())
    proc.send()
    if proc.wait(LATENCY_STEPS * 0.2 + 60) != 0:
        return "%s failed (exit %s): %s" % (label, proc.popen.returncode, proc.tail())
    summary = next((fields(line) for line in proc.seen if line.startswith(("torch_infer:", "stamps:"))), {})
    records = read_stamps(path)
    steps = records["step"]
    if not steps or not records["window"]:
        return "%s made no step" % label
    return {"steps": len(steps), "p50_ms": percentile(steps, 0.5) / 1e6, "p99_ms": percentile(steps, 0.99) / 1e6,
            "max_ms": max(steps) / 1e6, "window": records["window"],
            "gpu_us_per_step": float(summary.get("gpu_us_per_step", 0))}


def batch_start(tenants, tenant, argv, shim, label, preload=None):
    """The batch program, running until batch_stop; (proc, path) or an
    error text."""
    path = tenants.node.path("%s.work" % label)
    proc = (tenants.start(tenant, argv(path), preload=preload) if shim
            else tenants.start_bare(argv(path)))
    if not proc.until(["ready"], 180):
        return "%s: never got ready: %s" % (label, proc.tail())
    time.sleep(0.5)
    return proc, path


def batch_stop(started, label):
    """The batch program's records, or an error text."""
    proc, path = started
    proc.signal(signal.SIGTERM)
    if proc.wait(60) != 0:
        return "%s failed (exit %s): %s" % (label, proc.popen.returncode, proc.tail())
    return read_stamps(path)


def batch_work(records, lo, hi):
    """What the batch program did between lo and hi (CLOCK_REALTIME ns):
    seconds of its kernels by %globaltimer (stamps run), or training
    steps, the progress records interpolated (torch_train.py)."""
    if records["offset"]:
        offset = records["offset"][0]
        return busy_in(records["kernel"], lo + offset, hi + offset) / 1e9

    def done_by(t):
        """Steps finished by t: between two records, as if at an even pace."""
        before = None
        for when, steps in records["progress"]:
            if when >= t:
                if before is None:
                    return 0 if when > t else steps
                return before[1] + (steps - before[1]) * (t - before[0]) / (when - before[0])
            before = (when, steps)
        return before[1] if before else 0

    return done_by(hi) - done_by(lo)


def now_realtime_ns():
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


def latency_table(missing):
    """The inference program alone and beside the batch program, without
    gpuslice and under it (as class batch and as class latency), and what
    the batch program kept: a dict of figures, or an error text."""
    infer, batch, _ = latency_programs(missing)
    figures = {}
    bare = Tenants({"a": "share = 1\n"})
    try:
        figures["alone_bare"] = inference_run(bare, "a", infer, False, "alone-bare")
        if isinstance(figures["alone_bare"], str):
            return figures["alone_bare"]
        started = batch_start(bare, "a", batch, False, "batch-bare")
        if isinstance(started, str):
            return started
        figures["beside_bare"] = inference_run(bare, "a", infer, False, "beside-bare")
        stopped = batch_stop(started, "the batch program without gpuslice")
        for error in (figures["beside_bare"], stopped):
            if isinstance(error, str):
                return error
    finally:
        bare.close()
    tenants = Tenants({"batch": "share = 1\n", "as_batch": "share = 1\nclass = batch\n",
                       "as_latency": "share = 1\nclass = latency\n"})
    try:
        figures["alone_latency"] = inference_run(tenants, "as_latency", infer, True, "alone-latency")
        if isinstance(figures["alone_latency"], str):
            return figures["alone_latency"]
        started = batch_start(tenants, "batch", batch, True, "batch", preload=plant_for(11))
        if isinstance(started, str):
            return started
        alone = (now_realtime_ns(), None)
        time.sleep(LATENCY_ALONE_S)
        alone = (alone[0], now_realtime_ns())
        figures["beside_batch"] = inference_run(tenants, "as_batch", infer, True, "beside-batch")
        figures["beside_latency"] = (inference_run(tenants, "as_latency", infer, True, "beside-latency")
                                     if not isinstance(figures["beside_batch"], str) else "not run")
        records = batch_stop(started, "the batch program under gpuslice")
        for error in (figures["beside_batch"], figures["beside_latency"], records):
            if isinstance(error, str):
                return error
    finally:
        tenants.close()
    # What the batch program could use while the latency tenant ran: the
    # window less the inference steps' own GPU time (taken alone, without
    # gpuslice), at the rate it did work alone under gpuslice just before.
    lo, hi = figures["beside_latency"]["window"]
    rate = batch_work(records, *alone) / ((alone[1] - alone[0]) / 1e9)
    inference_gpu_s = figures["beside_latency"]["steps"] * figures["alone_bare"]["gpu_us_per_step"] / 1e6
    unused_s = max(0.0, (hi - lo) / 1e9 - inference_gpu_s)
    kept = batch_work(records, lo, hi) / (rate * unused_s) if rate > 0 and unused_s > 0 else 0.0
    figures["batch"] = {"rate_alone": rate, "window_s": (hi - lo) / 1e9, "inference_gpu_s": inference_gpu_s,
                        "kept": kept}
    for key in list(figures):
        if isinstance(figures[key], dict):
            figures[key].pop("window", None)
    return figures


def latency_split():
    """A latency tenant (a) and a batch tenant (b), both never stopping, at
    1:1: the latency tenant's share of their kernel time, or an error text."""
    kernels = stamped_pair({"a": "share = 1\nclass = latency\n", "b": "share = 1\n"}, LATENCY_SPLIT_S, True,
                           preloads={"b": plant_for(11)})
    return kernels if isinstance(kernels, str) else pair_figures(kernels)["share_a"]


def row_latency(missing):
    _, _, programs = latency_programs(missing)
    inference_target = ("median <= %g ms and a quarter of the same pair's as batch (p99 reported)" % LATENCY_P50_MS
                        if SIMULATE else "p99 <= %g ms" % LATENCY_P99_MS)
    row = Row(11, "latency classes: an inference loop of %d steps alone and beside a batch program at 1:1, without "
                  "gpuslice and under it as class = batch and as class = latency (%s); a latency tenant that never "
                  "stops beside a batch tenant, %g s" % (LATENCY_STEPS, programs, LATENCY_SPLIT_S),
              "as latency beside the batch program: %s; the batch program keeps >= %d %% of the device time the "
              "inference tenant leaves; the never-stopping pair 50 / 50 +- %g pp"
              % (inference_target, round(100 * LATENCY_KEPT), LATENCY_SPLIT_POINTS),
              "each step's latency on the host clock (from the request to the synchronization's return); the batch "
              "program's %globaltimer kernel stamps or training steps, against its rate alone; the steps' own GPU "
              "time alone; the pair's kernel stamps")
    figures = latency_table(missing)
    if isinstance(figures, str):
        return row.failed(figures)
    split = latency_split()
    if isinstance(split, str):
        return row.failed(split, **figures)
    latency, as_batch, kept = figures["beside_latency"], figures["beside_batch"], figures["batch"]["kept"]
    if SIMULATE:
        inference_ok = latency["p50_ms"] <= LATENCY_P50_MS and 4 * latency["p50_ms"] <= as_batch["p50_ms"]
    else:
        inference_ok = latency["p99_ms"] <= LATENCY_P99_MS
    ok = inference_ok and kept >= LATENCY_KEPT and abs(split - 50) <= LATENCY_SPLIT_POINTS
    names = (("alone_bare", "alone, no gpuslice"), ("alone_latency", "alone, gpuslice"),
             ("beside_bare", "beside, no gpuslice"), ("beside_batch", "beside, gpuslice as batch"),
             ("beside_latency", "beside, gpuslice as latency"))
    text = "steps p50 / p99 / max ms: " + "; ".join(
        "%s %.2f / %.2f / %.1f (%d)" % (label, figures[k]["p50_ms"], figures[k]["p99_ms"], figures[k]["max_ms"],
                                        figures[k]["steps"]) for k, label in names)
    text += ("; the batch program kept %.0f %% of what the latency tenant left (%.2f s window, its steps' GPU time "
             "%.3f s); never-stopping latency / batch %.1f / %.1f %%" % (
                 100 * kept, figures["batch"]["window_s"], figures["batch"]["inference_gpu_s"], split, 100 - split))
    return row.passed(ok, text, split_latency=split, **figures)


# ---- the table ------------------------------------------------------------------------

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
        return subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty", "--abbrev=7"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main():
    started = time.monotonic()
    missing = None if SIMULATE else torch_missing()
    # (number, row, time limit in seconds: GPU, simulated)
    rows_defined = [(1, row_spin, (90, 60)), (2, row_limit, (45, 30)), (3, lambda: row_matmul(missing), (180, 30)),
                    (4, lambda: row_capture(missing), (150, 60)), (5, row_infer, (60, 45)),
                    (6, row_handoff, (45, 40)), (7, row_cpu_overhead, (60, 60)),
                    (8, lambda: row_memcap(missing), (180, 60)), (9, row_kill, (60, 60)), (10, row_nvml, (90, 45)),
                    (11, lambda: row_latency(missing), (240, 90))]
    wanted = None
    if ARGS.rows:
        try:
            wanted = {int(r) for r in ARGS.rows.split(",") if r.strip()}
        except ValueError:
            parser.error("--rows takes numbers separated by commas, e.g. 1,6,9")
        unknown = wanted - {n for n, _, _ in rows_defined}
        if unknown:
            parser.error("no row %s (rows are 1 to 11)" % ", ".join(map(str, sorted(unknown))))
    rows = []
    for number, make, limits in rows_defined:
        if wanted and number not in wanted:
            continue
        t0 = time.monotonic()
        if t0 > RUN_DEADLINE - 5:
            row = Row(number, "row %d" % number, "-", "-").skipped("the run's %d s budget was spent" % BUDGET_S)
        else:
            # No row runs more than 30 s past the run's budget.
            limit = min(limits[1] if SIMULATE else limits[0], max(10, int(RUN_DEADLINE + 30 - t0)))
            row = run_row(number, make, limit)
        row.seconds = time.monotonic() - t0
        rows.append(row)
        print("row %d: %s (%.0f s)" % (row.number, row.result, row.seconds), file=sys.stderr, flush=True)
    head = {"machine": machine_line(), "commit": commit(), "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "total_s": round(time.monotonic() - started), "simulate": SIMULATE, "quick": QUICK, "plant": ARGS.plant}
    text = ["# gpuslice GPU check", "",
            "- machine: %s" % head["machine"],
            "- commit: %s, %s" % (head["commit"], head["date"]),
            "- total time: %d s%s" % (head["total_s"], ", --quick" if QUICK else "")]
    if ARGS.plant:
        text.append("- planted fault: %s (a test of the check itself)" % ARGS.plant)
    text += ["", "| # | check | measured | target | result | judged by |", "|---|---|---|---|---|---|"]
    for r in rows:
        text.append("| %d | %s | %s | %s | %s | %s |" % (r.number, r.check, r.measured.replace("|", "/"), r.target,
                                                         r.result, r.measure))
    failed = [r for r in rows if r.result == "FAIL"]
    text += ["", "%d passed, %d failed, %d skipped" % (sum(r.result == "PASS" for r in rows), len(failed),
                                                       sum(r.result.startswith("skipped") for r in rows))]
    table = "\n".join(text) + "\n"
    sys.stdout.write(table)
    with open(ARGS.out, "w") as f:
        f.write(table)
    json_path = os.path.splitext(ARGS.out)[0] + ".json"
    with open(json_path, "w") as f:
        json.dump(dict(head, rows=[r.as_json() for r in rows]), f, indent=1)
        f.write("\n")
    print("check: table in %s, JSON in %s" % (ARGS.out, json_path), file=sys.stderr)
    sys.exit(1 if failed else 0)


main()
