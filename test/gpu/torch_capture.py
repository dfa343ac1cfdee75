"""CUDA graph capture and replay under the shim, for test/gpu/check.sh.

Captures --ops small in-place additions (x.add_(1)) into one CUDA graph
with torch.cuda.graph (capture error mode "global", the strictest: any
unsafe call from another thread of the process during the capture, such as
a device synchronisation, invalidates it). Three steps, each started by a
line on standard input so that the caller can note the tenants' slices in
between:

  warm: pid=P                  after the warm-up, before the capture
  captured: ops=N ms=T         after the capture

then replays the graph --replays times and checks every element:

  replayed: replays=R ms=T value=V expected=E ok=1|0

value is a wrong element if there is one, else the common value.

A failed capture prints "capture_failed: ERROR" and exits 1; a wrong value
exits 1.
"""
import argparse
import os
import sys
import time

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--ops", type=int, default=20000)
parser.add_argument("--replays", type=int, default=20)
parser.add_argument("--elements", type=int, default=1024)
args = parser.parse_args()

x = torch.zeros(args.elements, device="cuda", dtype=torch.float32)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm-up on a side stream, as PyTorch advises
    for _ in range(3):
        x.add_(1)
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()
print("warm: pid=%d" % os.getpid(), flush=True)
sys.stdin.readline()

graph = torch.cuda.CUDAGraph()
start = time.monotonic()
try:
    with torch.cuda.graph(graph):
        for _ in range(args.ops):
            x.add_(1)
except Exception as e:  # noqa: BLE001 - any capture failure is the result
    print("capture_failed: %s" % str(e).replace("\n", " "), flush=True)
    sys.exit(1)
print("captured: ops=%d ms=%.1f" % (args.ops, (time.monotonic() - start) * 1e3), flush=True)
sys.stdin.readline()

x.zero_()
torch.cuda.synchronize()
start = time.monotonic()
for _ in range(args.replays):
    graph.replay()
torch.cuda.synchronize()
elapsed_ms = (time.monotonic() - start) * 1e3
expected = float(args.ops * args.replays)
low, high = x.min().item(), x.max().item()
ok = low == expected and high == expected
value = low if low != expected else high  # a wrong element, if any
print("replayed: replays=%d ms=%.1f value=%g expected=%g ok=%d" % (args.replays, elapsed_ms, value, expected, ok),
      flush=True)
sys.exit(0 if ok else 1)
