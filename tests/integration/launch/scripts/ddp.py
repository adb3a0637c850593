"""A PyTorch DDP program as people write it for torchrun: init_process_group("gloo") with
the env:// defaults, nothing dslaunch-specific. Each rank trains a small MLP on its rows
of a global batch (in float64, so a comparison can be tight) and writes, per step, the
gradients DDP all-reduced, and the final loss over the global batch.

  python3 ddp.py --out DIR [--steps N] [--global-batch B] [--fail-rank R]
  python3 ddp.py --out DIR --reference      one process, the whole batch: what DDP must equal
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--global-batch", type=int, default=8)
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--reference", action="store_true")
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
g = torch.Generator().manual_seed(1)
X = torch.randn(a.steps, a.global_batch, 6, generator=g, dtype=torch.float64)
Y = torch.randn(a.steps, a.global_batch, 1, generator=g, dtype=torch.float64)

if a.reference:
    rank, world, net = 0, 1, model
else:
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                          "NODE_RANK", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
                                          "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                                          "TORCHELASTIC_RUN_ID")}
    print(f"rank {rank} of {world}: {json.dumps(env, sort_keys=True)}", flush=True)
    net = DDP(model)
    if rank == a.fail_rank:
        print(f"rank {rank} is failing on purpose", file=sys.stderr, flush=True)
        # at once, as a crash ends: sys.exit would tear PyTorch down for a while after its
        # sockets closed, and a peer that saw them close could exit first (operations.md)
        os._exit(3)

per = a.global_batch // world
rows = slice(rank * per, (rank + 1) * per)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
grads = []
for s in range(a.steps):
    opt.zero_grad()
    # the mean over this rank's rows; DDP averages the ranks' gradients: the global mean's
    loss = torch.nn.functional.mse_loss(net(X[s, rows]), Y[s, rows])
    loss.backward()
    grads.append([q.grad.flatten().tolist() for q in net.parameters()])
    opt.step()
with torch.no_grad():
    final = torch.nn.functional.mse_loss(net(X[0, rows]), Y[0, rows]).reshape(1)
if not a.reference:
    dist.all_reduce(final)
    final /= world
with open(os.path.join(a.out, f"rank-{rank}.json"), "w") as f:
    json.dump({"world": world, "grads": grads, "loss": final.item()}, f)
if not a.reference:
    dist.destroy_process_group()
