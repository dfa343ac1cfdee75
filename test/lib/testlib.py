"""Helpers shared by the multi-process tests: paths into the build, a
fresh fakecuda state per test, the fakecuda meter, and a check counter that
prints the 'N passed, N failed' line."""
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

# The build: GPUSLICE_BUILD_DIR (meson test sets it), or build/ in the
# source tree (this file is test/lib/testlib.py).
BUILD = os.environ.get("GPUSLICE_BUILD_DIR",
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build"))
FAKECUDA_DIR = os.path.join(BUILD, "test", "fakecuda")
STAT = os.path.join(FAKECUDA_DIR, "fakecuda-stat")
SPIN = os.path.join(BUILD, "examples", "spin", "spin")
MEMHOG = os.path.join(BUILD, "test", "helpers", "memhog")
MEMSCRIPT = os.path.join(BUILD, "test", "helpers", "memscript")


def skip(reason):
    """Skips the test (exit 77), or fails it where GPUSLICE_REQUIRE_CONTAINERS=1
    (CI, as root with apt: what a test needs must be there)."""
    if os.environ.get("GPUSLICE_REQUIRE_CONTAINERS") == "1":
        print("FAILED: %s (GPUSLICE_REQUIRE_CONTAINERS=1)" % reason)
        sys.exit(1)
    print("skipped: " + reason)
    sys.exit(77)


def runs_emulated(path):
    """Whether the program or library at path runs under emulation here: a
    cross build (aarch64 on x86-64) run by qemu-user through binfmt. Its
    ELF machine (e_machine, bytes 18-19) is not this machine's."""
    machines = {"x86_64": 62, "aarch64": 183}
    try:
        with open(path, "rb") as f:
            built = int.from_bytes(f.read(20)[18:20], "little")
    except OSError:
        return False
    return built != machines.get(os.uname().machine, built)


# Tests that judge timing widen their margins under emulation.
EMULATED = runs_emulated(STAT)


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def expect(self, cond, what):
        if cond:
            self.passed += 1
            print("ok:", what)
        else:
            self.failed += 1
            print("FAILED:", what)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


class Machine:
    """One simulated machine: a fresh FAKECUDA_STATE and its environment."""

    def __init__(self, devices=1, memory="16G", **extra):
        self.dir = tempfile.mkdtemp(prefix="gpuslice-test-")
        self.state = os.path.join(self.dir, "fakecuda.state")
        self.env = dict(os.environ)
        self.env.update({
            "LD_LIBRARY_PATH": FAKECUDA_DIR,
            "FAKECUDA_STATE": self.state,
            "FAKECUDA_DEVICES": str(devices),
            "FAKECUDA_MEMORY": memory,
            # Contexts hold no device memory unless a test says so, so that
            # byte counts are the allocations' alone.
            "FAKECUDA_CONTEXT_BYTES": "0",
        })
        self.env.update({k: str(v) for k, v in extra.items()})
        # Create the state before anything is measured.
        subprocess.run([SPIN, "--count", "1", "--kernel-us", "1"], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)

    def spawn(self, argv, **kw):
        return subprocess.Popen(argv, env=kw.pop("env", self.env), stdout=subprocess.PIPE,
                                stderr=kw.pop("stderr", None), text=True, **kw)

    def snapshot(self):
        path = os.path.join(self.dir, "snap-%d" % len(os.listdir(self.dir)))
        subprocess.run([STAT, "--save", path, self.state], check=True)
        return path

    def meter(self, since=None):
        argv = [STAT, "--json", self.state] if since is None else [STAT, "--json", "--since", since, self.state]
        return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


def _proc_stat_fields(pid):
    with open("/proc/%s/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def _own_cpu_seconds():
    """CPU seconds used so far by this process and everything it started:
    the live descendants (with what they reaped) from /proc, the reaped
    ones from os.times()."""
    tick = os.sysconf("SC_CLK_TCK")
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = int(_proc_stat_fields(name)[1])
            except (OSError, IndexError, ValueError):
                pass
    me = os.getpid()
    total = 0.0
    for pid in parents:
        p = pid
        while p > 1 and p != me:
            p = parents.get(p, 0)
        if p == me and pid != me:
            try:
                f = _proc_stat_fields(pid)
                total += sum(int(x) for x in f[11:15]) / tick
            except (OSError, IndexError, ValueError):
                pass  # exited meanwhile: its parent reaps it
    t = os.times()
    return total + t.user + t.system + t.children_user + t.children_system


def _machine_cpu_seconds():
    """CPU seconds the whole machine has used (all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _cpu_pressure_us():
    """Microseconds in which some runnable task waited for a CPU (PSI), or None."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().split("total=")[1])
    except (OSError, IndexError, ValueError):
        return None


def thread_figures(pid):
    """{tid: (name, CPU ns, voluntary context switches)} for every live
    thread of pid, from /proc/PID/task: CPU from schedstat (ns), or from
    stat's ticks where the kernel keeps no schedstat; the context switches
    are the times the thread slept. A thread that exits meanwhile is left
    out."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        base = "/proc/%d/task/%s/" % (pid, tid)
        try:
            with open(base + "stat") as f:
                stat = f.read()
            with open(base + "status") as f:
                wakes = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:"))
            try:
                with open(base + "schedstat") as f:
                    cpu_ns = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                fields = stat.rsplit(")", 1)[1].split()
                cpu_ns = (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError, StopIteration):
            continue
        out[tid] = (stat[stat.index("(") + 1:stat.rindex(")")], cpu_ns, wakes)
    return out


class LoadWatch:
    """What the machine did while a test measured a scheduling figure:
    create one at the start of the measured window, stop() it at its end;
    str() of it (in a check's message) says whether the machine was
    loaded, with the figures that show it: the load average, how long
    runnable tasks waited for a CPU, and the share of the CPU time used on
    the machine that this test's own processes got. A failed timing check
    then tells a fault from a busy neighbour."""

    CPUS = os.cpu_count() or 1

    def __init__(self):
        self.restart()

    def restart(self):
        self.t0 = time.monotonic()
        self.own0 = _own_cpu_seconds()
        self.machine0 = _machine_cpu_seconds()
        self.psi0 = _cpu_pressure_us()
        self.stopped = None

    def stop(self):
        """Ends the window (at the end of what was measured); str() then
        reports it, however much later. Returns self."""
        self.stopped = None
        self.stopped = self.figures()
        return self

    def figures(self):
        """(wall s, own CPU s, others' CPU s, share of time a task waited for a CPU or None, load average)."""
        if self.stopped:
            return self.stopped
        wall = max(time.monotonic() - self.t0, 1e-6)
        own = _own_cpu_seconds() - self.own0
        others = max(0.0, _machine_cpu_seconds() - self.machine0 - own)
        psi = _cpu_pressure_us()
        waited = (psi - self.psi0) / 1e6 / wall if psi is not None and self.psi0 is not None else None
        return wall, own, others, waited, os.getloadavg()[0]

    def loaded(self):
        """True when others used at least a quarter of a CPU meanwhile, or
        runnable tasks waited for a CPU a fifth of the time or more."""
        wall, _, others, waited, _ = self.figures()
        return others / wall >= 0.25 or (waited is not None and waited >= 0.2)

    def __str__(self):
        wall, own, others, waited, load = self.figures()
        verdict = "loaded" if self.loaded() else "quiet"
        return ("machine %s over the %.1f s measured: load average %.1f on %d CPUs, %s; this test's processes "
                "used %.2f CPU-s, everything else %.2f (%.0f %% of the CPU time used was this test's)"
                % (verdict, wall, load, self.CPUS,
                   "a runnable task waited for a CPU %.0f %% of the time" % (100 * waited) if waited is not None
                   else "CPU pressure unknown", own, others, 100 * own / max(own + others, 1e-9)))


def wait_for(cond, timeout=2.0, step=0.02):
    """Polls cond until it is true or timeout seconds have passed; its last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def load_note():
    """For a failure message that judges timing: how loaded the machine
    was (its load average over the last minute, and its CPUs)."""
    try:
        with open("/proc/loadavg") as f:
            load1 = float(f.read().split()[0])
    except (OSError, ValueError):
        return ""
    return " [load average %.2f on %d CPUs]" % (load1, os.cpu_count() or 1)


def parse_line(text, prefix):
    """Turns 'prefix: a=1 b=2' (the last such line) into a dict of strings."""
    for line in reversed(text.splitlines()):
        if line.startswith(prefix + ":"):
            return dict(kv.split("=", 1) for kv in line[len(prefix) + 1:].split())
    return None


SERVER = os.path.join(BUILD, "tokenserver", "gpuslice-server")
CTL = os.path.join(BUILD, "tokenserver", "gpuslicectl")
SHIM = os.path.join(BUILD, "shim", "libgpuslice.so")
PROTO_CLIENT = os.path.join(BUILD, "test", "helpers", "proto_client")


class Server:
    """A gpuslice-server on a private config and run directory, with tenants
    given as {name: "key = value\\n..."}; processes are started inside a
    tenant with tenant_env()."""

    def __init__(self, machine, tenants, grace_ms=250, extra_env=None, args=(), nofile=None, conf=None, cdi_dir="",
                 wrapper=()):
        """args: more command-line options; wrapper: a command that runs it
        (e.g. unshare's argv); nofile: its RLIMIT_NOFILE (soft
        and hard, or a (soft, hard) pair); conf: the configuration directory path to give it
        (default: a fresh tenants.d); cdi_dir: where it writes its CDI spec ("": none)."""
        self.machine = machine
        # No metrics listener unless a test asks for one: the default port
        # (29400) is the node's, and other runs on the machine may use it.
        self.args = list(args) if "--metrics" in args else ["--metrics", ""] + list(args)
        self.nofile = nofile
        self.cdi_dir = cdi_dir
        self.wrapper = list(wrapper)
        self.conf = conf or os.path.join(machine.dir, "tenants.d")
        self.run_dir = os.path.join(machine.dir, "run")
        os.makedirs(self.conf, exist_ok=True)
        for name, text in tenants.items():
            self.write_tenant(name, text)
        self.grace_ms = grace_ms
        self.log_path = os.path.join(machine.dir, "server.log")
        self.proc = None
        # It makes each tenant's directory, policy file and socket before
        # its admin socket: thousands of tenants take seconds on a loaded
        # machine.
        self.start_s = 5 + 0.01 * len(tenants)
        self.start()

    def write_tenant(self, name, text):
        tmp = os.path.join(self.conf, ".%s.tmp" % name)
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, os.path.join(self.conf, name + ".conf"))

    def start(self):
        log = open(self.log_path, "a")
        limit = self.nofile

        def set_limit():
            if limit:
                import resource
                resource.setrlimit(resource.RLIMIT_NOFILE, limit if isinstance(limit, tuple) else (limit, limit))

        self.proc = subprocess.Popen(self.wrapper + [SERVER, "--config-dir", self.conf, "--run-dir", self.run_dir,
                                      "--grace-ms", str(self.grace_ms), "--log-level", os.environ.get("GS_TEST_LOG_LEVEL", "info"),
                                      "--cdi-dir", self.cdi_dir, "--shim", SHIM] + self.args,
                                     stdout=log, stderr=log, preexec_fn=set_limit)
        log.close()
        deadline = time.monotonic() + self.start_s
        while not os.path.exists(os.path.join(self.run_dir, "admin.sock")):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("gpuslice-server did not start: " + self.log()[-3000:])
            time.sleep(0.01)

    def kill(self, sig=9):
        self.proc.send_signal(sig)
        self.proc.wait()
        # a killed server leaves its sockets; the next start replaces them
        if sig != 9:
            return
        try:
            os.unlink(os.path.join(self.run_dir, "admin.sock"))
        except FileNotFoundError:
            pass

    def socket(self, tenant):
        return os.path.join(self.run_dir, "tenants", tenant, "gpuslice.sock")

    def tenant_env(self, tenant, **extra):
        env = dict(self.machine.env)
        # On fakecuda, the shim's estimate of a context's footprint, for
        # contexts it cannot measure, is what the machine's contexts hold.
        env.update({"LD_PRELOAD": SHIM, "GPUSLICE_SOCKET": self.socket(tenant)})
        if "FAKECUDA_CONTEXT_BYTES" in self.machine.env:
            env["GPUSLICE_CONTEXT_BYTES"] = self.machine.env["FAKECUDA_CONTEXT_BYTES"]
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def spin(self, tenant, seconds, kernel_us=1000, depth=16, blocking_sync=True, **extra):
        # Blocking waits by default: on a machine of two cores, processes
        # that spin in every synchronization (fakecuda's CU_CTX_SCHED_AUTO,
        # like a real driver's) starve the threads whose timing is measured.
        argv = [SPIN, "--seconds", str(seconds), "--kernel-us", str(kernel_us), "--depth", str(depth)]
        if blocking_sync:
            argv.append("--blocking-sync")
        return self.machine.spawn(argv, env=self.tenant_env(tenant, **extra))

    def status(self):
        out = subprocess.run([CTL, "--run-dir", self.run_dir, "status", "--json"], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out)

    def status_text(self, json_format=True, timeout=30):
        """gpuslicectl status as (exit code, stdout, seconds it took)."""
        argv = [CTL, "--run-dir", self.run_dir, "status"] + (["--json"] if json_format else [])
        start = time.monotonic()
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, "", time.monotonic() - start
        return out.returncode, out.stdout, time.monotonic() - start

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def log_size(self):
        return os.path.getsize(self.log_path)

    def cpu_seconds(self):
        """User + system CPU time the server has used so far."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        """SIGTERM; SIGKILL if it has not exited within 5 s (a server stuck
        in a blocking call cannot read its signalfd)."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def tenant_shares(meter, pids_by_tenant):
    """Sums the meter's per-process shares by tenant."""
    share = {p["pid"]: p["share"] for p in meter["processes"]}
    return {t: sum(share.get(pid, 0.0) for pid in pids) for t, pids in pids_by_tenant.items()}


def tenant_overruns(status, none=99.0):
    """Each tenant's worst overrun p99 over its GPUs, in ms, from
    `gpuslicectl status --json`; `none` for a tenant without a GPU."""
    return {t["name"]: max([d["overrun_p99_ms"] for d in t["devices"]] or [none]) for t in status["tenants"]}


class MemScript:
    """A memscript process (test/helpers/memscript.c): device memory calls
    made one at a time, each answered with its CUresult name."""

    def __init__(self, env):
        self.proc = subprocess.Popen([MEMSCRIPT], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.pid = self.proc.pid

    def do(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError("memscript %d died at %r" % (self.pid, line))
        fields = dict(kv.split("=", 1) for kv in reply.split())
        return fields

    def rc(self, line):
        return self.do(line)["rc"]

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=30)


def run_paced(workers, steps, sample, samples_wanted, wait_s=60.0):
    """Runs each worker (a callable taking the step number) for `steps`
    steps, each in its own thread, while this thread calls sample() over and
    over. Before each step a worker waits until sample() has been called its
    part of samples_wanted times, so that at least samples_wanted samples
    are taken while the workers run, spread over the run, however slow
    either side is (an instrumented build, a busy machine): samples by
    count, not as many as happen to fit. A wait longer than wait_s is given
    up and reported. Returns (samples taken, [(worker, step, samples then)]
    for each wait given up)."""
    taken = [0]
    paced = threading.Condition()
    stalls = []

    def drive(index, worker):
        for step in range(steps):
            need = -(-step * samples_wanted // steps)  # ceil: the last step waits for them all
            with paced:
                if not paced.wait_for(lambda: taken[0] >= need, wait_s):
                    stalls.append((index, step, taken[0]))
            worker(step)

    threads = [threading.Thread(target=drive, args=(i, w)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        sample()
        with paced:
            taken[0] += 1
            paced.notify_all()
    for t in threads:
        t.join()
    return taken[0], stalls


class RandomChunks:
    """A memscript process that allocates and frees chunks at random, as
    memhog --random does, one step at a time: a free of a held chunk one
    step in three, else an allocation. Counts its successes and
    CUDA_ERROR_OUT_OF_MEMORY; any other result is an error."""

    def __init__(self, env, chunk, seed):
        self.app = MemScript(env)
        self.pid = self.app.pid
        self.chunk = chunk
        self.rng = random.Random(seed)
        self.held = []
        self.allocs = self.frees = self.ooms = 0
        self.errors = []
        rc = self.app.rc("init")
        if rc != "CUDA_SUCCESS":
            self.errors.append("init -> %s" % rc)

    def step(self, _=None):
        if self.held and self.rng.randrange(3) == 0:
            i = self.held.pop(self.rng.randrange(len(self.held)))
            rc = self.app.rc("free %d" % i)
            self.frees += rc == "CUDA_SUCCESS"
            if rc != "CUDA_SUCCESS":
                self.errors.append("free -> %s" % rc)
        else:
            i = min(set(range(256)) - set(self.held))
            rc = self.app.rc("alloc %d %d" % (i, self.chunk))
            if rc == "CUDA_SUCCESS":
                self.held.append(i)
                self.allocs += 1
            elif rc == "CUDA_ERROR_OUT_OF_MEMORY":
                self.ooms += 1
            else:
                self.errors.append("alloc -> %s" % rc)

    def close(self):
        self.app.close()
