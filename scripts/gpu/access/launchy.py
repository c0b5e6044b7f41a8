"""Launch-heavy: thousands of small kernels per step (an elementwise chain
over a 4096-element tensor, 1000 links of two kernels each, plus 1000
three-tensor adds), so the step is bound by the host's launch rate."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from common import options, run  # noqa: E402

args = options(__doc__, steps=20)
x = torch.zeros(4096, device="cuda")
a = torch.ones(4096, device="cuda")
b = torch.ones(4096, device="cuda")
out = torch.empty(4096, device="cuda")


def step():
    y = x
    for _ in range(1000):
        y = y * 1.0001 + 0.0001
        torch.add(a, b, out=out)
    return float(y.sum())


run("launchy", args, step)
