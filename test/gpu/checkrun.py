"""What every row of test/gpu/gpu_check.py runs on: a row's time limit and
cleanup (RowRun, run_row), its tenants under a gpuslice-server of their
own (Tenants, Node), its processes with their output (Proc), and the
measures taken from stamps files (test/gpu/stamps.c): windows, busy time,
overlap, handoffs, percentiles.

Import it after setting GPUSLICE_BUILD_DIR (testlib reads it), and set
SIMULATE before the first row.
"""
import math
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time

import testlib

# Set once by gpu_check.py before any row: the rows run on fakecuda.
SIMULATE = False


class RowRun:
    """The row in progress: its deadline and what to clean up if it runs
    out of time (its servers and processes)."""

    def __init__(self, timeout):
        self.deadline = time.monotonic() + timeout
        self.cleanups = []

    def within(self, seconds):
        """seconds, or what is left of the row's time if that is less."""
        return max(0.5, min(seconds, self.deadline - time.monotonic()))

    def clean(self):
        for clean in reversed(self.cleanups):
            try:
                clean()
            except Exception:  # noqa: BLE001 - cleaning up after a failed row
                pass
        self.cleanups = []


# The row in progress, replaced by run_row for each row (rows run one at a
# time); every wait of a row is bounded by its deadline through within().
CURRENT = RowRun(60)


def within(seconds):
    return CURRENT.within(seconds)


class Row:
    """One line of the table: what was checked, the figures measured, the
    target, PASS / FAIL / skipped, and the measure that judged it."""

    def __init__(self, number, check, target, measure):
        self.number, self.check, self.target, self.measure = number, check, target, measure
        self.measured, self.result, self.data, self.seconds = "-", "FAIL", {}, 0.0

    def passed(self, ok, measured, **data):
        self.measured, self.result = measured, "PASS" if ok else "FAIL"
        self.data.update(data)
        return self

    def failed(self, measured, **data):
        return self.passed(False, measured, **data)

    def skipped(self, reason):
        self.result = "skipped (%s)" % reason
        return self

    def as_json(self):
        return {"row": self.number, "check": self.check, "measured": self.measured, "target": self.target,
                "result": self.result.split(" ")[0], "reason": self.result if self.result.startswith("skipped")
                else None, "measure": self.measure, "seconds": round(self.seconds, 1), "data": self.data}


# ---- processes ---------------------------------------------------------------

class Proc:
    """A process of a row: its output lines, read by a thread."""

    def __init__(self, argv, env, stdin):
        self.argv = argv
        self.popen = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, bufsize=1)
        self.pid = self.popen.pid
        self.lines, self.seen = queue.Queue(), []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.popen.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, prefixes, timeout):
        """The first line from now on that starts with one of prefixes, or
        None at the end of the output or after timeout seconds."""
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

    def send(self, text="go"):
        try:
            self.popen.stdin.write(text + "\n")
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def wait(self, timeout):
        """The exit status once it has exited (killed after timeout s);
        every line it wrote is then in seen."""
        try:
            self.popen.wait(timeout=within(timeout))
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        while self.until([""], 5) is not None:
            pass
        return self.popen.returncode

    def signal(self, sig):
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def tail(self, n=3):
        return " / ".join(self.seen[-n:]) or "no output"

    def close(self):
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


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
                           stdout=subprocess.DEVNULL, timeout=60)

    def path(self, name):
        return os.path.join(self.dir, name)

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Tenants:
    """gpuslice-server with the given {tenant: configuration text} on a
    fresh Node; every process started with start() or start_bare() is
    killed by close(), which the row's time limit also calls."""

    def __init__(self, configs):
        self.node = Node()
        self.procs, self.server = [], None
        CURRENT.cleanups.append(self.close)
        self.server = testlib.Server(self.node, configs, grace_ms=1000)

    def start(self, tenant, argv, stdin=False, preload=None, **extra_env):
        """argv in tenant (the shim preloaded; preload: a library ahead of it)."""
        env = self.server.tenant_env(tenant, **extra_env)
        if preload:
            env["LD_PRELOAD"] = preload + ":" + env["LD_PRELOAD"]
        proc = Proc(argv, env, stdin)
        self.procs.append(proc)
        return proc

    def start_bare(self, argv, stdin=False, **extra_env):
        """argv without gpuslice: no shim, no server."""
        env = dict(self.node.env)
        env.update({k: str(v) for k, v in extra_env.items()})
        proc = Proc(argv, env, stdin)
        self.procs.append(proc)
        return proc

    def close(self):
        for p in self.procs:
            p.close()
        self.procs = []
        if self.server:
            self.server.stop()
            self.server = None
        self.node.cleanup()


