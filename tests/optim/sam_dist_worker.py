"""Worker of the 2-process gloo SAM test: the engine's step under DistributedDataParallel.

``main(rank, world, init_file, out_dir)`` trains with ``train_one_epoch`` + SAM on this rank's half
of each seeded global batch and saves the model's state; ``per_rank_oracle()`` is what the SAM paper
prescribes in one process: each half computes its own perturbation and its own gradient at it, and
the update uses the average of the two gradients.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from methods.representation_oracles import sam_perturbation_oracle
from mr2.engine.loop import StepSetup, train_one_epoch
from mr2.methods.registry import build_method
from mr2.optim.sam import SAM
from optim.sam_helpers import K, batches, make_net

RHO, LR, STEPS, GLOBAL_BATCH = 0.1, 0.2, 3, 16


def run_engine(rank: int, world: int) -> dict[str, Any]:
    model = make_net(torch.float64)
    for m in model.modules():  # no batch norm here: DDP's buffer broadcast is not what is tested
        if isinstance(m, nn.BatchNorm1d):
            m.track_running_stats = False
            m.running_mean = m.running_var = m.num_batches_tracked = None
    train_model: nn.Module = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    rows = slice(rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world)
    data = [(x[rows], y[rows], i[rows]) for x, y, i in batches(STEPS, GLOBAL_BATCH, torch.float64)]
    train_one_epoch(train_model, build_method("erm", K), data, optimizer, None,
                    StepSetup(torch.device("cpu"), sam=SAM(optimizer, RHO)))
    return model.state_dict()


def per_rank_oracle(world: int = 2) -> dict[str, Any]:
    model = make_net(torch.float64)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.track_running_stats = False
            m.running_mean = m.running_var = m.num_batches_tracked = None
    params = list(model.parameters())
    for x, y, _ in batches(STEPS, GLOBAL_BATCH, torch.float64):
        total = [torch.zeros_like(p) for p in params]
        for r in range(world):
            rows = slice(r * GLOBAL_BATCH // world, (r + 1) * GLOBAL_BATCH // world)
            local = copy.deepcopy(model)
            local_params = list(local.parameters())
            grads = torch.autograd.grad(F.cross_entropy(local(x[rows])[0], y[rows]), local_params)
            shifts = sam_perturbation_oracle([p.detach() for p in local_params], grads, RHO, False)
            with torch.no_grad():
                for p, e in zip(local_params, shifts, strict=True):
                    p.add_(e)
            at_shift = torch.autograd.grad(F.cross_entropy(local(x[rows])[0], y[rows]), local_params)
            total = [t + g / world for t, g in zip(total, at_shift, strict=True)]
        with torch.no_grad():
            for p, g in zip(params, total, strict=True):
                p.sub_(LR * g)
    return model.state_dict()


def main(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.save(run_engine(rank, world), f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
