"""A CUDA graph: a small MLP's training step (forward, backward, SGD)
captured with torch.cuda.graph (PyTorch's recipe: warm-up on a side stream,
then capture) and replayed three times, after six eager steps from the same
start. Prints one JSON line with both lists of losses, to compare between a
native run and one under the shim (scripts/gpu/graph-check)."""
import json

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(256, 1024, device="cuda")
y = torch.randn(256, 1024, device="cuda")
initial = {k: v.clone() for k, v in model.state_dict().items()}


def step():
    opt.zero_grad(set_to_none=False)
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss


eager = [step().item() for _ in range(6)]
model.load_state_dict(initial)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    warm = [step().item() for _ in range(3)]
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    captured_loss = step()
replayed = []
for _ in range(3):
    graph.replay()
    replayed.append(captured_loss.item())
print(json.dumps({"eager": eager, "graphed": warm + replayed}))
