"""Benchmark: the vectorised MR2 loss versus a per-class Python loop (released-code style).

Times ONE training step of the loss: statistics update + forward + backward (gradients with respect
to both the logits and the features), on CPU, for these implementations measured side by side in one
run (interleaved repeats, the implementations in a random order per repeat, seeded):

- ``loop``: the per-class loop baseline (released-code style), defined in this file. It follows the
  arithmetic and the structure of the released research code (BeierZhu/MR2,
  ``MRF-Imagenet/src/mrf_loss.py``): a Python loop over ALL K classes for the moving averages of the
  per-class scalars, and a second loop over the classes for the pairwise representation term.
- ``mr2 released``: ``ReleasedMR2Loss.from_variant("released", K)``, the same arithmetic, vectorised. Its
  loss is checked against the loop before timing, so the two columns time equal computations.
- ``mr2 paper``: ``MR2Loss.from_variant("paper", K)``, the paper's formula (distance temperature T = 1).
- ``mr2 default``: ``MR2Loss(K)``, the default the README tells users to use (T = d; the same work as
  the paper's form, other values: with T = 1 more pair weights underflow).
- ``floor``: what any loss of this kind costs at least: cross-entropy forward + backward on the same
  logits plus ONE scatter (``index_add_``) of the features into a [K, d] buffer.
- ``floor + pairs``: the floor plus the formula's own work, the squared distances of the same-class
  pairs forward and backward: with many pairs (more unordered pairs than samples: few classes) each
  class of the batch (>= 2 samples) as its own [n_k, d] block and its [n_k, n_k] Gram matrix
  (``sum_k n_k^2 d`` multiply-adds each way; a Python loop over the batch's classes); with few pairs
  (many classes) each unordered pair's difference gathered from the upper triangle of the [B, B]
  same-class mask (``pairs * d`` each way, no loop).

Every loss is first primed with batches that hold every class (:func:`prime`), so the timed steps
are the steady state of training (every class seen), not the warm-up of the first epoch.

It also prints a breakdown of the default's step by the profiler labels of ``MR2Loss.forward``
(statistics update, temperatures, logit loss, representation margin) plus the backward, read from
``torch.profiler``, and with ``--sweep`` the cost growth over K in {10, 100, 1000, 10000} x
d in {2048, 768} at B = 512: time per step and peak memory of the loss, each case in a fresh
subprocess (peak memory = growth of the peak resident set size, VmHWM after resetting it through
/proc/self/clear_refs, over the memory held before the loss's first step; on CUDA
``torch.cuda.max_memory_allocated`` over the memory allocated before).

Usage::

    PYTHONPATH=src python benchmarks/bench_mr2_loss.py              # full run (a few minutes on 2 cores)
    PYTHONPATH=src python benchmarks/bench_mr2_loss.py --without-loop --sizes 512x10x2048   # no loop baseline
    PYTHONPATH=src python benchmarks/bench_mr2_loss.py --quick      # one repeat per case (smoke test)
    PYTHONPATH=src python benchmarks/bench_mr2_loss.py --threads 1 --sizes 128x100x640
    PYTHONPATH=src python benchmarks/bench_mr2_loss.py --threads 2 --sweep     # + K sweep with memory
    PYTHONPATH=src python benchmarks/bench_mr2_loss.py --threads 2 --profile   # + top ops of the step
    PYTHONPATH=src python benchmarks/bench_mr2_loss.py --device cuda --sweep   # on a GPU

This is a benchmark, not a test: it asserts nothing about time. ``tests/benchmarks`` runs its quick
mode at a tiny size and checks that the loop and the released variant compute the same loss.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mr2.losses import PROFILER_LABELS, MR2Loss, ReleasedMR2Loss
from mr2.statistics import _fused_cpu

__all__ = [
    "DEFAULT_SIZES",
    "BenchResult",
    "PerClassLoopMR2Loss",
    "Size",
    "equivalence_check",
    "main",
    "run",
]

#: Moving-average decay used by every implementation (the paper's CIFAR value; any value times the same).
MOMENTUM = 0.9
LAMBDA_REP = 0.1
#: Lp norm of the released code's statistics.
RELEASED_NORM_P = 5.0
#: Distinct random batches cycled through during timing (same batches for every implementation).
BATCH_POOL = 4


@dataclass(frozen=True)
class Size:
    """One benchmark case: batch size B, number of classes K, feature dimension d."""

    batch: int
    classes: int
    dim: int

    def label(self) -> str:
        return f"B={self.batch} K={self.classes} d={self.dim}"

    @classmethod
    def parse(cls, text: str) -> Size:
        """``"128x100x640"`` -> ``Size(128, 100, 640)``."""
        parts = text.lower().split("x")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"size must look like BxKxd (e.g. 128x100x640); got {text!r}")
        batch, classes, dim = (int(p) for p in parts)
        return cls(batch, classes, dim)


DEFAULT_SIZES = (Size(512, 10, 2048), Size(512, 100, 2048), Size(512, 1000, 2048))
SWEEP_CLASSES = (10, 100, 1000, 10000)
SWEEP_DIMS = (2048, 768)
SWEEP_BATCH = 512
#: The implementations of the sweep (time and peak memory each).
SWEEP_IMPLEMENTATIONS = ("mr2 default", "mr2 paper", "floor", "floor + pairs")


# --------------------------------------------------------------------------------------------------
# per-class loop baseline (released-code style)
# --------------------------------------------------------------------------------------------------
class PerClassLoopMR2Loss(nn.Module):
    """Per-class loop baseline (released-code style). NOT part of mr2; for timing comparisons only.

    Re-implements the arithmetic of the released research code with its structure: a Python loop over
    all K classes that updates per-class scalar moving averages element by element (``||batch mean||_p^2``
    and the mean ``||x - batch mean||_p^2``, p = 5; a class whose average is still 0 is initialised), and a
    Python loop over the classes for the representation term (per class with >= 2 samples: mean over
    its samples of ``log(1 + sum_{j != i} exp((||x_i - x_j||^2 - 2 s_bar) / (10 d)))``; summed over the
    classes, times ``d / 10 / K``; ``s_bar`` is the mean of the spread averages over all K classes).
    Temperatures ``gamma = K a^(1/3) / sum a^(1/3)`` with ``a = ||mu||_p^2 + s``.
    """

    mean_sq_norm_avg: torch.Tensor
    spread_avg: torch.Tensor

    def __init__(self, num_classes: int, *, momentum: float = MOMENTUM, lambda_rep: float = LAMBDA_REP):
        super().__init__()
        self.num_classes = num_classes
        self.momentum = momentum
        self.lambda_rep = lambda_rep
        self.norm_p = RELEASED_NORM_P
        self.register_buffer("mean_sq_norm_avg", torch.zeros(num_classes))
        self.register_buffer("spread_avg", torch.zeros(num_classes))

    @torch.no_grad()
    def update_statistics(self, features: torch.Tensor, target: torch.Tensor) -> None:
        m = self.momentum
        for k in range(self.num_classes):
            members = features[target == k]
            if members.shape[0] == 0:
                continue
            center = members.mean(dim=0)
            mean_sq_norm = center.norm(self.norm_p).pow(2)
            spread = (members - center).norm(self.norm_p, dim=1).pow(2).mean()
            if torch.isnan(self.mean_sq_norm_avg[k]) or self.mean_sq_norm_avg[k] == 0:
                self.mean_sq_norm_avg[k] = mean_sq_norm
                self.spread_avg[k] = spread
            else:
                self.mean_sq_norm_avg[k] = m * self.mean_sq_norm_avg[k] + (1 - m) * mean_sq_norm
                self.spread_avg[k] = m * self.spread_avg[k] + (1 - m) * spread

    def temperatures(self) -> torch.Tensor:
        roots = (self.mean_sq_norm_avg + self.spread_avg).pow(1.0 / 3.0)
        return self.num_classes * roots / roots.sum()

    def forward(self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        self.update_statistics(features, target)
        gamma = self.temperatures()
        logit_term = F.cross_entropy(logits / gamma[target].unsqueeze(1), target)
        s_bar = self.spread_avg.mean()
        dim = features.shape[1]
        rep_term = features.new_zeros(())
        for k in range(self.num_classes):
            members = features[target == k]
            n = members.shape[0]
            if n < 2:
                continue
            sq_dist = (members.unsqueeze(1) - members.unsqueeze(0)).norm(2, dim=2).pow(2)
            self_pair = torch.eye(n, dtype=torch.bool, device=features.device)
            sq_dist = sq_dist.masked_fill(self_pair, 0.0)
            terms = torch.exp((sq_dist - 2 * s_bar) / (10 * dim)).masked_fill(self_pair, 0.0)
            rep_term = rep_term + torch.log1p(terms.sum(dim=1)).mean()
        rep_term = rep_term * dim / 10 / self.num_classes
        return logit_term + self.lambda_rep * rep_term


class FloorLoss(nn.Module):
    """The floor: cross-entropy on the logits plus one scatter of the features into [K, d]."""

    sums: torch.Tensor

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.register_buffer("sums", torch.zeros(num_classes, 0))

    def forward(self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.sums.shape[1] != features.shape[1]:
            self.sums = features.new_zeros(self.num_classes, features.shape[1])
        with torch.no_grad():
            self.sums.index_add_(0, target, features.detach())
        return F.cross_entropy(logits, target)


class FloorPairsLoss(FloorLoss):
    """The floor plus the same-class pairs' squared distances (their sum over the ordered pairs),
    forward and backward: with more unordered pairs than samples each class's [n_k, n_k] Gram matrix
    from its own block of the class-sorted batch (a Python loop over the batch's classes), else each
    unordered pair's gathered difference (from the [B, B] same-class mask's upper triangle)."""

    def forward(self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = super().forward(logits, features, target)
        counts = torch.bincount(target)
        if int((counts * (counts - 1)).sum()) // 2 <= target.shape[0]:
            same = torch.triu(target.unsqueeze(1) == target.unsqueeze(0), diagonal=1)
            first, second = same.nonzero(as_tuple=True)
            diff = features.index_select(0, first) - features.index_select(0, second)
            return loss + 1e-12 * (2.0 * diff.square().sum())
        blocks = features.index_select(0, torch.argsort(target, stable=True)).split(counts.tolist())
        pairs = features.new_zeros(())
        for block in blocks:
            if block.shape[0] >= 2:
                sq = (block * block).sum(dim=1)
                pairs = pairs + (sq.unsqueeze(1) + sq.unsqueeze(0) - 2.0 * (block @ block.T)).sum()
        return loss + 1e-12 * pairs


# --------------------------------------------------------------------------------------------------
# harness
# --------------------------------------------------------------------------------------------------
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

IMPLEMENTATIONS = ("loop", "mr2 released", "mr2 paper", "mr2 default", "floor", "floor + pairs")
DEVICE = torch.device("cpu")


def build_losses(num_classes: int) -> dict[str, nn.Module]:
    """Fresh instances of the implementations, in training mode, on :data:`DEVICE`."""
    losses: dict[str, nn.Module] = {
        "loop": PerClassLoopMR2Loss(num_classes),
        "mr2 released": ReleasedMR2Loss.from_variant(
            "released", num_classes, momentum=MOMENTUM, lambda_rep=LAMBDA_REP
        ),
        "mr2 paper": MR2Loss.from_variant("paper", num_classes, momentum=MOMENTUM, lambda_rep=LAMBDA_REP),
        "mr2 default": MR2Loss(num_classes, momentum=MOMENTUM, lambda_rep=LAMBDA_REP),
        "floor": FloorLoss(num_classes),
        "floor + pairs": FloorPairsLoss(num_classes),
    }
    return {name: loss.to(DEVICE) for name, loss in losses.items()}


def make_batches(size: Size, count: int, seed: int) -> list[Batch]:
    """Random logits/features (leaves requiring grad) and targets uniform over the K classes."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        logits = (2.0 * torch.randn(size.batch, size.classes, generator=g)).to(DEVICE).requires_grad_()
        # Non-negative, ReLU-like features.
        features = torch.randn(size.batch, size.dim, generator=g).relu_().to(DEVICE).requires_grad_()
        target = torch.randint(0, size.classes, (size.batch,), generator=g).to(DEVICE)
        batches.append((logits, features, target))
    return batches


