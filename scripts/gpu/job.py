"""A small PyTorch training job for checking vramshare on a real GPU.

Six Linear(4096) layers with AdamW, fp32: about 1.9 GiB at its peak, so a
quota of 1 GiB makes it spill. Prints one JSON line: losses, mean step time
(and each step's time and end), what torch.cuda.mem_get_info() answered,
and PyTorch's own peak.

    python3 scripts/gpu/job.py [--steps N] [--expect-oom]

With --expect-oom the job must end in torch.cuda.OutOfMemoryError (as under
VRAMSHARE_SPILL=off with a small quota); it then prints the error and exits 0.
"""
import argparse
import json
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--width", type=int, default=4096)
parser.add_argument("--expect-oom", action="store_true")
args = parser.parse_args()

free, total = torch.cuda.mem_get_info()
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
d = args.width


def run():
    model = nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(6)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2048, d, device="cuda")
    y = torch.randn(2048, d, device="cuda")
    losses, times, ends = [], [], []
    for _ in range(args.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t)
        ends.append(time.time())
    return losses, times, ends


try:
    losses, times, ends = run()
except torch.cuda.OutOfMemoryError as error:
    print(json.dumps({"oom": True, "message": str(error).splitlines()[0], "mem_get_info": [free, total]}))
    raise SystemExit(0 if args.expect_oom else 1)
if args.expect_oom:
    print(json.dumps({"oom": False, "error": "expected torch.cuda.OutOfMemoryError"}))
    raise SystemExit(1)
steady = times[2:] or times
print(json.dumps({
    "losses": losses,
    "step_ms": 1e3 * sum(steady) / len(steady),
    "first_step_ms": 1e3 * times[0],
    # Each step's time and wall-clock end, to line up with another job's.
    "times_ms": [1e3 * t for t in times],
    "ends": ends,
    "mem_get_info": [free, total],
    "max_reserved": torch.cuda.max_memory_reserved(),
}))