def read_stamps(path):
    """The records of a stamps file (or of torch_infer.py's, torch_train.py's):
    lists of (start, end) by tag, step latencies, (time, steps) progress,
    and offset (%globaltimer - CLOCK_REALTIME, uncertainty) and window."""
    records = {"kernel": [], "eager": [], "replay": [], "step": [], "progress": [], "offset": None, "window": None}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            values = [int(w) for w in words[1:]]
            if words[0] in ("offset_ns", "window"):
                records["offset" if words[0] == "offset_ns" else "window"] = tuple(values)
            elif words[0] == "step":
                records["step"].append(values[0])
            elif words[0] in records:
                records[words[0]].append(tuple(values))
    return records


def start_together(procs, what, timeout):
    """Waits for every proc's "ready", then sends each "go"; an error text
    if one never got ready."""
    for name, p in procs.items():
        if not p.until(["ready"], timeout):
            return "%s %s never got ready: %s" % (what, name, p.tail())
    for p in procs.values():
        p.send()
    return None


# ---- measures from stamps -------------------------------------------------------

def common_window(*interval_lists):
    """[lo, hi]: from the latest first start to the earliest last end."""
    return (max(min(s for s, _ in l) for l in interval_lists), min(max(e for _, e in l) for l in interval_lists))


def busy_in(intervals, lo, hi):
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


def overlap_in(a, b, lo, hi):
    """Time during which an interval of a and one of b both ran, in [lo, hi]
    (each list's intervals are disjoint: one stream)."""
    total, i, j = 0, 0, 0
    a, b = sorted(a), sorted(b)
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0], lo), min(a[i][1], b[j][1], hi)
        total += max(0, e - s)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def handoffs(by_tenant, lo, hi):
    """[(from, to, gap ns)]: each time the GPU passed from one tenant's
    kernels to another's, by the kernels' start order within [lo, hi]: the
    next tenant's first start less the previous tenant's last end
    (negative: they ran at once)."""
    merged = sorted((s, e, t) for t, intervals in by_tenant.items() for s, e in intervals if lo <= s <= hi)
    result, last_end = [], None
    for i, (s, e, t) in enumerate(merged):
        if i and t != merged[i - 1][2]:
            result.append((merged[i - 1][2], t, s - last_end))
            last_end = e
        else:
            last_end = e if last_end is None else max(last_end, e)
    return result


def percentile(values, q):
    """The nearest-rank q-quantile (0 < q <= 1) of values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def run_row(number, make, timeout):
    """Runs one row in a thread of its own, for at most timeout seconds;
    a row out of time fails, and its processes and servers are stopped."""
    global CURRENT
    CURRENT = RowRun(timeout)
    box = []

    def body():
        try:
            box.append(make())
        except Exception as e:  # noqa: BLE001 - a broken row is a failed row, the others still run
            box.append(Row(number, "row %d" % number, "-", "-").failed("error: %s: %s" % (type(e).__name__, e)))

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(timeout + 15)
    if not box:
        CURRENT.clean()
        thread.join(15)
        if not box:
            return Row(number, "row %d" % number, "-", "-").failed("ran out of its %d s" % timeout)
    row = box[0]
    if time.monotonic() > CURRENT.deadline and row.result == "FAIL":
        row.measured += " (the row ran out of its %d s)" % timeout
    CURRENT.clean()
    return row
