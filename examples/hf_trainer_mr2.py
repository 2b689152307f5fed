"""MR2 in the Hugging Face Trainer on Fashion-MNIST: compute_loss_func, checkpoints, compute_metrics.

    python examples/hf_trainer_mr2.py                              # 300 steps of 128 on CPU
    python examples/hf_trainer_mr2.py --accumulation-steps 4       # statistics applied once per step
    python examples/hf_trainer_mr2.py --bf16                       # autocast; statistics stay float32
    python examples/hf_trainer_mr2.py --resume out/checkpoint-200  # continue, statistics included
    python examples/hf_trainer_mr2.py --tiny                       # seconds: the test suite's run

The classifier is any ``nn.Module`` returning logits (here a small CNN; a transformers
``*ForImageClassification`` model works the same way). ``ClassifierForTrainer`` adds the pooled
features (the input of the final linear layer) to its outputs and holds the MR2 loss, so the class
statistics are saved in every ``checkpoint-*/model.safetensors`` and restored on resume. Evaluation
metrics (``eval/class_accuracy/<name>``, ``eval/worst_class_accuracy``, ...) go to TensorBoard under
``--out/runs``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from mr2 import MR2Loss
from mr2.data.fashion_mnist import load_fashion_mnist
from mr2.integrations.transformers import (
    ClassifierForTrainer,
    DisparityMetrics,
    MR2ComputeLoss,
    MR2StatisticsCallback,
)

MEAN, STD = 0.2860, 0.3530


class Images(torch.utils.data.Dataset):
    """Fashion-MNIST as the ``{"pixel_values", "labels"}`` items the Trainer's collator stacks."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = (images.float() / 255 - MEAN) / STD
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.images[index], "labels": self.labels[index]}


def small_cnn(num_classes: int, width: int) -> nn.Module:
    """A plain classifier returning logits; its last Linear's input is MR2's feature vector."""
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * 49, 4 * width), nn.ReLU(),
        nn.Linear(4 * width, num_classes),
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps (300; --tiny: 8)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="samples per optimiser step and device (128; --tiny: 64)")
    parser.add_argument("--accumulation-steps", type=int, default=1)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--resume", default=None, help="a checkpoint-* directory of --out")
    parser.add_argument("--out", type=Path, default=Path("hf_trainer_mr2_out"))
    parser.add_argument("--tiny", action="store_true", help="512 training images, a tiny model")
    args = parser.parse_args(argv)
    args.steps = args.steps or (8 if args.tiny else 300)
    args.batch_size = args.batch_size or (64 if args.tiny else 128)
    if args.batch_size % args.accumulation_steps:
        parser.error("--batch-size must be a multiple of --accumulation-steps")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    data = load_fashion_mnist(args.data_root)
    x_train, y_train, x_test, y_test = data.x_train, data.y_train, data.x_test, data.y_test
    if args.tiny:
        x_train, y_train, x_test, y_test = x_train[:512], y_train[:512], x_test[:256], y_test[:256]
    num_classes = len(data.class_names)
    torch.manual_seed(0)
    width = 4 if args.tiny else 16
    model = ClassifierForTrainer(
        small_cnn(num_classes, width), MR2Loss(num_classes, feature_dim=4 * width)
    )
    every = max(1, min(100, args.steps // 2))
    training_args = TrainingArguments(
        output_dir=str(args.out),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size // args.accumulation_steps,
        gradient_accumulation_steps=args.accumulation_steps,
        per_device_eval_batch_size=1000,
        learning_rate=args.lr,
        optim="sgd",
        lr_scheduler_type="constant",
        bf16=args.bf16,
        use_cpu=True,
        eval_strategy="steps",
        eval_steps=every,
        save_strategy="steps",
        save_steps=every,
        logging_steps=every,
        report_to=["tensorboard"],
        disable_tqdm=args.tiny,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=Images(x_train, y_train),
        eval_dataset=Images(x_test, y_test),
        compute_loss_func=MR2ComputeLoss(model.criterion),
        compute_metrics=DisparityMetrics(num_classes, data.class_names),
        callbacks=[MR2StatisticsCallback(model.criterion)],
    )
    # The features are needed for the loss, not for the metrics: not gathered over the eval set.
    trainer.train(resume_from_checkpoint=args.resume, ignore_keys_for_eval=["features"])
    metrics = trainer.evaluate(ignore_keys=["features"])
    print({k: round(v, 4) for k, v in metrics.items() if "class_accuracy/" not in k})
    return {"metrics": metrics, "statistics": model.criterion.statistics.state_dict()}


if __name__ == "__main__":
    main()
