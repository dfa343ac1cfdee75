"""A graph launch tells the synchronizations after it what they concern,
as a kernel launch does: a synchronization on the stream that finds the
graph finished begins an idle spell, and gives a latency tenant's slice
back at once. An inference server replays a CUDA graph per request
(torch.cuda.graph, vLLM, SGLang) and waits for it; before this, a wait on
a stream that only graphs were launched into concerned no GPU, so such a
tenant was charged its host time between requests as use, and as class =
latency held the GPU idle until the idle release (2 to 5 ms after its work)
instead of yielding it: the batch tenant beside it kept 40 to 60 % of the
device time it left, not 90 %.

The shim (in `stamps infer`: one graph of 4 kernels of 250 us per step, a
stream synchronization, then 1 ms asleep, 400 steps) runs against a
stand-in server that grants every request:

1. Grants with GS_GRANT_YIELD (a latency tenant), each with a 1 s
   deadline, so that only the shim decides when a slice goes back: a
   RELEASE for at least half the steps (each step's synchronization gives the slice back; 1 ms
   asleep is shorter than the idle release, so without it the slice is
   held across every pause: a RELEASE only at each deadline).
2. Grants without it (a batch tenant), each with a 100 ms deadline, so
   that its slices end while it runs and their RELEASEs tell their idle
   time: it adds up to at least a quarter of the time the program slept
   (its pauses are spells; without them, only each slice's start: about
   none), and to no more than the program's run less its kernels' time. The last slice's RELEASE, if the program exits holding it, is
   not counted.

Each twice more with the synchronization made by a second thread that
launched nothing (stamps infer --wait-in stream, --wait-in event), as a
server's thread that waits for what another launched: such a wait
concerned no GPU either (3 RELEASEs in 400 steps; 2 ms of idle), and now
concerns the GPU of the stream's context, or of the current one.

Counts and sums, not timings: they hold on a loaded machine."""
import os
import socket
import struct
import subprocess
import tempfile
import threading
import time

import gsproto as gp
from testlib import BUILD, Checks, LoadWatch, Machine

STAMPS = os.path.join(BUILD, "test", "gpu", "stamps")
STEPS, THINK_US = 400, 1000
GRANT_YIELD = 8
checks = Checks()
machine = Machine()


def run(flags, deadline_ns, wait_in=None):
    """Runs the program against a stand-in server whose GRANTs carry
    flags (wait_in: its synchronizations in a second thread, on the stream
    or an event): (RELEASEs, their idle ns added up, the program's sleep
    in ns, its output)."""
    work = tempfile.mkdtemp(prefix="gpuslice-graph-sync-")
    path = os.path.join(work, "gpuslice.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(1)
    stop = threading.Event()
    seen = {"releases": 0, "idle_ns": 0}

    def serve():
        grant = 0
        for conn, mtype, body in gp.stand_in_messages(listener, stop):
            more = False
            if mtype == gp.RELEASE:
                _, _, idle_ns, rflags = struct.unpack("<IQQI", body)
                seen["releases"] += 1
                seen["idle_ns"] += idle_ns
                more = bool(rflags & gp.RELEASE_MORE)
            if mtype == gp.ACQUIRE or more:
                grant += 1
                conn.send(gp.encode(gp.GRANT, struct.pack("<IQQIQ", 0, grant, time.monotonic_ns() + deadline_ns,
                                                          flags, 0)))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    env = dict(machine.env, LD_PRELOAD=os.path.join(BUILD, "shim", "libgpuslice.so"), GPUSLICE_SOCKET=path)
    try:
        proc = subprocess.run([STAMPS, "infer", "--graph-kernels", "4", "--kernel-us", "250", "--think-us",
                               str(THINK_US), "--count", str(STEPS), "--out", os.path.join(work, "steps")] +
                              (["--wait-in", wait_in] if wait_in else []),
                              env=env, capture_output=True, text=True, timeout=120)
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    checks.expect(proc.returncode == 0, "stamps infer ran under the shim (exit %d: %s)"
                  % (proc.returncode, (proc.stdout + proc.stderr).strip()[-300:]))
    return seen["releases"], seen["idle_ns"], STEPS * THINK_US * 1000, proc.stdout.strip()


for wait_in in (None, "stream", "event"):
    how = ("waited for on the launching thread" if not wait_in else
           "waited for by a second thread that launched nothing (cuStreamSynchronize)" if wait_in == "stream" else
           "waited for by a second thread that launched nothing (cuEventSynchronize)")
    watch = LoadWatch()
    releases, _, _, out = run(GRANT_YIELD, 1_000_000_000, wait_in)
    checks.expect(releases >= STEPS // 2,
                  "graph steps %s: a latency tenant's process gives its slice back after each step's synchronization: "
                  "%d RELEASEs in %d steps (at least %d; %s)" % (how, releases, STEPS, STEPS // 2, watch))
    releases, idle_ns, slept_ns, out = run(0, 100_000_000, wait_in)
    checks.expect(idle_ns >= slept_ns / 4,
                  "graph steps %s: a batch tenant's pauses after them are idle spells: its RELEASEs (%d) report %.1f "
                  "ms idle of the %.0f ms it slept (at least a quarter; %s)"
                  % (how, releases, idle_ns / 1e6, slept_ns / 1e6, watch))
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    unused_ns = float(fields.get("wall_s", 0)) * 1e9 - STEPS * 1_000_000
    checks.expect(idle_ns <= unused_ns + 10_000_000,
                  "and no more than the time its kernels did not run: %.1f ms idle, %.1f ms of its run without "
                  "kernels" % (idle_ns / 1e6, unused_ns / 1e6))
checks.finish()
