"""One tenant's PyTorch load for test/gpu/check.sh: 4096x4096 bf16 matmuls
in a loop, counting the ones that have finished on the GPU.

Warms up (CUDA context, cuBLAS handle, first kernels), prints "ready",
waits for a line on standard input (so that every tenant measures the same
window), then runs for --seconds and prints one line:

  torch_matmul: pid=P iterations=N seconds=S iterations_per_s=R
"""
import argparse
import os
import sys
import time

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--seconds", type=float, default=20.0)
parser.add_argument("--size", type=int, default=4096)
parser.add_argument("--batch", type=int, default=8, help="matmuls issued between synchronisations")
args = parser.parse_args()

a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
b = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
for _ in range(3):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()

iterations = 0
start = time.monotonic()
while time.monotonic() - start < args.seconds:
    for _ in range(args.batch):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    iterations += args.batch
elapsed = time.monotonic() - start
print("torch_matmul: pid=%d iterations=%d seconds=%.3f iterations_per_s=%.1f"
      % (os.getpid(), iterations, elapsed, iterations / elapsed), flush=True)
