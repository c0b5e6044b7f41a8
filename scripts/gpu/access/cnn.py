"""A CNN with AMP: torchvision ResNet-50 (random weights, no download),
batch 128 at 224x224, fp16 autocast with a GradScaler, SGD with momentum."""
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
from common import options, run  # noqa: E402

args = options(__doc__, steps=8)
model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(128, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (128,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()


run("cnn", args, step)
