"""Real-driver semantics under gpuslice-server, on fakecuda taught what
NVIDIA's driver does (test/fakecuda/README.md). One section per failure of
the old shim:

 1. graph capture (global, thread-local, relaxed; created and per-thread
    streams) survives the shim's threads while slices come and go, and the
    captured graph's launches are gated;
 2. the shim's own threads use no measurable CPU while fakecuda's
    synchronization spins a core, as a real driver's does, and a program
    that synchronizes after every kernel does not keep its drainer awake;
 3. a long copy on another stream does not delay the handover;
 4. graphs are admitted against their device time: shares hold and the
    overrun stays within one graph;
 5. contexts destroyed, released and reset while slices come and go are
    never touched afterwards (FAKECUDA_STRICT aborts on any stale use);
 6. a CUkernel launched with no current context is gated;
 7. lookups fail closed (FAKECUDA_TRAMPOLINES): every path still reaches
    the wrappers.
Every figure comes from the fakecuda meter, fakecuda's own error reports,
/proc, or the server's status.

With --no-timing (the sanitizer builds) the sections that judge shares,
overruns and CPU time (2, 3, 4) are left out: instrumented code is too
slow for their margins. They run in the plain build."""
import os
import subprocess
import sys
import time

from testlib import (BUILD, SPIN, Checks, LoadWatch, Machine, Server, parse_line, tenant_overruns, tenant_shares,
                     thread_figures)

checks = Checks()
CAPTURE_APP = os.path.join(BUILD, "test", "helpers", "capture_app")
CTX_CHURN = os.path.join(BUILD, "test", "helpers", "ctx_churn")
PATHS_TEST = os.path.join(BUILD, "test", "shim", "paths_test")


def near(value, target, points):
    return abs(value - target) <= points / 100.0


