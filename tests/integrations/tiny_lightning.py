"""A tiny LightningModule trained with MR2 (shared by the Lightning tests and their DDP worker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mr2 import MR2Loss
from mr2.integrations.lightning import MR2StatisticsCallback, log_disparity, log_mr2_parts
from mr2.metrics import ClasswiseDisparity
from mr2.report.tiers import TierSplit

NUM_CLASSES, IN_DIM, FEATURE_DIM = 4, 8, 6
CLASS_NAMES = ["T-shirt/top", "sea lion", "cat", "dog"]


def dataset(size: int = 64, seed: int = 3) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    target = torch.arange(size) % NUM_CLASSES
    inputs = torch.randn(size, IN_DIM, generator=generator) + target[:, None].float()
    return TensorDataset(inputs, target)


class TinyMR2Module(pl.LightningModule):
    def __init__(self, lr: float = 0.1, tiers: TierSplit | None = None, **loss_options: Any) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(IN_DIM, FEATURE_DIM), nn.Tanh())
        self.head = nn.Linear(FEATURE_DIM, NUM_CLASSES)
        self.criterion = MR2Loss(NUM_CLASSES, feature_dim=FEATURE_DIM, momentum=0.6, **loss_options)
        self.val_disparity = ClasswiseDisparity(NUM_CLASSES, class_names=CLASS_NAMES, tiers=tiers)
        self.lr = lr

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(inputs)
        return self.head(features), features

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, target = batch
        logits, features = self(inputs)
        loss = self.criterion(logits, features, target)
        log_mr2_parts(self, self.criterion)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, target = batch
        logits, _ = self(inputs)
        self.val_disparity.update(logits, target)

    def on_validation_epoch_end(self) -> None:
        log_disparity(self, self.val_disparity, "val/")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def loader(batch_size: int, **options: Any) -> DataLoader:
    return DataLoader(dataset(**options), batch_size=batch_size, shuffle=False)


def trainer(root: Path, **options: Any) -> pl.Trainer:
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "callbacks": [MR2StatisticsCallback()],
        "default_root_dir": str(root),
        "num_sanity_val_steps": 0,
    }
    settings.update(options)
    return pl.Trainer(**settings)


def statistics_state(module: TinyMR2Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.criterion.statistics.state_dict().items()}
