"""Run under torchrun with 2 processes: the tiny module with Lightning's ddp strategy (gloo, CPU),
global representation pairs, batch 8 per rank; each rank saves its MR2 statistics.

Each rank reads every other sample in order (Lightning's automatic DistributedSampler always
shuffles training data), so the global batch of step t is the single process's batch of 16."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Subset

sys.path.insert(0, str(Path(__file__).parent))

from tiny_lightning import TinyMR2Module, dataset, statistics_state, trainer

if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    out = Path(sys.argv[1])
    module = TinyMR2Module(lambda_rep=0.5, pairs="global")
    fit = trainer(out / "ddp", devices=2, strategy="ddp", max_epochs=1, use_distributed_sampler=False)
    rank = int(os.environ["RANK"])
    data = dataset()
    fit.fit(module, DataLoader(Subset(data, range(rank, len(data), 2)), batch_size=8))
    torch.save(statistics_state(module), out / f"rank{fit.global_rank}.pt")
