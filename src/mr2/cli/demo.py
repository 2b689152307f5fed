"""``mr2 demo``: a short, real MR2-versus-cross-entropy comparison.

Until the training engine lands this trains a small MLP on a synthetic data set whose classes differ
in spread (Gaussian classes, class k with standard deviation growing with k), once with plain
cross-entropy and once with MR2, and prints per-class test accuracy.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from mr2 import MR2Loss


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--epochs", type=int, default=30, help="training epochs (default 30)")


def _synthetic(seed: int, split: int, num_classes: int = 8, dim: int = 16, per_class: int = 300):
    centers = torch.randn(num_classes, dim, generator=torch.Generator().manual_seed(seed)) * 1.5
    g = torch.Generator().manual_seed(seed * 1000 + split + 1)
    spread = torch.linspace(0.6, 2.4, num_classes)
    target = torch.arange(num_classes).repeat_interleave(per_class)
    x = centers[target] + torch.randn(len(target), dim, generator=g) * spread[target, None]
    order = torch.randperm(len(target), generator=g)
    return x[order], target[order]


class _MLP(nn.Module):
    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(x)
        return self.classifier(features), features


def _train(method: str, seed: int, epochs: int) -> torch.Tensor:
    x_train, y_train = _synthetic(seed, split=0)
    x_test, y_test = _synthetic(seed, split=1)
    torch.manual_seed(seed)
    model = _MLP(x_train.shape[1], 8)
    mr2_loss = MR2Loss(8) if method == "mr2" else None
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    for _ in range(epochs):
        for start in range(0, len(x_train), 64):
            logits, features = model(x_train[start : start + 64])
            target = y_train[start : start + 64]
            if mr2_loss is None:
                loss = F.cross_entropy(logits, target)
            else:
                loss = mr2_loss(logits, features, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        pred = model(x_test)[0].argmax(1)
    correct = torch.zeros(8).index_add_(0, y_test, (pred == y_test).float())
    return correct / torch.bincount(y_test, minlength=8).float()


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    results = {}
    for method in ("ce", "mr2"):
        print(f"training {method} on the synthetic spread data set ({args.epochs} epochs)...")
        results[method] = _train(method, args.seed, args.epochs)
    print("\nper-class test accuracy (classes ordered by spread, narrowest first)")
    print("class " + " ".join(f"{k:>6d}" for k in range(8)) + "   overall   worst")
    for method, acc in results.items():
        cells = " ".join(f"{100 * a:6.1f}" for a in acc.tolist())
        print(f"{method:<5} {cells}   {100 * acc.mean():7.2f}  {100 * acc.min():6.2f}")
    print(f"\ndone in {time.perf_counter() - start:.1f} s")
    return 0