def priming_batches(size: Size, seed: int) -> list[Batch]:
    """Batches of the timed size whose targets cover the K classes in order (``ceil(K / B)`` of them),
    with random logits and features: what every loss sees before its timed steps (:func:`prime`)."""
    g = torch.Generator().manual_seed(seed + 7919)
    batches = []
    for start in range(0, size.classes, size.batch):
        target = torch.arange(start, start + size.batch) % size.classes
        logits = (2.0 * torch.randn(size.batch, size.classes, generator=g)).to(DEVICE).requires_grad_()
        features = torch.randn(size.batch, size.dim, generator=g).relu_().to(DEVICE).requires_grad_()
        batches.append((logits, features, target.to(DEVICE)))
    return batches


def prime(loss_fn: LossFn, size: Size, seed: int) -> None:
    """One training step on each of :func:`priming_batches`: every class seen, as after a training
    epoch, so the timed steps are the steady state of training. Without it the random batches of
    the timing (:data:`BATCH_POOL` of B samples) leave classes unseen at K = 1,000 (about 130): the
    default's step then times the warm-up state, its logit temperatures all 1 and the seen masks of
    a first observation computed every step (issue 47)."""
    for batch in priming_batches(size, seed):
        training_step(loss_fn, batch)


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def training_step(loss_fn: LossFn, batch: Batch) -> torch.Tensor:
    """Statistics update + forward + backward; returns the detached loss."""
    logits, features, target = batch
    loss = loss_fn(logits, features, target)
    torch.autograd.grad(loss, (logits, features), allow_unused=True)
    return loss.detach()


