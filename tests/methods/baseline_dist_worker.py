"""Worker of the 2-process gloo test: group DRO and LfF on 2 ranks x B vs 1 process x 2B.

``main(rank, world, init_file, out_dir)`` is started by ``torch.multiprocessing.spawn``; every rank
takes its contiguous half of the same seeded global batches and saves what it ends with to
``out_dir/rank{r}.pt``. ``run_dro(0, 1)`` / ``run_lff(0, 1)`` give the single-process reference.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from methods.baseline_helpers import NUM_CLASSES, make_context, model_factory
from mr2.methods.group_dro import GroupDRO
from mr2.methods.lff import LfF

K, GLOBAL_BATCH, STEPS, N = NUM_CLASSES, 12, 4, 30
COUNTS = torch.tensor([5, 10, 3, 12])


def dro_batches():
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        high = K - 1 if step % 2 else K  # every other step, class K-1 is absent from the global batch
        yield (
            2 * torch.randn(GLOBAL_BATCH, K, generator=g),
            torch.randint(0, high, (GLOBAL_BATCH,), generator=g),
        )


def lff_batches():
    g = torch.Generator().manual_seed(2)
    labels = torch.randint(0, K, (N,), generator=g)
    inputs = torch.randn(N, 6, generator=g)
    for _ in range(STEPS):
        index = torch.randperm(N, generator=g)[:GLOBAL_BATCH]
        index[-1] = index[0]  # one sample on both ranks, as a DistributedSampler's padding does
        yield inputs[index], labels[index], index


def run_dro(rank: int, world: int) -> dict[str, Any]:
    method = GroupDRO(K, eta=0.5, adjustment=1.0)
    method.setup(make_context(int(COUNTS.sum()), COUNTS))
    per_rank = GLOBAL_BATCH // world
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    qs, grads, losses = [], [], []
    for logits, target in dro_batches():
        z = logits[rows].clone().requires_grad_()
        loss = method(z, None, target[rows])
        (loss / world).backward()  # data parallelism averages gradients over ranks
        qs.append(method.q.clone())
        grads.append(z.grad)
        losses.append(method.log_values()["loss"])
    return {"q": qs, "grads": grads, "losses": losses}


def average_method_gradients(method: nn.Module, world: int) -> None:
    for p in method.parameters():
        if world > 1 and p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def run_lff(rank: int, world: int) -> dict[str, Any]:
    factory = model_factory("scratch")
    method = LfF(K)
    method.setup(make_context(N, torch.full((K,), N // K), factory=factory))
    model = factory()
    train_model: nn.Module = model
    if world > 1:
        train_model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD([*model.parameters(), *method.parameters()], lr=0.5)
    per_rank = GLOBAL_BATCH // world
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    for x, target, index in lff_batches():
        method.on_batch(x[rows], target[rows], index[rows])
        logits, _ = train_model(x[rows])
        loss = method(logits, None, target[rows])
        optimizer.zero_grad()
        loss.backward()
        average_method_gradients(method, world)  # what the engine does for method parameters
        optimizer.step()
    return {"method": method.state_dict(), "model": model.state_dict()}


def main(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        result = {"dro": run_dro(rank, world), "lff": run_lff(rank, world)}
        torch.save(result, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()
