"""MR2 in PyTorch Lightning on Fashion-MNIST: the loss on the module, disparity logged with log_dict.

    python examples/lightning_mr2.py                             # 300 steps of 128 on CPU
    python examples/lightning_mr2.py --accumulation-steps 4      # statistics applied once per step
    python examples/lightning_mr2.py --precision bf16-mixed      # autocast; statistics stay float32
    python examples/lightning_mr2.py --devices 2 --strategy ddp  # 2 CPU processes (gloo)
    python examples/lightning_mr2.py --resume out/checkpoints/last.ckpt --steps 600
    python examples/lightning_mr2.py --tiny                      # seconds: the test suite's run

The MR2 loss is an attribute of the LightningModule, so its class statistics are in every checkpoint
and ``--resume`` continues with them. The validation disparity (overall, worst class, difference,
tiers fixed from a reference accuracy with ``--reference-accuracy``, one ``class_accuracy/<name>``
per class) goes to TensorBoard under ``--out/tensorboard``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset

from mr2 import MR2Loss, TierSplit
from mr2.data.fashion_mnist import load_fashion_mnist
from mr2.integrations.lightning import MR2StatisticsCallback, log_disparity, log_mr2_parts
from mr2.metrics import ClasswiseDisparity
from mr2.models import SmallCNN

MEAN, STD = 0.2860, 0.3530


class FashionMR2(pl.LightningModule):
    def __init__(self, class_names: list[str], tiny: bool, lr: float, tiers: TierSplit | None) -> None:
        super().__init__()
        num_classes = len(class_names)
        tiny_size = {"channels": (8, 16, 16), "hidden_dim": 32} if tiny else {}
        self.model = SmallCNN(num_classes, **tiny_size)
        # On the module: in every checkpoint, moved by .to(), all-reduced across ddp ranks.
        self.criterion = MR2Loss(num_classes, feature_dim=self.model.feature_dim, pairs="global")
        self.val_disparity = ClasswiseDisparity(num_classes, class_names=class_names, tiers=tiers)
        self.lr = lr

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, target = batch
        logits, features = self.model(images)
        loss = self.criterion(logits.float(), features, target)
        log_mr2_parts(self, self.criterion, "train/", prog_bar=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        images, target = batch
        self.val_disparity.update(self.model(images), target)

    def on_validation_epoch_end(self) -> None:
        log_disparity(self, self.val_disparity, "val/")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps (300; --tiny: 8)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="samples per optimiser step and device (128; --tiny: 64)")
    parser.add_argument("--accumulation-steps", type=int, default=1)
    parser.add_argument("--precision", default="32-true", help="e.g. bf16-mixed")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--reference-accuracy", type=Path, default=None,
                        help="JSON list of a reference run's per-class accuracy: fixes the tiers")
    parser.add_argument("--resume", default=None, help="a Lightning checkpoint to continue from")
    parser.add_argument("--out", type=Path, default=Path("lightning_mr2_out"))
    parser.add_argument("--tiny", action="store_true", help="512 training images, a tiny model")
    args = parser.parse_args(argv)
    args.steps = args.steps or (8 if args.tiny else 300)
    args.batch_size = args.batch_size or (64 if args.tiny else 128)
    if args.batch_size % args.accumulation_steps:
        parser.error("--batch-size must be a multiple of --accumulation-steps")
    return args


def loaders(root: str | None, tiny: bool, micro_batch: int) -> tuple[DataLoader, DataLoader, list[str]]:
    data = load_fashion_mnist(root)
    x_train, y_train, x_test, y_test = data.x_train, data.y_train, data.x_test, data.y_test
    if tiny:
        x_train, y_train, x_test, y_test = x_train[:512], y_train[:512], x_test[:256], y_test[:256]
    def scale(x: torch.Tensor) -> torch.Tensor:
        return (x.float() / 255 - MEAN) / STD
    train = DataLoader(TensorDataset(scale(x_train), y_train), batch_size=micro_batch, shuffle=True,
                       generator=torch.Generator().manual_seed(0))
    test = DataLoader(TensorDataset(scale(x_test), y_test), batch_size=1000)
    return train, test, data.class_names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    pl.seed_everything(0, verbose=False)
    train, test, class_names = loaders(args.data_root, args.tiny, args.batch_size // args.accumulation_steps)
    tiers = None
    if args.reference_accuracy is not None:
        tiers = TierSplit.from_accuracy(json.loads(args.reference_accuracy.read_text()),
                                        ranked_by=str(args.reference_accuracy))
    module = FashionMR2(class_names, args.tiny, args.lr, tiers)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=args.strategy,
        precision=args.precision,
        max_steps=args.steps,
        accumulate_grad_batches=args.accumulation_steps,
        val_check_interval=min(100, args.steps) * args.accumulation_steps,
        check_val_every_n_epoch=None,
        logger=TensorBoardLogger(args.out, name="tensorboard"),
        callbacks=[MR2StatisticsCallback(),
                   ModelCheckpoint(dirpath=args.out / "checkpoints", save_last=True, save_top_k=0)],
        log_every_n_steps=10 if not args.tiny else 1,
        enable_progress_bar=not args.tiny,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train, test, ckpt_path=args.resume)
    if trainer.is_global_zero:
        logged = trainer.logged_metrics.items()
        print({k: round(float(v), 4) for k, v in logged if "class_accuracy/" not in k})
    return {"logged": {k: float(v) for k, v in trainer.logged_metrics.items()},
            "statistics": module.criterion.statistics.state_dict(),
            "log_dir": Path(trainer.logger.log_dir) if trainer.logger else None,
            "last_checkpoint": args.out / "checkpoints" / "last.ckpt"}


if __name__ == "__main__":
    main()