def equivalence_check(size: Size, *, steps: int = 3, seed: int = 1) -> tuple[float, float]:
    """Max relative loss difference between the loop baseline and ``MR2Loss`` "released".

    Both start fresh and are first given one batch that holds every class (so the statistics of all
    K classes exist), then ``steps`` random batches; the first value is the largest relative
    difference over those steps. The second value is the relative difference on a random first batch
    WITHOUT that priming (classes not yet seen), reported for information only.
    """
    g = torch.Generator().manual_seed(seed)
    cover = torch.arange(max(size.batch, size.classes)) % size.classes
    prime = (
        torch.randn(cover.numel(), size.classes, generator=g),
        torch.randn(cover.numel(), size.dim, generator=g).relu_(),
        cover,
    )
    batches = make_batches(size, steps + 1, seed + 1)
    rel = []
    # With gradients enabled (training mode under no_grad is evaluation without .eval(): it warns),
    # and features that need a gradient (so the representation term is computed).
    cold = build_losses(size.classes)
    a = cold["loop"](*batches[0]).detach().item()
    b = cold["mr2 released"](*batches[0]).detach().item()
    cold_rel = abs(a - b) / max(abs(a), 1e-12)
    losses = build_losses(size.classes)
    losses["loop"](*prime)
    losses["mr2 released"](*prime)
    for batch in batches[1:]:
        a = losses["loop"](*batch).detach().item()
        b = losses["mr2 released"](*batch).detach().item()
        rel.append(abs(a - b) / max(abs(a), 1e-12))
    return max(rel), cold_rel


