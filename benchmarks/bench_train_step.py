"""Training-step cost of MR2 versus plain cross-entropy, and model throughput on this machine.

Measures, side by side in one run (interleaved repeats, medians):
  1. ResNet-32 on a CIFAR-shaped batch (128 x 3 x 32 x 32, K = 100): one SGD step with
     cross-entropy versus one with the MR2 loss at its default (``MR2Loss(100)``: distance temperature
     T = d since issue 39; statistics update and collapse guard included) and one with the paper's
     formula (``MR2Loss.from_variant("paper", 100)``, T = 1, the default before). Target: MR2 adds at
     most 5%.
  2. Training samples/second of the Fashion-MNIST small CNN and of ResNet-32 at batch 128.

  3. With ``--device cuda``: the same comparison on the GPU, plus ResNet-32 at 32 px (K = 100) and
     ResNet-50 at 224 px (K = 1000) with AMP bfloat16 and channels-last, MR2 against cross-entropy
     (synchronised timing).

Usage:
    python benchmarks/bench_train_step.py [--repeats N] [--threads T] [--quick] [--device cuda]
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
              y: torch.Tensor, amp_dtype: torch.dtype | None = None) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    device_type = x.device.type

    def step() -> None:
        with torch.autocast(device_type=device_type, dtype=amp_dtype or torch.float32,
                            enabled=amp_dtype is not None):
            logits, features = model(x)
            value = loss(logits, features, y)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        if device_type == "cuda":
            torch.cuda.synchronize()

    return step


def gpu_models(device: torch.device, repeats: int, quick: bool) -> None:
    """ResNet-32 (32 px) and ResNet-50 (224 px), AMP bf16 + channels-last, MR2 vs cross-entropy."""
    cases = [("resnet32", 100, (3, 32, 32), 8 if quick else 256),
             ("resnet50", 1000, (3, 224, 224), 4 if quick else 128)]
    print("\nGPU, AMP bfloat16, channels-last (median ms per step)")
    print("| model | batch | K | cross-entropy ms | mr2 ms | mr2 overhead | images/s (mr2) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, k, shape, batch in cases:
        x = torch.randn(batch, *shape, device=device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, k, (batch,), device=device)
        channels_last = torch.channels_last
        ce_model = build_model(ModelSection(name=name), k, shape).to(device, memory_format=channels_last)
        mr2_model = build_model(ModelSection(name=name), k, shape).to(device, memory_format=channels_last)
        mr2_model.load_state_dict(ce_model.state_dict())
        times = time_interleaved(
            {
                "cross-entropy": make_step(ce_model, lambda z, f, t: F.cross_entropy(z, t), x, y,
                                           torch.bfloat16),
                "mr2": make_step(mr2_model, MR2Loss(k).to(device), x, y, torch.bfloat16),
            },
            repeats,
            1 if quick else 3,
        )
        print(f"| {name} | {batch} | {k} | {1e3 * times['cross-entropy']:.2f} | {1e3 * times['mr2']:.2f} | "
              f"{100 * (times['mr2'] / times['cross-entropy'] - 1):+.1f}% | {batch / times['mr2']:.0f} |")


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
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats, inner, batch = (2, 1, 8) if args.quick else (args.repeats, 3, 128)
    torch.manual_seed(0)
    print(f"command: python {' '.join(sys.argv)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {_cpu_model()}")

    if device.type == "cuda":
        print(f"device: {torch.cuda.get_device_name(device)}")
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 100, (batch,), device=device)
    ce_model = build_model(ModelSection(name="resnet32"), 100, (3, 32, 32)).to(device)
    mr2_model = build_model(ModelSection(name="resnet32"), 100, (3, 32, 32)).to(device)
    mr2_model.load_state_dict(ce_model.state_dict())
    paper_model = build_model(ModelSection(name="resnet32"), 100, (3, 32, 32)).to(device)
    paper_model.load_state_dict(ce_model.state_dict())
    mr2_loss = MR2Loss(100).to(device)  # the default: T = d
    paper_loss = MR2Loss.from_variant("paper", 100).to(device)  # the paper's formula: T = 1
    times = time_interleaved(
        {
            "cross-entropy": make_step(ce_model, lambda z, f, t: F.cross_entropy(z, t), x, y),
            "mr2": make_step(mr2_model, mr2_loss, x, y),
            "mr2 paper": make_step(paper_model, paper_loss, x, y),
        },
        repeats,
        inner,
    )
    overhead = times["mr2"] / times["cross-entropy"] - 1.0
    paper_overhead = times["mr2 paper"] / times["cross-entropy"] - 1.0
    print(f"\nResNet-32 step, batch {batch} x 3 x 32 x 32, K = 100 (median of {repeats} x {inner} steps)")
    print("| loss | ms / step | samples / s | / cross-entropy |")
    print("| --- | ---: | ---: | ---: |")
    labels = {"mr2": "mr2 (default, T = d)", "mr2 paper": "mr2 paper (T = 1)"}
    for name, seconds in times.items():
        ratio = seconds / times["cross-entropy"]
        print(f"| {labels.get(name, name)} | {1e3 * seconds:.1f} | {batch / seconds:.0f} | {ratio:.3f} |")
    print(f"MR2 overhead: {100 * overhead:+.1f}% default, {100 * paper_overhead:+.1f}% paper "
          "(target: at most +5%)")

    cnn = build_model(ModelSection(name="small_cnn"), 10, (1, 28, 28)).to(device)
    xf = torch.randn(batch, 1, 28, 28, device=device)
    yf = torch.randint(0, 10, (batch,), device=device)
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
    if device.type == "cuda":
        gpu_models(device, repeats, args.quick)
    return {"overhead": overhead, "paper_overhead": paper_overhead, **times}


if __name__ == "__main__":
    main()
