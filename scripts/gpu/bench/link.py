"""The host link, measured in the same call as the jobs:
  copy    pinned host -> device copies (cudaMemcpy), GB/s
  mapped  GPU reads of memory that vramshare spilled to the host (run under
          LD_PRELOAD with VRAMSHARE_QUOTA=0, so the tensor is managed memory
          preferring the host and mapped for the GPU), GB/s; and GPU writes to
          it ("write_GBps"), the other direction a training step uses"""
import json
import sys
import time

import torch

mode = sys.argv[1]
n = 4 << 30
best = float("inf")
if mode == "copy":
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(n, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        device.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
else:
    spilled = torch.ones(n // 4, dtype=torch.float32, device="cuda")  # over the quota: on the host
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        total = spilled.sum()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    assert total.item() == n // 4
    best_write = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        spilled.fill_(2.0)
        torch.cuda.synchronize()
        best_write = min(best_write, time.perf_counter() - start)
    print(json.dumps({"link": mode, "GBps": n / best / 1e9, "write_GBps": n / best_write / 1e9}), flush=True)
    sys.exit(0)
print(json.dumps({"link": mode, "GBps": n / best / 1e9}), flush=True)