@dataclass
class BenchResult:
    """Timings of one size (milliseconds per training step of the loss)."""

    size: Size
    median_ms: dict[str, float]
    min_ms: dict[str, float]
    repeats: dict[str, int]
    released_rel_diff: float
    cold_rel_diff: float
    faults_per_step: dict[str, float] | None = None

    def ratio(self, name: str, *, best: bool = False) -> float:
        """Speed-up of ``name`` over the loop baseline (loop median / ``name`` median; or of the minima;
        NaN when the loop was not timed)."""
        times = self.min_ms if best else self.median_ms
        return times.get("loop", float("nan")) / times[name]


def plan(size: Size, quick: bool) -> tuple[dict[str, int], dict[str, int]]:
    """(warm-up, repeats) per implementation. The K=1000 loop is slow: it gets fewer repeats."""
    if quick:
        return dict.fromkeys(IMPLEMENTATIONS, 1), dict.fromkeys(IMPLEMENTATIONS, 1)
    slow = size.classes * size.batch >= 100_000
    warmup = {name: 5 for name in IMPLEMENTATIONS} | {"loop": 3}
    repeats = {name: 61 for name in IMPLEMENTATIONS} | {"loop": 21 if slow else 41}
    return warmup, repeats


def time_size(size: Size, *, quick: bool = False, seed: int = 0, loop: bool = True) -> BenchResult:
    """Warm up, then time the implementations round-robin (interleaved repeats), median per one
    (``loop=False``: without the per-class loop baseline)."""
    released_rel, cold_rel = equivalence_check(size)
    warmup, repeats = plan(size, quick)
    losses = build_losses(size.classes)
    if not loop:
        del losses["loop"]
    batches = make_batches(size, BATCH_POOL, seed)
    for name, loss_fn in losses.items():
        prime(loss_fn, size, seed)
        for i in range(warmup[name]):
            training_step(loss_fn, batches[i % BATCH_POOL])
    times: dict[str, list[float]] = {name: [] for name in losses}
    faults: dict[str, int] = dict.fromkeys(losses, 0)
    # A random order per repeat: each implementation follows each other one equally often on average
    # (in one fixed order a step's time depended on the one before it; bench_linear_probe.py).
    shuffler = random.Random(seed)
    names = list(losses)
    for r in range(max(repeats.values())):
        shuffler.shuffle(names)
        for name in names:
            loss_fn = losses[name]
            if r >= repeats[name]:
                continue
            batch = batches[r % BATCH_POOL]
            _sync()
            before = _minor_faults()
            start = time.perf_counter()
            training_step(loss_fn, batch)
            _sync()
            times[name].append(1e3 * (time.perf_counter() - start))
            faults[name] += _minor_faults() - before
    return BenchResult(
        size=size,
        median_ms={name: statistics.median(values) for name, values in times.items()},
        min_ms={name: min(values) for name, values in times.items()},
        repeats={name: len(values) for name, values in times.items()},
        released_rel_diff=released_rel,
        cold_rel_diff=cold_rel,
        faults_per_step={name: faults[name] / len(times[name]) for name in losses},
    )


