"""Run under torchrun with 2 processes: the tiny module with Lightning's ddp strategy (gloo, CPU),
global representation pairs, batch 8 per rank; then a run with learning rate 0 and 2 accumulated
micro-batches of 4 per rank (deferred statistics); each rank saves its MR2 statistics of both.

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
    shard = Subset(data, range(rank, len(data), 2))
    fit.fit(module, DataLoader(shard, batch_size=8))
    accumulated = TinyMR2Module(lr=0.0, lambda_rep=0.5, pairs="global")
    trainer(out / "ddp_acc", devices=2, strategy="ddp", max_epochs=1, use_distributed_sampler=False,
            accumulate_grad_batches=2).fit(accumulated, DataLoader(shard, batch_size=4))
    torch.save({"plain": statistics_state(module), "accumulated": statistics_state(accumulated)},
               out / f"rank{fit.global_rank}.pt")
