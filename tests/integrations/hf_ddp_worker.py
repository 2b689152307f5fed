"""Run under torchrun with 2 processes: the tiny Trainer run of test_transformers.py with the
Trainer's own DDP (gloo, CPU), 4 samples per rank and step, global representation pairs, SGD; each
rank saves its MR2 statistics and weights."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from test_transformers import make_trainer, statistics, tiny_model

if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    out = Path(sys.argv[1])
    model = tiny_model(pairs="global")
    make_trainer(model, out / "ddp", max_steps=3, per_device_train_batch_size=4, optim="sgd").train()
    state = {"statistics": statistics(model), "weights": model.model.state_dict()}
    torch.save(state, out / f"rank{os.environ['RANK']}.pt")