def _minor_faults() -> int:
    """Minor page faults of this process so far (fresh memory touched: on this kind of machine a
    fresh 4 MB buffer costs about 1,000 of them)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run(
    sizes: Sequence[Size] = DEFAULT_SIZES,
    *,
    quick: bool = False,
    threads: int | None = None,
    seed: int = 0,
    loop: bool = True,
) -> list[BenchResult]:
    """Time every size; ``threads`` sets ``torch.set_num_threads`` (None: leave torch's default)."""
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    return [time_size(size, quick=quick, seed=seed, loop=loop) for size in sizes]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _load() -> str:
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def format_faults(results: Sequence[BenchResult]) -> str:
    """Markdown table of the minor page faults per timed step (memory the allocator had to fetch
    fresh from the kernel: a cost that timings of single kernels do not show)."""
    lines = ["| size | " + " | ".join(f"{name} faults/step" for name in IMPLEMENTATIONS) + " |",
             "| --- |" + " ---: |" * len(IMPLEMENTATIONS)]
    for r in results:
        faults = r.faults_per_step or {}
        lines.append("| " + r.size.label() + " | "
                     + " | ".join(f"{faults.get(name, float('nan')):.0f}" for name in IMPLEMENTATIONS) + " |")
    return "\n".join(lines)


def format_table(results: Sequence[BenchResult], *, best: bool = False) -> str:
    """Markdown table of the medians (or, with ``best``, the minima) and the speed-ups over the loop."""
    stat = "min" if best else "median"
    lines = [
        "| size | " + " | ".join(f"{name} {stat} ms (n)" for name in IMPLEMENTATIONS)
        + " | loop / released | loop / default | default / floor | default / (floor + pairs) "
        "| paper / floor | paper / (floor + pairs) | loss rel. diff loop vs released |",
        "| --- |" + " ---: |" * (len(IMPLEMENTATIONS) + 7),
    ]
    for r in results:
        times = r.min_ms if best else r.median_ms
        cells = [
            r.size.label(),
            *(f"{times[name]:.2f} ({r.repeats[name]})" if name in times else "-" for name in IMPLEMENTATIONS),
            f"{r.ratio('mr2 released', best=best):.1f}x",
            f"{r.ratio('mr2 default', best=best):.1f}x",
            f"{times['mr2 default'] / times['floor']:.2f}x",
            f"{times['mr2 default'] / times['floor + pairs']:.2f}x",
            f"{times['mr2 paper'] / times['floor']:.2f}x",
            f"{times['mr2 paper'] / times['floor + pairs']:.2f}x",
            f"{r.released_rel_diff:.1e}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The parts of the breakdown: the profiler labels of ``MR2Loss.forward``, then the backward and the
#: whole step (labelled by :func:`breakdown`).
BREAKDOWN_PARTS = (*PROFILER_LABELS, "backward", "step")


def breakdown(size: Size, *, repeats: int = 41, seed: int = 0) -> dict[str, tuple[float, float]]:
    """(median, min) ms of each part of the default's training step, over ``repeats`` steps.

    Each step runs under its own ``torch.profiler`` session (CPU activity); the parts are the labels
    :meth:`MR2Loss.forward` records (:data:`mr2.losses.PROFILER_LABELS`) and the backward and the
    whole step, labelled here, read by label from ``key_averages()`` (CPU time of the labelled
    range; on CUDA the host side, the step ending with a synchronisation). The profiler adds its own
    overhead per op, so read the parts as shares of the step.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    loss_fn = MR2Loss(size.classes, momentum=MOMENTUM, lambda_rep=LAMBDA_REP).to(DEVICE)
    batches = make_batches(size, BATCH_POOL, seed)
    prime(loss_fn, size, seed)
    for i in range(5):
        training_step(loss_fn, batches[i % BATCH_POOL])
    samples: dict[str, list[float]] = {name: [] for name in BREAKDOWN_PARTS}
    for r in range(repeats):
        logits, features, target = batches[r % BATCH_POOL]
        with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("step"):
            loss = loss_fn(logits, features, target)
            with record_function("backward"):
                torch.autograd.grad(loss, (logits, features))
            _sync()
        times = {e.key: e.cpu_time_total / 1e3 for e in prof.key_averages() if e.key in samples}
        for name in BREAKDOWN_PARTS:
            samples[name].append(times[name])
    return {name: (statistics.median(col), min(col)) for name, col in samples.items()}


def format_breakdown(size: Size, parts: dict[str, tuple[float, float]]) -> str:
    lines = [
        f"Breakdown of the default's step, {size.label()} (ms; median / min):",
        "| " + " | ".join(BREAKDOWN_PARTS) + " |",
        "|" + " ---: |" * len(BREAKDOWN_PARTS),
        "| " + " | ".join(f"{parts[p][0]:.2f} / {parts[p][1]:.2f}" for p in BREAKDOWN_PARTS) + " |",
    ]
    return "\n".join(lines)


def profile_ops(
    size: Size, *, steps: int = 20, top: int = 15, seed: int = 0
) -> list[tuple[str, float, float]]:
    """``(op, calls per step, self time per step in ms)`` of the default's training step under
    ``torch.profiler`` (CPU activity), the ``top`` ops by self time, after 10 warm-up steps.

    The profiler adds its own overhead per op, so the times are larger than unprofiled ones; read
    them as shares of the step.
    """
    from torch.profiler import ProfilerActivity, profile

    loss_fn = MR2Loss(size.classes, momentum=MOMENTUM, lambda_rep=LAMBDA_REP).to(DEVICE)
    batches = make_batches(size, BATCH_POOL, seed)
    prime(loss_fn, size, seed)
    for i in range(10):
        training_step(loss_fn, batches[i % BATCH_POOL])
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            training_step(loss_fn, batches[i % BATCH_POOL])
        _sync()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    events.sort(key=lambda e: -e.self_cpu_time_total)
    return [(e.key, e.count / steps, e.self_cpu_time_total / 1e3 / steps) for e in events[:top]]


def format_profile(size: Size, rows: Sequence[tuple[str, float, float]]) -> str:
    lines = [
        f"Profile of the default's step, {size.label()} (torch.profiler, self CPU time per step):",
        "| op | calls / step | self ms / step |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {name} | {calls:.1f} | {ms:.3f} |" for name, calls, ms in rows]
    return "\n".join(lines)


def _proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> int:
    """Reset the peak and return the current memory in bytes (CUDA: allocated; CPU: resident set).

    On CPU, writing 5 to /proc/self/clear_refs resets the resident-set high-water mark (VmHWM,
    Linux >= 4.0), so VmHWM afterwards is the peak of what runs next.
    """
    if DEVICE.type == "cuda":
        torch.cuda.reset_peak_memory_stats(DEVICE)
        return torch.cuda.memory_allocated(DEVICE)
    Path("/proc/self/clear_refs").write_text("5")
    return _proc_status_kib("VmRSS") * 1024


def _peak_bytes() -> int:
    if DEVICE.type == "cuda":
        return torch.cuda.max_memory_allocated(DEVICE)
    return _proc_status_kib("VmHWM") * 1024


def sweep_case(size: Size, *, repeats: int, seed: int = 0) -> dict[str, float]:
    """One sweep case (run in a fresh process): time per step and peak memory of the loss.

    Peak memory: growth of the peak (CPU: resident set, VmHWM after resetting it; CUDA:
    ``max_memory_allocated``) over the memory held before the first step of the loss (the inputs),
    so it counts the loss's state (allocated at its first step) and its temporaries. A warm-up
    instance runs one step first (loading the code paths); on CPU, memory that it freed and the
    allocator kept can be reused without showing in the resident set, so small figures are lower
    bounds.
    """
    batches = make_batches(size, BATCH_POOL, seed)
    out: dict[str, float] = {}
    for name in SWEEP_IMPLEMENTATIONS:
        warm = build_losses(size.classes)[name]  # loads the code paths (their pages count in RSS)
        training_step(warm, batches[0])
        del warm
        loss_fn = build_losses(size.classes)[name]
        _sync()
        before = _reset_peak()
        for i in range(3):
            training_step(loss_fn, batches[i % BATCH_POOL])
        _sync()
        out[f"{name} peak MiB"] = (_peak_bytes() - before) / 2**20
        prime(loss_fn, size, seed)  # the timed steps: every class seen (after the memory reading)
        times = []
        for r in range(repeats):
            _sync()
            start = time.perf_counter()
            training_step(loss_fn, batches[r % BATCH_POOL])
            _sync()
            times.append(1e3 * (time.perf_counter() - start))
        out[f"{name} median ms"] = statistics.median(times)
        out[f"{name} min ms"] = min(times)
        if name == "mr2 default":
            out["state MiB"] = sum(b.numel() * b.element_size() for b in loss_fn.buffers()) / 2**20
        del loss_fn
    return out


def run_sweep(threads: int | None, repeats: int, quick: bool) -> list[tuple[Size, dict[str, float]]]:
    """Every sweep case in its own subprocess (a clean peak-memory reading per case)."""
    classes, dims = ((10, 100), (64,)) if quick else (SWEEP_CLASSES, SWEEP_DIMS)
    batch = 32 if quick else SWEEP_BATCH
    results = []
    for dim in dims:
        for k in classes:
            size = Size(batch, k, dim)
            command = [
                sys.executable, str(Path(__file__).resolve()), "--sweep-case", f"{batch}x{k}x{dim}",
                "--device", DEVICE.type, "--repeats", str(repeats),
            ]
            if threads is not None:
                command += ["--threads", str(threads)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            results.append((size, json.loads(done.stdout.strip().splitlines()[-1])))
    return results


def format_sweep(results: Sequence[tuple[Size, dict[str, float]]]) -> str:
    lines = [
        "| B | K | d | " + " | ".join(f"{name} ms (median / min)" for name in SWEEP_IMPLEMENTATIONS)
        + " | default / floor | default / (floor + pairs) | paper / floor "
        "| peak memory of mr2 default, MiB | its state ([K, d] + [K] buffers), MiB "
        "| peak of the floor, MiB |",
        "| ---: | ---: | ---: |" + " ---: |" * (len(SWEEP_IMPLEMENTATIONS) + 6),
    ]
    for size, r in results:
        times = " | ".join(
            f"{r[name + ' median ms']:.2f} / {r[name + ' min ms']:.2f}" for name in SWEEP_IMPLEMENTATIONS
        )
        lines.append(
            f"| {size.batch} | {size.classes} | {size.dim} | {times} | "
            f"{r['mr2 default median ms'] / r['floor median ms']:.2f}x | "
            f"{r['mr2 default median ms'] / r['floor + pairs median ms']:.2f}x | "
            f"{r['mr2 paper median ms'] / r['floor median ms']:.2f}x | {r['mr2 default peak MiB']:.1f} | "
            f"{r['state MiB']:.1f} | {r['floor peak MiB']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="one warm-up and one repeat per case")
    parser.add_argument(
        "--sizes", type=Size.parse, nargs="+", default=list(DEFAULT_SIZES), help="BxKxd, e.g. 128x100x640"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--sweep", action="store_true", help="also the K x d sweep with peak memory")
    parser.add_argument("--no-loop", action="store_true", help="skip the side-by-side table")
    parser.add_argument(
        "--without-loop", action="store_true", help="the side-by-side table without the loop baseline"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also the default's top ops by self time (torch.profiler)"
    )
    parser.add_argument("--repeats", type=int, default=21, help="repeats per sweep case")
    parser.add_argument("--sweep-case", type=Size.parse, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    DEVICE = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.sweep_case is not None:
        print(json.dumps(sweep_case(args.sweep_case, repeats=args.repeats, seed=args.seed)))
        return 0
    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    print(f"command: {command}")
    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, CPU: {cpu_model()}")
    if DEVICE.type == "cuda":
        print(f"device: {torch.cuda.get_device_name(DEVICE)}")
    print(f"python {platform.python_version()}, seed {args.seed}, quick {args.quick}")
    print(f"load average at start (1, 5, 15 min): {_load()}")
    compiled = "yes" if _fused_cpu.available() else "no (pip install mr2[fast])"
    print(f"MR2Loss's compiled steady step (numba, docs/mr2.md \"The fused CPU step\"): {compiled}")
    print("timed: statistics update + forward + backward (grad w.r.t. logits and features), "
          f"{DEVICE.type} float32")
    start = time.perf_counter()
    if not args.no_loop:
        results = run(args.sizes, quick=args.quick, seed=args.seed, loop=not args.without_loop)
        print()
        print("Median per step (speed-up = loop median / mr2 median):")
        print(format_table(results))
        print()
        print("Best of n per step (less sensitive to other load on a shared machine):")
        print(format_table(results, best=True))
        print()
        print("Minor page faults per timed step (fresh memory from the kernel):")
        print(format_faults(results))
        print()
        for r in results:
            print(
                f"{r.size.label()}: loop vs mr2 released, first batch with unseen classes (no priming): "
                f"loss rel. diff {r.cold_rel_diff:.1e}"
            )
        print()
        for size in args.sizes:
            print(format_breakdown(size, breakdown(size, repeats=3 if args.quick else 41, seed=args.seed)))
            print()
    if args.profile:
        for size in args.sizes:
            print(format_profile(size, profile_ops(size, steps=2 if args.quick else 20)))
            print()
    if args.sweep:
        print(f"K sweep (each case in a fresh process, {args.repeats} repeats; peak memory: "
              + ("torch.cuda.max_memory_allocated" if DEVICE.type == "cuda" else "VmHWM after a reset")
              + " over the memory held before the loss's first step, over 3 steps):")
        print(format_sweep(run_sweep(args.threads, 2 if args.quick else args.repeats, args.quick)))
        print()
    print(f"load average at end (1, 5, 15 min): {_load()}")
    print(f"total wall time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
