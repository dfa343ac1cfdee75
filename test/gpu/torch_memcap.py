"""One process's PyTorch load for test/gpu/check.sh's memory-cap row: under
the tenant's cap, with the allocator backend PYTORCH_CUDA_ALLOC_CONF names
(unset: the native caching allocator), reads torch.cuda.mem_get_info(),
then allocates 256 MiB tensors, keeping them, until torch.OutOfMemoryError.
Prints one line:

  torch_memcap: pid=P free=F total=T allocated_mib=A oom=1|0
"""
import os

import torch

free, total = torch.cuda.mem_get_info()
held, oom = [], 0
try:
    for _ in range(1024):
        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
except torch.OutOfMemoryError:
    oom = 1
print("torch_memcap: pid=%d free=%d total=%d allocated_mib=%d oom=%d"
      % (os.getpid(), free, total, 256 * len(held), oom), flush=True)
