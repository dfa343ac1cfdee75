"""CUDA graph capture and replay under the shim, for test/gpu/check.sh's
row 4, as PyTorch, vLLM and SGLang do them.

While a second thread of the process launches eager kernels of
--eager-us (stamp kernels through the driver API, gpu_stamps.py, on a
stream of their own), the main thread captures --ops in-place additions
(x.add_(1)) into one CUDA graph with torch.cuda.graph in capture error
mode "global", the strictest: any unsafe call from another thread during
the capture (a device synchronization, say) invalidates it. The capture
pauses --pause-ms every 1000 ops, so that it spans several time slices;
the graph begins and ends with a stamp kernel. Steps, each started by a
line on standard input:

  ready: pid=P                    set up, before the capture
  captured: ops=N window_ms=T eager=E
                                  after the capture (eager kernels stop)
  replayed: replays=R gpu_ms=G wall_ms=W value=V expected=E ok=1|0
                                  after replaying the graph for
                                  --replay-seconds, one host
                                  synchronization per replay

G is the sum of each replay's time from its first stamp's start to its
last stamp's end (%globaltimer), W the time from the first replay's start
to the last one's end; value is a wrong element if there is one, else the
common value. --out gets the records check.sh reads: "window BEGIN END"
(CLOCK_REALTIME around the capture), "eager START END" per eager kernel
and "replay START END" per replay (%globaltimer).

A failed capture prints "capture_failed: ERROR" and exits 1; a wrong value
exits 1.
"""
import argparse
import os
import sys
import threading
import time

import torch

import gpu_stamps

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--ops", type=int, default=20000)
parser.add_argument("--pause-ms", type=float, default=5.0)
parser.add_argument("--eager-us", type=float, default=500.0)
parser.add_argument("--replay-seconds", type=float, default=5.0)
parser.add_argument("--elements", type=int, default=1024)
parser.add_argument("--ptx", required=True, help="the PTX of the stamp kernel (stamps ptx)")
parser.add_argument("--out", required=True)
args = parser.parse_args()

x = torch.zeros(args.elements, device="cuda", dtype=torch.float32)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up on a side stream, as PyTorch advises
    for _ in range(3):
        x.add_(1)
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()
with open(args.ptx, "rb") as f:
    stamper = gpu_stamps.Stamper(f.read())
ends = stamper.reserve(2)  # the graph's first and last stamp
print("ready: pid=%d" % os.getpid(), flush=True)
sys.stdin.readline()

stop_eager = threading.Event()
eager_slots = []
eager_errors = []


def eager():
    """Eager work of another thread, paced so that its queue stays short:
    it runs while the capture does, and waits at the gate without a slice.
    Nothing here is an unsafe call during a global capture."""
    try:
        stamper.make_current()
        ns = int(args.eager_us * 1000)
        while not stop_eager.is_set():
            slot = stamper.launch(ns)
            if slot is not None:
                eager_slots.append(slot)
            time.sleep(args.eager_us / 1e6)
    except gpu_stamps.CudaError as e:
        eager_errors.append(str(e))


thread = threading.Thread(target=eager)
thread.start()
time.sleep(0.2)
graph = torch.cuda.CUDAGraph()
begin = end = 0
try:
    with torch.cuda.graph(graph, capture_error_mode="global"):
        begin = time.time_ns()
        capture_stream = torch.cuda.current_stream().cuda_stream
        stamper.launch(0, stream=capture_stream, slot=ends)
        for i in range(args.ops):
            x.add_(1)
            if i % 1000 == 999:
                time.sleep(args.pause_ms / 1e3)
        stamper.launch(0, stream=capture_stream, slot=ends + 1)
    end = time.time_ns()
except Exception as e:  # noqa: BLE001 - any capture failure is the result
    stop_eager.set()
    thread.join()
    print("capture_failed: %s" % str(e).replace("\n", " "), flush=True)
    sys.exit(1)
stop_eager.set()
thread.join()
if eager_errors:
    print("capture_failed: the eager thread: %s" % eager_errors[0], flush=True)
    sys.exit(1)
print("captured: ops=%d window_ms=%.1f eager=%d" % (args.ops, (end - begin) / 1e6, len(eager_slots)), flush=True)
sys.stdin.readline()

x.zero_()
torch.cuda.synchronize()
replays = []
deadline = time.monotonic() + args.replay_seconds
# float32 counts exactly up to 2**24: at most that many additions.
while time.monotonic() < deadline and (len(replays) + 1) * args.ops <= 1 << 24:
    graph.replay()
    torch.cuda.synchronize()
    first, last = stamper.pairs(ends, 2)
    replays.append((first[0], last[1]))
stamper.synchronize()
eager = stamper.pairs(0, stamper.reserve(0))
gpu_ms = sum(e - s for s, e in replays) / 1e6
wall_ms = (replays[-1][1] - replays[0][0]) / 1e6 if replays else 0.0
expected = float(args.ops * len(replays))
low, high = x.min().item(), x.max().item()
ok = bool(replays) and low == expected and high == expected
value = low if low != expected else high  # a wrong element, if any
with open(args.out, "w") as f:
    f.write("window %d %d\n" % (begin, end))
    for slot in eager_slots:
        s, e = eager[slot]
        if s and e:
            f.write("eager %d %d\n" % (s, e))
    for s, e in replays:
        f.write("replay %d %d\n" % (s, e))
print("replayed: replays=%d gpu_ms=%.1f wall_ms=%.1f value=%g expected=%g ok=%d"
      % (len(replays), gpu_ms, wall_ms, value, expected, ok), flush=True)
sys.exit(0 if ok else 1)
