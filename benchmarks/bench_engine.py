"""Benchmark: mr2's training engine (``train_one_epoch``) against a hand-written training loop.

Same model (the Fashion-MNIST small CNN), the same in-memory batches (random 1 x 28 x 28 images,
K = 10), the same batch size, optimizer (SGD, momentum 0.9) and threads; one epoch of each,
interleaved (engine, loop, engine, loop, ...), for ERM (cross-entropy) and MR2 (paper defaults).
Prints images/s (median and best of the repeats) and the ratio engine / loop (target: within 5%).

The hand-written loop is the minimal loop a user would write: forward, loss, zero_grad, backward,
step. The engine additionally accumulates the loss and the accuracy on the device, calls the
method's hooks and reads the totals once at the end of the epoch.

Usage::

    PYTHONPATH=src python benchmarks/bench_engine.py --threads 1          # about a minute
    PYTHONPATH=src python benchmarks/bench_engine.py --threads 2 --repeats 7
    PYTHONPATH=src python benchmarks/bench_engine.py --device cuda
    PYTHONPATH=src python benchmarks/bench_engine.py --quick              # smoke test
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mr2 import MR2Loss
from mr2.config import ModelSection
from mr2.engine.loop import StepSetup, train_one_epoch
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.erm import ERM
from mr2.methods.mr2 import MR2Method
from mr2.models.registry import build_model

NUM_CLASSES = 10
INPUT_SHAPE = (1, 28, 28)

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def make_batches(num_batches: int, batch: int, device: torch.device, seed: int = 0) -> list[Batch]:
    """In-memory batches ``(inputs, target, index)`` as the engine's loaders yield them."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(num_batches):
        x = torch.randn(batch, *INPUT_SHAPE, generator=g).to(device)
        y = torch.randint(0, NUM_CLASSES, (batch,), generator=g).to(device)
        out.append((x, y, torch.arange(b * batch, (b + 1) * batch, device=device)))
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hand_written_epoch(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    batches: Sequence[Batch],
    optimizer: torch.optim.Optimizer,
) -> None:
    model.train()
    for x, y, _ in batches:
        logits, features = model(x)
        loss = loss_fn(logits, features, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def _method(name: str, feature_dim: int, device: torch.device, num_samples: int) -> TrainingMethod:
    method: TrainingMethod = ERM(NUM_CLASSES) if name == "erm" else MR2Method(NUM_CLASSES)
    method.setup(
        MethodContext(
            num_classes=NUM_CLASSES,
            num_train_samples=num_samples,
            class_counts=torch.full((NUM_CLASSES,), num_samples // NUM_CLASSES),
            feature_dim=feature_dim,
            device=device,
            epochs=1,
        )
    )
    return method.to(device)


def compare(
    name: str, batches: Sequence[Batch], repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Images/s of every epoch of the engine and of the hand-written loop, interleaved."""
    torch.manual_seed(0)
    base = build_model(ModelSection(name="small_cnn"), NUM_CLASSES, INPUT_SHAPE).to(device)
    engine_model, loop_model = copy.deepcopy(base), copy.deepcopy(base)
    feature_dim = int(base(batches[0][0][:2])[1].shape[1])
    num_samples = sum(int(b[1].shape[0]) for b in batches)
    method = _method(name, feature_dim, device, num_samples)
    loop_loss: Callable[..., torch.Tensor] = (
        (lambda z, f, t: F.cross_entropy(z, t)) if name == "erm" else MR2Loss(NUM_CLASSES).to(device)
    )
    engine_opt = torch.optim.SGD(engine_model.parameters(), lr=0.01, momentum=0.9)
    loop_opt = torch.optim.SGD(loop_model.parameters(), lr=0.01, momentum=0.9)
    setup = StepSetup(device=device, log_every=10**9)
    rates: dict[str, list[float]] = {"engine": [], "loop": []}
    for r in range(repeats + 1):  # the first round warms up
        for who in ("engine", "loop") if r % 2 == 0 else ("loop", "engine"):
            _sync(device)
            start = time.perf_counter()
            if who == "engine":
                train_one_epoch(engine_model, method, batches, engine_opt, None, setup)
            else:
                hand_written_epoch(loop_model, loop_loss, batches, loop_opt)
            _sync(device)
            if r:
                rates[who].append(num_samples / (time.perf_counter() - start))
    return rates


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7, help="timed epochs of each (after one warm-up)")
    parser.add_argument("--batches", type=int, default=16, help="batches per epoch")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    repeats, num_batches, batch = (1, 2, 16) if args.quick else (args.repeats, args.batches, args.batch_size)
    print(f"command: python {' '.join(sys.argv)}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {platform.processor() or 'cpu'}, "
          f"device {device}, load average {os.getloadavg()[0]:.2f}")
    batches = make_batches(num_batches, batch, device)
    print(f"small_cnn, batch {batch}, {num_batches} batches per epoch, SGD momentum 0.9, "
          f"{repeats} timed epochs each (interleaved, after a warm-up round)\n")
    print("| method | engine images/s (median / best) | hand-written loop images/s (median / best) "
          "| engine / loop (median) | engine / loop (best) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in ("erm", "mr2"):
        rates = compare(name, batches, repeats, device)
        e, lp = rates["engine"], rates["loop"]
        med_e, med_l = statistics.median(e), statistics.median(lp)
        print(f"| {name} | {med_e:.0f} / {max(e):.0f} | {med_l:.0f} / {max(lp):.0f} "
              f"| {med_e / med_l:.3f} | {max(e) / max(lp):.3f} |")
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
