"""How far MR2's class statistics under gradient accumulation are from those of the large batch.

    .venv/bin/python benchmarks/accumulation_statistics.py [--steps 100] [--batch 128] [--k 4]

Fixed features (a randomly initialised SmallCNN, seed 0, on the Fashion-MNIST training images in a
seeded order), so only the statistics' schedule differs between the runs: ``--steps`` optimiser
steps of ``--batch`` samples, each split into ``--k`` micro-batches. Prints the largest relative
difference from the large-batch statistics (second moments a_k, spreads s_k, temperatures gamma_k)
for: the default (one moving-average step per micro-batch), the default with momentum
``m^(1/k)`` (the same decay per optimiser step), and accumulate-and-apply
(``statistics.accumulate()``). No timing: the numbers are deterministic for given arguments.
"""

from __future__ import annotations

import argparse
import contextlib

import torch

from mr2 import MR2Loss
from mr2.data.fashion_mnist import load_fashion_mnist
from mr2.models import SmallCNN


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--momentum", type=float, default=0.9)
    args = parser.parse_args()
    data = load_fashion_mnist()
    torch.manual_seed(0)
    model = SmallCNN(10).eval()
    order = torch.randperm(len(data.y_train), generator=torch.Generator().manual_seed(0))
    index = order[: args.steps * args.batch]
    with torch.no_grad():
        images = (data.x_train[index].float() / 255 - 0.286) / 0.353
        features = torch.cat([model(part)[1] for part in images.split(1000)])
    target = data.y_train[index]

    def run(momentum: float, micro: int, defer: bool) -> MR2Loss:
        loss = MR2Loss(10, feature_dim=features.shape[1], momentum=momentum, lambda_rep=0.0)
        for step in range(args.steps):
            rows = slice(step * args.batch, (step + 1) * args.batch)
            block = loss.statistics.accumulate() if defer else contextlib.nullcontext()
            with block:
                for x, y in zip(features[rows].chunk(micro), target[rows].chunk(micro), strict=True):
                    loss.statistics.update(x, y)
        return loss

    def gap(got: torch.Tensor, expected: torch.Tensor) -> float:
        return float(((got.double() - expected.double()).abs() / expected.double().abs()).max())

    large = run(args.momentum, 1, False)
    print(f"{args.steps} steps of {args.batch}, k = {args.k}, m = {args.momentum}: largest relative "
          "difference from the large batch")
    print(f"{'run':<36} {'a_k':>10} {'s_k':>10} {'gamma_k':>10}")
    runs = {
        f"default (m = {args.momentum} per micro-batch)": run(args.momentum, args.k, False),
        f"default, m = {args.momentum}^(1/k) = {args.momentum ** (1 / args.k):.4f}":
            run(args.momentum ** (1 / args.k), args.k, False),
        "accumulate-and-apply": run(args.momentum, args.k, True),
    }
    for name, loss in runs.items():
        stats = loss.statistics
        print(f"{name:<36} {gap(stats.second_moment(), large.statistics.second_moment()):10.2e} "
              f"{gap(stats.spread(), large.statistics.spread()):10.2e} "
              f"{gap(loss.logit_temperatures(), large.logit_temperatures()):10.2e}")


if __name__ == "__main__":
    main()
