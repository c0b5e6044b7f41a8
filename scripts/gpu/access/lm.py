"""A transformer LM built from a config (random weights, no download):
Hugging Face GPT-2 at medium size (24 layers, d=1024, 16 heads), batch 8 of
1024 tokens, bf16 autocast, AdamW."""
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import common  # noqa: E402

args = common.options(__doc__, steps=8)
config = GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024)
model = GPT2LMHeadModel(config).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
tokens = torch.randint(0, config.vocab_size, (8, 1024), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(tokens, labels=tokens).loss
    loss.backward()
    opt.step()
    return loss.item()


common.run("lm", args, step)
