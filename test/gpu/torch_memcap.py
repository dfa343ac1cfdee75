"""One process's PyTorch load for test/gpu/check.sh's memory-cap row: under
the tenant's cap, with the allocator backend PYTORCH_CUDA_ALLOC_CONF names
(unset: the native caching allocator), reads torch.cuda.mem_get_info(),
then allocates 256 MiB tensors, keeping them, until torch.OutOfMemoryError.
Then it holds what it has, so that the check can read the device's memory
at its peak, prints

  holding: pid=P free=F total=T allocated_mib=A oom=1|0

waits for a line on standard input, and exits. With --context-only it
only creates its CUDA context (and one small tensor), prints "holding:"
and waits, for the check to measure what a context holds.
"""
import os
import sys

import torch

if sys.argv[1:] == ["--context-only"]:
    small = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    print("holding: pid=%d free=0 total=0 allocated_mib=0 oom=0" % os.getpid(), flush=True)
    sys.stdin.readline()
    sys.exit(0)

free, total = torch.cuda.mem_get_info()
held, oom = [], 0
try:
    for _ in range(1024):
        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
except torch.OutOfMemoryError:
    oom = 1
torch.cuda.synchronize()
print("holding: pid=%d free=%d total=%d allocated_mib=%d oom=%d"
      % (os.getpid(), free, total, 256 * len(held), oom), flush=True)
sys.stdin.readline()
