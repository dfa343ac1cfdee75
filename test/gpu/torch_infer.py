"""One inference service for test/gpu/check.sh's row 11: a small model
(three linear layers, fp16, a batch of 8 requests) captured once with
torch.cuda.graph, then one step per request: the request's input copied
in, one replay of the graph, the answer copied out and a synchronization
of the stream; --think-ms of host time (asleep) between requests, as a
server waiting for its next request.

Warms up and captures, prints "ready: pid=P", waits for a line on
standard input, runs --steps steps, and writes to --out the records the
check reads:

  window BEGIN END   CLOCK_REALTIME before the first step and after the last
  step LATENCY       each step, ns on the host clock: from the copy in to
                     the synchronization's return

then prints one line:

  torch_infer: pid=P steps=N p50_us=A p99_us=B max_us=C gpu_us_per_step=G wall_s=W

G is the median of each step's time between two CUDA events recorded
around its replay: the graph's own GPU time when nothing else shares the
GPU (the check takes it from a run alone).
"""
import argparse
import os
import sys
import time

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=600)
parser.add_argument("--think-ms", type=float, default=5.0)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--width", type=int, default=4096)
parser.add_argument("--features", type=int, default=1024)
parser.add_argument("--out", required=True)
args = parser.parse_args()

dtype = torch.float16
model = torch.nn.Sequential(torch.nn.Linear(args.features, args.width), torch.nn.GELU(),
                            torch.nn.Linear(args.width, args.width), torch.nn.GELU(),
                            torch.nn.Linear(args.width, args.features)).to("cuda", dtype).eval()
static_in = torch.zeros(args.batch, args.features, device="cuda", dtype=dtype)
host_in = torch.randn(args.batch, args.features).to(dtype).pin_memory()
host_out = torch.empty(args.batch, args.features, dtype=dtype, pin_memory=True)

with torch.no_grad():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as PyTorch advises before a capture
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_in)
torch.cuda.synchronize()
begin_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
stream = torch.cuda.current_stream()
for _ in range(10):
    graph.replay()
stream.synchronize()

print("ready: pid=%d" % os.getpid(), flush=True)
sys.stdin.readline()

latencies, gpu_ms = [], []
begin = time.time_ns()
start = time.monotonic()
for _ in range(args.steps):
    t0 = time.monotonic_ns()
    static_in.copy_(host_in, non_blocking=True)
    begin_event.record(stream)
    graph.replay()
    end_event.record(stream)
    host_out.copy_(static_out, non_blocking=True)
    stream.synchronize()
    latencies.append(time.monotonic_ns() - t0)
    gpu_ms.append(begin_event.elapsed_time(end_event))
    if args.think_ms > 0:
        time.sleep(args.think_ms / 1000.0)
wall = time.monotonic() - start
end = time.time_ns()

with open(args.out, "w") as f:
    f.write("window %d %d\n" % (begin, end))
    f.writelines("step %d\n" % ns for ns in latencies)
ordered = sorted(latencies)


def rank(q):
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))] / 1e3


print("torch_infer: pid=%d steps=%d p50_us=%.1f p99_us=%.1f max_us=%.1f gpu_us_per_step=%.1f wall_s=%.3f"
      % (os.getpid(), len(latencies), rank(0.5), rank(0.99), ordered[-1] / 1e3,
         sorted(gpu_ms)[len(gpu_ms) // 2] * 1e3, wall), flush=True)
