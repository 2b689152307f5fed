"""MR2 in a plain PyTorch training loop on Fashion-MNIST, with gradient accumulation and bf16 autocast.

    python examples/plain_loop_mr2.py                          # 300 steps of 128 on CPU
    python examples/plain_loop_mr2.py --accumulation-steps 4   # 4 micro-batches of 32 per step
    python examples/plain_loop_mr2.py --bf16                   # forward under CPU autocast (bf16)
    python examples/plain_loop_mr2.py --tiny                   # seconds: the test suite's run

With ``--accumulation-steps k`` the class statistics add up the k micro-batches and apply them once
per optimiser step (``criterion.statistics.accumulate()``), so they follow the schedule of the
batch of 128; ``--per-micro-batch-statistics`` keeps the default (one moving-average step per
micro-batch). The statistics stay float32 under autocast. The checkpoint written at the end holds
the model, the optimiser and the loss's class statistics.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

import torch

from mr2 import MR2Loss
from mr2.data.fashion_mnist import load_fashion_mnist
from mr2.metrics import ClasswiseDisparity
from mr2.models import SmallCNN

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training pixel statistics


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=None, help="Fashion-MNIST files (default: system copy)")
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps (300; --tiny: 8)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="samples per optimiser step (128; --tiny: 64)")
    parser.add_argument("--accumulation-steps", type=int, default=1, help="micro-batches per step")
    parser.add_argument("--per-micro-batch-statistics", action="store_true",
                        help="with accumulation: update the statistics every micro-batch (the default of "
                             "MR2Loss) instead of once per optimiser step")
    parser.add_argument("--bf16", action="store_true", help="forward pass under torch.autocast (bf16)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--out", type=Path, default=Path("plain_loop_mr2_out"))
    parser.add_argument("--tiny", action="store_true", help="512 training images, a tiny model")
    args = parser.parse_args(argv)
    args.steps = args.steps or (8 if args.tiny else 300)
    args.batch_size = args.batch_size or (64 if args.tiny else 128)
    if args.batch_size % args.accumulation_steps:
        parser.error("--batch-size must be a multiple of --accumulation-steps")
    return args


def load_data(root: str | None, tiny: bool) -> tuple[torch.Tensor, ...]:
    data = load_fashion_mnist(root)
    x_train, y_train, x_test, y_test = data.x_train, data.y_train, data.x_test, data.y_test
    if tiny:
        x_train, y_train, x_test, y_test = x_train[:512], y_train[:512], x_test[:256], y_test[:256]
    def scale(x: torch.Tensor) -> torch.Tensor:
        return (x.float() / 255 - MEAN) / STD
    return scale(x_train), y_train, scale(x_test), y_test, data.class_names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.manual_seed(0)
    x_train, y_train, x_test, y_test, class_names = load_data(args.data_root, args.tiny)
    num_classes = len(class_names)
    model = SmallCNN(num_classes, channels=(8, 16, 16), hidden_dim=32) if args.tiny else SmallCNN(num_classes)
    criterion = MR2Loss(num_classes, feature_dim=model.feature_dim)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    micro_size = args.batch_size // args.accumulation_steps
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(y_train), generator=generator)
    position = 0

    def next_micro_batch() -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal order, position
        if position + micro_size > len(order):
            order, position = torch.randperm(len(y_train), generator=generator), 0
        index = order[position:position + micro_size]
        position += micro_size
        return x_train[index], y_train[index]

    defer = args.accumulation_steps > 1 and not args.per_micro_batch_statistics
    model.train()
    criterion.train()
    for step in range(args.steps):
        accumulate = criterion.statistics.accumulate() if defer else contextlib.nullcontext()
        with accumulate:  # the statistics' one update of this optimiser step happens on exit
            for _ in range(args.accumulation_steps):
                images, target = next_micro_batch()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                    logits, features = model(images)
                # The loss in float32; the statistics are float32 whatever the features' dtype.
                loss = criterion(logits.float(), features, target) / args.accumulation_steps
                loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 50 == 0 or step == args.steps - 1:
            parts = criterion.parts
            assert parts is not None
            low, high = parts.logit_margins.min().item(), parts.logit_margins.max().item()
            print(f"step {step:4d}  loss {parts.total.item():.4f}  temperatures {low:.3f}..{high:.3f}")

    model.eval()
    criterion.eval()
    metric = ClasswiseDisparity(num_classes, class_names=class_names)
    with torch.no_grad():
        for images, target in zip(x_test.split(1000), y_test.split(1000), strict=True):
            metric.update(model(images), target)  # (logits, features) is accepted as is
    report = metric.compute()
    summary = metric.to_log_dict("test/")
    print({name: round(value, 4) for name, value in summary.items() if "class_accuracy/" not in name})
    print(f"worst class: {class_names[report.worst_class()]}")

    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "criterion": criterion.state_dict(), "step": args.steps}
    torch.save(checkpoint, args.out / "checkpoint.pt")
    return {"summary": summary, "statistics": criterion.statistics.state_dict(),
            "checkpoint": args.out / "checkpoint.pt"}


if __name__ == "__main__":
    main()
