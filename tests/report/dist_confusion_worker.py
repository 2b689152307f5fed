"""Worker of the distributed confusion-matrix test (spawned by test_report_confusion.py).

Not a test module: each spawned rank evaluates its DistributedSampler share of an 11-sample data set
(padded to 12 by the sampler) and saves the matrices it computed.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

NUM_SAMPLES = 11
NUM_CLASSES = 4


def dataset() -> TensorDataset:
    """Deterministic (prediction, target) pairs, identical on every rank."""
    generator = torch.Generator().manual_seed(0)
    target = torch.randint(0, NUM_CLASSES, (NUM_SAMPLES,), generator=generator)
    preds = torch.randint(0, NUM_CLASSES, (NUM_SAMPLES,), generator=generator)
    return TensorDataset(preds, target)


def run(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    """Evaluate this rank's share and save the global matrices (padding-aware and naive)."""
    from mr2.report.confusion import ConfusionMatrix

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        data = dataset()
        sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
            data, num_replicas=world_size, rank=rank, shuffle=True, seed=3
        )
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        metric = ConfusionMatrix(NUM_CLASSES, dataset_length=len(data))
        naive = ConfusionMatrix(NUM_CLASSES)
        for preds, target in loader:
            metric.update(preds, target)
            naive.update(preds, target)
        result = {"padded_aware": metric.compute(), "naive": naive.compute(), "seen": metric.num_seen}
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
