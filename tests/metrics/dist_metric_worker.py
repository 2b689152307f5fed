"""Worker of the 2-process ClasswiseDisparity test (spawned by test_classwise_disparity.py).

Not a test module: each rank updates the metric with its interleaved share of a fixed data set
(uneven: rank 0 gets one sample more) in batches, computes through torchmetrics' synchronisation and
saves what it got.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

NUM_SAMPLES = 203
NUM_CLASSES = 7
NAMES = [f"c{k}" for k in range(NUM_CLASSES)]


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic (logits, target), identical on every rank; class 6 is never a target."""
    generator = torch.Generator().manual_seed(0)
    target = torch.randint(0, NUM_CLASSES - 1, (NUM_SAMPLES,), generator=generator)
    logits = torch.randn(NUM_SAMPLES, NUM_CLASSES, generator=generator)
    logits[torch.arange(NUM_SAMPLES), target] += 1.0
    return logits, target


def run(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    """Update with this rank's share, compute (synchronised), save the confusion and log dict."""
    import warnings

    from mr2.metrics import ClasswiseDisparity
    from mr2.report.exceptions import MissingClassWarning

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        logits, target = data()
        metric = ClasswiseDisparity(NUM_CLASSES, class_names=NAMES)
        share = torch.arange(rank, NUM_SAMPLES, world_size)
        for batch in share.split(16):
            metric.update(logits[batch], target[batch])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingClassWarning)
            report = metric.compute()
            logged = metric.to_log_dict("test/")
        result = {
            "confusion": torch.as_tensor(report.confusion),
            "local": metric.confusion.clone(),
            "log_names": list(logged),
            "log_values": torch.tensor(list(logged.values()), dtype=torch.float64),
        }
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
