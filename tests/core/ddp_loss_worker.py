"""Worker launched by torchrun in tests: MR2 statistics, loss and feature gradients on 2 ranks.

Usage: torchrun --standalone --nproc-per-node 2 ddp_loss_worker.py OUT_DIR
Every rank takes its contiguous slice of the same global batches (seeded), runs the MR2 loss with
global pairs, and saves its statistics, losses and feature gradients to OUT_DIR/rank{r}.pt.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from mr2 import MR2Loss

NUM_CLASSES, DIM, GLOBAL_BATCH, STEPS = 5, 6, 24, 3


def global_batches():
    g = torch.Generator().manual_seed(123)
    for _ in range(STEPS):
        target = torch.randint(0, NUM_CLASSES, (GLOBAL_BATCH,), generator=g)
        features = torch.randn(GLOBAL_BATCH, DIM, generator=g) * (1 + target.unsqueeze(1)) + 1
        logits = torch.randn(GLOBAL_BATCH, NUM_CLASSES, generator=g)
        yield logits, features, target


def run(loss_fn, rank, world):
    per_rank = GLOBAL_BATCH // world
    losses, grads = [], []
    for logits, features, target in global_batches():
        rows = slice(rank * per_rank, (rank + 1) * per_rank)
        f = features[rows].clone().requires_grad_()
        z = logits[rows].clone().requires_grad_()
        loss = loss_fn(z, f, target[rows])
        # Data parallel training averages gradients over ranks: do the same here.
        (loss / world).backward()
        grads.append((z.grad, f.grad))
        losses.append(loss.detach())
    return {"losses": losses, "grads": grads, "state": loss_fn.state_dict()}


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    result = run(MR2Loss(NUM_CLASSES, momentum=0.6, lambda_rep=0.5, pairs="global",
                         distance_temperature=1.0, distance_temperature_per_dim=True), rank, world)
    torch.save(result, f"{sys.argv[1]}/rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
