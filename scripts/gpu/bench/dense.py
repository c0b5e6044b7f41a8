"""Dense training: every byte is touched every step: 12 x Linear(8192) +
GELU, batch 4096, bf16 autocast, AdamW; about 15.3 GiB at its peak."""
import torch
import torch.nn as nn

from common import options, run

args = options(__doc__, steps=6)
d = 8192
model = nn.Sequential(*[nn.Sequential(nn.Linear(d, d, device="cuda"), nn.GELU()) for _ in range(12)])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(4096, d, device="cuda")
y = torch.randn(4096, d, device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.item()


# Each spilled tensor (weights, gradients, AdamW's two moments, activations)
# crosses the link about twice a step: read and written once each.
run("dense", args, step, {"crossings_per_step": 2})
