"""Spill, then promotion, on a real GPU: run under vramshare with
VRAMSHARE_QUOTA=1GiB. A 768 MiB tensor fills the quota, a 512 MiB one spills
to the host; freeing the first (and emptying PyTorch's cache, so that
cudaFree is called) promotes the second onto the device. Both tensors are
checked for their contents throughout. Prints one JSON line."""
import json

import torch

MiB = 2**20
a = torch.full((768 * MiB // 4,), 1.0, device="cuda")
b = torch.full((512 * MiB // 4,), 2.0, device="cuda")  # over the quota: spilled
checks = {"a_before": bool((a == 1).all()), "b_spilled": bool((b == 2).all())}
del a
torch.cuda.empty_cache()  # cudaFree of a's segment: room for b
b.mul_(3)
torch.cuda.synchronize()
checks["b_promoted"] = bool((b == 6).all())
print(json.dumps(checks))
raise SystemExit(0 if all(checks.values()) else 1)
