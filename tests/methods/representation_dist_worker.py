"""Worker of the 2-process gloo test of center loss, SupCon (global pairs) and HBR.

``main(rank, world, init_file, out_dir)`` is started by ``torch.multiprocessing.spawn``; every rank
takes its contiguous slice of the same seeded global batches and saves what it ends with to
``out_dir/rank{r}.pt``. ``run_*(0, 1)`` give the single-process references.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from methods.baseline_helpers import FEATURE_DIM, IN_DIM, NUM_CLASSES, make_context, model_factory
from mr2.methods.center_loss import CenterLoss
from mr2.methods.hbr import HBR
from mr2.methods.supcon import SupCon

K, GLOBAL_BATCH, STEPS, N = NUM_CLASSES, 12, 4, 24


def center_batches():
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        high = K - 1 if step % 2 else K  # every other step, class K-1 is absent from the global batch
        yield (torch.randn(GLOBAL_BATCH, K, generator=g), torch.randn(GLOBAL_BATCH, FEATURE_DIM, generator=g),
               torch.randint(0, high, (GLOBAL_BATCH,), generator=g))


def run_center(rank: int, world: int) -> dict[str, Any]:
    method = CenterLoss(K, lambda_center=0.5, alpha=0.5)
    method.setup(make_context(N, torch.full((K,), N // K)))
    rows = slice(rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world)
    centers, grads = [], []
    for logits, features, target in center_batches():
        f = features[rows].clone().requires_grad_()
        (method(logits[rows], f, target[rows]) / world).backward()  # data parallelism averages
        centers.append(method.centers.clone())
        grads.append(f.grad)
    return {"centers": centers, "grads": grads}


def supcon_batches():
    g = torch.Generator().manual_seed(2)
    for _ in range(STEPS):
        yield torch.randn(GLOBAL_BATCH, IN_DIM, generator=g), torch.randint(0, K, (GLOBAL_BATCH,), generator=g)


def run_supcon(rank: int, world: int, pairs: str = "global") -> dict[str, Any]:
    factory = model_factory("scratch")
    method = SupCon(K, pairs=pairs)
    method.setup(make_context(N, torch.full((K,), N // K), factory=factory))
    model = factory()
    train_model: nn.Module = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD([*model.parameters(), *method.parameters()], lr=0.5)
    rows = slice(rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world)
    for x, target in supcon_batches():
        logits, features = train_model(x[rows])
        loss = method(logits, features, target[rows])
        optimizer.zero_grad()
        loss.backward()
        for p in method.parameters():  # what the engine does for the method's own parameters
            if world > 1 and p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world
        optimizer.step()
    return {"method": method.state_dict(), "model": model.state_dict()}


def run_hbr(rank: int, world: int) -> dict[str, Any]:
    method = HBR(K, stage1_epochs=2)
    labels = torch.arange(N) % K
    method.setup(make_context(N, torch.bincount(labels, minlength=K)))
    g = torch.Generator().manual_seed(3)
    method.train()
    for epoch in range(2):
        method.on_epoch_start(epoch)
        order = torch.randperm(N, generator=g)
        logits = 3 * torch.randn(N, K, generator=g) + 2 * torch.nn.functional.one_hot(labels, K) * (labels[:, None] + 1)
        for batch in order.split(GLOBAL_BATCH):
            mine = batch[rank * len(batch) // world : (rank + 1) * len(batch) // world]
            method.on_batch(torch.zeros(len(mine), 1), labels[mine], mine)
            method(logits[mine], None, labels[mine])
        method.on_epoch_end(epoch)
    return {"method": method.state_dict()}


def main(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)  # as the engine seeds every rank (HBR's draws use torch.initial_seed())
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        result = {"center": run_center(rank, world), "supcon": run_supcon(rank, world),
                  "hbr": run_hbr(rank, world)}
        torch.save(result, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
