"""Inference: greedy generation from a decoder-only transformer built from a
config with random weights (no downloads): 8 layers, d=4096, 32 heads, MLP
11008, vocab 32000, bf16, batch 16, 128 prompt tokens; the KV cache grows by
one token per step (torch.cat, so new allocations every step). One "step"
is 32 generated tokens."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from common import options, run

args = options(__doc__, steps=4)
d, layers, heads, mlp, vocab, batch, prompt = 4096, 8, 32, 11008, 32000, 16, 128
dev, dt = "cuda", torch.bfloat16


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        made = {"device": dev, "dtype": dt}
        self.qkv = nn.Linear(d, 3 * d, bias=False, **made)
        self.out = nn.Linear(d, d, bias=False, **made)
        self.up = nn.Linear(d, 2 * mlp, bias=False, **made)
        self.down = nn.Linear(mlp, d, bias=False, **made)
        self.n1 = nn.RMSNorm(d, **made)
        self.n2 = nn.RMSNorm(d, **made)

    def forward(self, x, cache):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, heads, d // heads).transpose(1, 3).unbind(2)
        if cache:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.out(attn.transpose(1, 2).reshape(b, t, d))
        gate, up = self.up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up), (k, v)


embed = nn.Embedding(vocab, d, device=dev, dtype=dt)
blocks = nn.ModuleList(Layer() for _ in range(layers))
head = nn.Linear(d, vocab, bias=False, device=dev, dtype=dt)
for p in list(blocks.parameters()) + list(head.parameters()):
    nn.init.normal_(p, std=1 / math.sqrt(p.shape[-1]))
tokens = torch.randint(0, vocab, (batch, prompt), device=dev, generator=torch.Generator(device=dev).manual_seed(1))
state = {"caches": None, "last": None, "count": 0}


@torch.no_grad()
def forward(ids, caches):
    x = embed(ids)
    new = []
    for i, block in enumerate(blocks):
        x, cache = block(x, caches[i] if caches else None)
        new.append(cache)
    return head(x[:, -1]).float(), new


def step():
    if state["caches"] is None:
        logits, state["caches"] = forward(tokens, None)
        state["last"] = logits.argmax(-1, keepdim=True)
    checksum = 0
    for _ in range(32):
        logits, state["caches"] = forward(state["last"], state["caches"])
        state["last"] = logits.argmax(-1, keepdim=True)
        checksum += int(state["last"].sum())
    return checksum


run("inference", args, step, {"tokens_per_step": 32 * batch})
