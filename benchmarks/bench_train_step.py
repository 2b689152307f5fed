"""Training-step cost of MR2 versus plain cross-entropy, and model throughput on this machine.

Measures, side by side in one run (interleaved repeats, medians):
  1. ResNet-32 on a CIFAR-shaped batch (128 x 3 x 32 x 32, K = 100): one SGD step with
     cross-entropy versus one with the MR2 loss (paper defaults, statistics update included).
     Target: MR2 adds at most 5%.
  2. Training samples/second of the Fashion-MNIST small CNN and of ResNet-32 at batch 128.

Usage:
    python benchmarks/bench_train_step.py [--repeats N] [--threads T] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from mr2 import MR2Loss
from mr2.config import ModelSection
from mr2.models.registry import build_model


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def make_step(model: torch.nn.Module, loss: Callable[..., torch.Tensor], x: torch.Tensor,
              y: torch.Tensor) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        logits, features = model(x)
        value = loss(logits, features, y)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()

    return step


def time_interleaved(steps: dict[str, Callable[[], None]], repeats: int, inner: int) -> dict[str, float]:
    """Median seconds per step of each callable, alternating between them every repeat."""
    for step in steps.values():  # warm-up
        step()
        step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(inner):
                step()
            samples[name].append((time.perf_counter() - start) / inner)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats, inner, batch = (2, 1, 8) if args.quick else (args.repeats, 3, 128)
    torch.manual_seed(0)
    print(f"command: python {' '.join(sys.argv)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {_cpu_model()}")

    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 100, (batch,))
    ce_model = build_model(ModelSection(name="resnet32"), 100, (3, 32, 32))
    mr2_model = build_model(ModelSection(name="resnet32"), 100, (3, 32, 32))
    mr2_model.load_state_dict(ce_model.state_dict())
    mr2_loss = MR2Loss(100)
    times = time_interleaved(
        {
            "cross-entropy": make_step(ce_model, lambda z, f, t: F.cross_entropy(z, t), x, y),
            "mr2": make_step(mr2_model, mr2_loss, x, y),
        },
        repeats,
        inner,
    )
    overhead = times["mr2"] / times["cross-entropy"] - 1.0
    print(f"\nResNet-32 step, batch {batch} x 3 x 32 x 32, K = 100 (median of {repeats} x {inner} steps)")
    print("| loss | ms / step | samples / s |")
    print("| --- | ---: | ---: |")
    for name, seconds in times.items():
        print(f"| {name} | {1e3 * seconds:.1f} | {batch / seconds:.0f} |")
    print(f"MR2 overhead: {100 * overhead:+.1f}% (target: at most +5%)")

    cnn = build_model(ModelSection(name="small_cnn"), 10, (1, 28, 28))
    xf = torch.randn(batch, 1, 28, 28)
    yf = torch.randint(0, 10, (batch,))
    throughput = time_interleaved(
        {"small_cnn (Fashion-MNIST)": make_step(cnn, lambda z, f, t: F.cross_entropy(z, t), xf, yf)},
        repeats,
        inner,
    )
    print(f"\nTraining throughput, batch {batch}, cross-entropy")
    print("| model | input | samples / s |")
    print("| --- | --- | ---: |")
    print(f"| small_cnn | 1 x 28 x 28 | {batch / throughput['small_cnn (Fashion-MNIST)']:.0f} |")
    print(f"| resnet32 | 3 x 32 x 32 | {batch / times['cross-entropy']:.0f} |")
    return {"overhead": overhead, **times}


if __name__ == "__main__":
    main()