def run(server, tenant, argv, timeout=120, **extra):
    p = server.machine.spawn(argv, env=server.tenant_env(tenant, **extra), stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


# ---- 1. graph capture -------------------------------------------------------------
# Thread A captures 20 000 launches while thread B's ordinary launches make
# the tenant gain and lose slices against a busy neighbour. Each capture
# ends cleanly, and the graph is replayed under the gate.
capture_log = None
for mode, stream in [("global", "created"), ("global", "ptds"), ("thread_local", "created"), ("relaxed", "created")]:
    machine = Machine()
    capture_log = os.path.join(machine.dir, "capture.log")
    machine.env["FAKECUDA_CAPTURE_LOG"] = capture_log
    server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
    neighbour = server.spin("b", 8)
    time.sleep(0.3)
    rc, out, err = run(server, "a", [CAPTURE_APP, "--launches", "20000", "--mode", mode, "--stream", stream,
                                     "--background-launches", "--replay-seconds", "1"])
    line = parse_line(out, "capture_app") or {}
    checks.expect(rc == 0 and line.get("end_capture") == "CUDA_SUCCESS" and line.get("instantiate") == "CUDA_SUCCESS",
                  "%s capture on a %s stream survives slice changes (end_capture=%s, rc=%d)"
                  % (mode, stream, line.get("end_capture"), rc))
    invalidations = open(capture_log).read() if os.path.exists(capture_log) else ""
    checks.expect(invalidations == "", "%s/%s: fakecuda logged no invalidation (%s)"
                  % (mode, stream, invalidations.strip().replace("\n", "; ")[:200]))
    checks.expect(int(line.get("background_kernels", 0)) > 0 and int(line.get("graph_launches", 0)) > 0,
                  "%s/%s: background launches and graph replays ran (%s, %s)"
                  % (mode, stream, line.get("background_kernels"), line.get("graph_launches")))
    neighbour.kill()
    neighbour.communicate()
    server.stop()

# Replays are gated: a tenant limited to 0.3 replaying 5 ms graphs alone
# uses at most 30 % of the device, not what the graphs ask for.
machine = Machine()
server = Server(machine, {"capped": "limit = 0.3\n"})
graphs = server.machine.spawn([CAPTURE_APP, "--graph-kernels", "5", "--kernel-us", "1000", "--replay-seconds", "5"],
                              env=server.tenant_env("capped"))
time.sleep(1.0)
snap = machine.snapshot()
watch = LoadWatch()
time.sleep(3.0)
meter = machine.meter(since=snap)
watch.stop()
graphs.communicate()
util = meter["devices"][0]["utilization"]
checks.expect(graphs.returncode == 0, "graph replay tenant exits 0")
checks.expect(0.05 < util <= 0.31, "replayed graphs are gated: limit 0.3 -> %.1f%% of the device (%s)"
              % (100 * util, watch))
server.stop()


TIMING = "--no-timing" not in sys.argv[1:]


# ---- 2. the shim's threads use no CPU ---------------------------------------------------
def shim_threads(pid):
    """{tid: (CPU seconds, voluntary context switches)} of the threads the
    shim added to the process: all but the main thread and fakecuda's
    workers (named fakecuda-*)."""
    return {tid: (cpu_ns / 1e9, wakes) for tid, (name, cpu_ns, wakes) in thread_figures(pid).items()
            if int(tid) != pid and not name.startswith("fakecuda")}


def shim_threads_since(pid, before):
    """(CPU seconds, wake-ups) of the shim's threads since `before`."""
    now = shim_threads(pid)
    cpu = sum(c - before.get(t, (0, 0))[0] for t, (c, _) in now.items())
    wakes = sum(w - before.get(t, (0, 0))[1] for t, (_, w) in now.items())
    return cpu, wakes


def shim_thread_cpu_seconds(pid):
    return sum(c for c, _ in shim_threads(pid).values())


def drainer_wakeups(pid):
    """Voluntary context switches of the process's drainer thread(s)."""
    drainers = [wakes for name, _, wakes in thread_figures(pid).values() if name == "gpuslice-drain"]
    return sum(drainers) if drainers else None


# What the shim's threads may do beside a program that spins in its own
# synchronizations: sleep between the slice's events. Judged by count, as
# wake-ups a second (each takes a CPU from the program or the driver's
# threads for a moment): about 260 here (drainer rounds, the gate thread's
# grants, deadlines and releases at 1:1); a drainer that polls every
# millisecond makes over 600. Their CPU time is judged only against a
# spinning thread (a drainer that synchronized the application's spinning
# context used a quarter of a core or more): what one wake-up costs differs
# between machines (30 us on one virtual machine, 130 on another, for the
# same count), so a tight CPU bound says more about the machine.
SHIM_WAKEUPS_PER_S = 400
SHIM_CPU_SHARE = 0.10


def timing_sections():
    machine = Machine()
    server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
    # The applications spin in their own waits, as with a real driver's
    # CU_CTX_SCHED_AUTO: a drainer that synchronized contexts would spin too.
    spins = [server.spin(t, 11, kernel_us=1000, blocking_sync=False) for t in "ab"]
    time.sleep(0.5)
    start = [shim_threads(p.pid) for p in spins]
    watch = LoadWatch()
    time.sleep(10)
    used = [shim_threads_since(p.pid, s) for p, s in zip(spins, start)]
    watch.stop()
    for p in spins:
        p.communicate()
    for t, (cpu, wakes) in zip("ab", used):
        checks.expect(wakes / 10 <= SHIM_WAKEUPS_PER_S and cpu / 10 <= SHIM_CPU_SHARE,
                      "tenant %s: the shim's threads woke %.0f times a second (<= %d) and used %.2f%% of a core "
                      "(<= %.0f%%; %.0f us a wake-up) over 10 s (%s)"
                      % (t, wakes / 10, SHIM_WAKEUPS_PER_S, 100 * cpu / 10, 100 * SHIM_CPU_SHARE,
                         1e6 * cpu / max(wakes, 1), watch))
    server.stop()

    # Programs that synchronize after every 500 us kernel: their
    # synchronizations tell the shim what finished, so the drainer, which
    # used to wake every millisecond to find out, sleeps (a wake-up takes a
    # CPU from the program or from the driver's threads).
    machine = Machine()
    server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
    syncing = [machine.spawn([SPIN, "--seconds", "7", "--kernel-us", "500", "--sync-every", "1"],
                             env=server.tenant_env(t)) for t in "ab"]
    time.sleep(1.0)
    start = [(drainer_wakeups(p.pid), shim_thread_cpu_seconds(p.pid)) for p in syncing]
    watch = LoadWatch()
    time.sleep(5)
    end = [(drainer_wakeups(p.pid), shim_thread_cpu_seconds(p.pid)) for p in syncing]
    watch.stop()
    for p in syncing:
        p.communicate()
    for t, (w0, c0), (w1, c1) in zip("ab", start, end):
        checks.expect(w0 is not None and w1 is not None and (w1 - w0) / 5 <= 250,
                      "tenant %s, synchronizing after each kernel: the drainer woke %s times a second (<= 250; "
                      "the shim's threads used %.2f%% of a core; %s)"
                      % (t, "%.0f" % ((w1 - w0) / 5) if w0 is not None and w1 is not None else "?",
                         100 * (c1 - c0) / 5, watch))
    server.stop()

    # ---- 3. a long copy on another stream ------------------------------------------------------
    # 2 MiB at 1 MiB/s: each copy keeps the copy engine busy for 2 s. Draining
    # waits only for the kernels the gate admitted, so shares hold.
    machine = Machine(FAKECUDA_COPY_BYTES_PER_S="1M")
    server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
    copier = machine.spawn([SPIN, "--seconds", "7", "--copy-mb", "2", "--blocking-sync"], env=server.tenant_env("a"))
    other = server.spin("b", 7)
    time.sleep(1.0)
    snap = machine.snapshot()
    watch = LoadWatch()
    time.sleep(5.0)
    meter = machine.meter(since=snap)
    watch.stop()
    out_a, _ = copier.communicate()
    other.communicate()
    shares = tenant_shares(meter, {"a": [copier.pid], "b": [other.pid]})
    line = parse_line(out_a, "spin") or {}
    checks.expect(copier.returncode == 0 and int(line.get("copies", 0)) >= 2,
                  "the copying tenant ran its copies (%s)" % line.get("copies"))
    checks.expect(near(shares["a"], 0.5, 2), "with a 2 s copy outstanding, 1:1 -> %.1f/%.1f (+-2; %s)"
                  % (100 * shares["a"], 100 * shares["b"], watch))
    status = server.status()
    overrun = tenant_overruns(status)
    # The copy lasts 2000 ms; a drainer that waited for it overran by
    # hundreds of ms (250 ms p99 measured). The target (2 ms + one
    # kernel) is met in most runs but not all on a 2-core machine: 0.7 to
    # 14 ms p99 seen, for the neighbour without a copy as much as for the
    # copying tenant (up to 13 ms), when the simulated device's worker is
    # short of CPU and runs the queued kernels late; beside a busy
    # neighbour both tenants' overruns grow alike. So the suite asserts a
    # bound that tells the two designs apart, measured against the
    # neighbour in the same run: at most 50 ms more than its overrun p99.
    # The benchmarks track the target.
    a_ms, b_ms = overrun.get("a", 999), overrun.get("b", 999)
    checks.expect(a_ms <= b_ms + 50.0, "the holder with the copy hands over without waiting for it (overrun p99 "
                  "%.2f ms, <= 50 ms more than its neighbour's %.2f ms; %s)" % (a_ms, b_ms, watch))
    server.stop()

    # ---- 4. graphs against their device time ------------------------------------------------------
    machine = Machine()
    server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
    graphs = machine.spawn([CAPTURE_APP, "--graph-kernels", "30", "--kernel-us", "1000", "--replay-seconds", "9"],
                           env=server.tenant_env("a"))
    other = server.spin("b", 9)
    time.sleep(2.0)
    snap = machine.snapshot()
    watch = LoadWatch()
    time.sleep(6.0)
    meter = machine.meter(since=snap)
    watch.stop()
    status = server.status()
    graphs.communicate()
    other.communicate()
    shares = tenant_shares(meter, {"a": [graphs.pid], "b": [other.pid]})
    checks.expect(graphs.returncode == 0, "30 ms graph tenant exits 0")
    checks.expect(near(shares["a"], 0.5, 2), "30 ms graphs against 1 ms kernels at 1:1 -> %.1f/%.1f (+-2; %s)"
                  % (100 * shares["a"], 100 * shares["b"], watch))
    overrun = tenant_overruns(status)
    # Target: 2 ms + one graph (32 ms), seen 14 to 29 ms and once 34 ms; a
    # graph admitted as one launch near the deadline overran by a graph on
    # top of the queue. The suite asserts two graphs' worth more than the
    # kernel tenant's overrun in the same run: beside a busy neighbour a
    # tenant of 1 ms kernels alone overran by 68.5 ms p99, the machine's
    # lateness, not the graphs'. The kernel tenant's own figure is printed.
    a_ms, b_ms = overrun.get("a", 999), overrun.get("b", 999)
    checks.expect(a_ms <= b_ms + 2 + 60, "graph tenant's overrun p99 %.1f ms <= the kernel tenant's (%.1f ms) + 2 ms "
                  "+ two graphs (%s)" % (a_ms, b_ms, watch))
    server.stop()


if TIMING:
    timing_sections()

# ---- 5. context lifetimes -------------------------------------------------------------------
machine = Machine(FAKECUDA_STRICT="1")
server = Server(machine, {"a": "share = 1\n", "b": "share = 1\n"})
other = server.spin("b", 6)
rc, out, err = run(server, "a", [CTX_CHURN, "--seconds", "4"], timeout=60, FAKECUDA_STRICT="1")
line = parse_line(out, "ctx_churn") or {}
checks.expect(rc == 0 and int(line.get("rounds", 0)) >= 3,
              "destroy, release and reset in a loop under FAKECUDA_STRICT: rc=%d rounds=%s %s"
              % (rc, line.get("rounds"), err.strip().splitlines()[-1:] if err else ""))
other.communicate()
server.stop()

# ---- 6. a CUkernel with no current context is gated --------------------------------------------
machine = Machine()
server = Server(machine, {"capped": "limit = 0.3\n"})
proc = machine.spawn([CTX_CHURN, "--cukernel", "--seconds", "5"], env=server.tenant_env("capped"))
time.sleep(1.0)
snap = machine.snapshot()
watch = LoadWatch()
time.sleep(3.0)
meter = machine.meter(since=snap)
watch.stop()
proc.communicate()
util = meter["devices"][0]["utilization"]
checks.expect(proc.returncode == 0 and 0.05 < util <= 0.31,
              "a CUkernel launched with no current context is gated: limit 0.3 -> %.1f%% (%s)" % (100 * util, watch))
server.stop()

# ---- 7. lookups fail closed ---------------------------------------------------------------
env = dict(os.environ)
env.update({"LD_LIBRARY_PATH": os.path.join(BUILD, "test", "fakecuda"), "LD_PRELOAD": os.path.join(BUILD, "shim", "libgpuslice.so"),
            "GPUSLICE_LOG": "debug", "GPUSLICE_SOCKET": "/nonexistent/gpuslice.sock",
            "GPUSLICE_ON_SERVER_DOWN": "open", "FAKECUDA_TRAMPOLINES": "1"})
p = subprocess.run([PATHS_TEST, "--shim"], env=env, capture_output=True, text=True, timeout=60)
checks.expect(p.returncode == 0, "every lookup path reaches the wrappers with trampolines from cuGetProcAddress (%s)"
              % (p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-300:]))

checks.finish()
