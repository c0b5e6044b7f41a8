"""Sparse training, recommendation-model style: a 16 GiB embedding table
(33.5 M rows x 128 fp32) of which each step touches 65,536 rows (32 MiB),
sparse gradients and SGD, and a small dense tower with AdamW."""
import torch
import torch.nn as nn

from common import options, run

args = options(__doc__, steps=300)
rows, dim, batch, bag = 1 << 25, 128, 4096, 16
table = nn.EmbeddingBag(rows, dim, mode="sum", sparse=True, device="cuda")
tower = nn.Sequential(nn.Linear(dim, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1)).cuda()
sparse_opt = torch.optim.SGD(table.parameters(), lr=0.01)
dense_opt = torch.optim.AdamW(tower.parameters(), lr=1e-3)
generator = torch.Generator(device="cuda").manual_seed(1)


def step():
    # Skewed lookups: most of them fall in the first 1% of the table (hot rows).
    hot = torch.randint(0, rows // 100, (batch * bag * 3 // 4,), device="cuda", generator=generator)
    cold = torch.randint(0, rows, (batch * bag // 4,), device="cuda", generator=generator)
    index = torch.cat([hot, cold])[torch.randperm(batch * bag, device="cuda", generator=generator)]
    target = torch.rand(batch, 1, device="cuda", generator=generator)
    sparse_opt.zero_grad(set_to_none=True)
    dense_opt.zero_grad(set_to_none=True)
    out = tower(table(index.view(batch, bag)))
    loss = ((out - target) ** 2).mean()
    loss.backward()
    sparse_opt.step()
    dense_opt.step()
    return loss.item()


table_bytes = rows * dim * 4
# Each step reads and writes the rows it touches (at most batch * bag of them).
touched = 2 * batch * bag * dim * 4
run("sparse", args, step, {"table_bytes": table_bytes, "touched_table_bytes_per_step": touched})
