"""Benchmark: a linear-probe training step with MR2 against the same step with cross-entropy.

A linear probe (``regime: linear_probe``) trains a linear head on cached, frozen features: the features
are the head's input and need no gradient, so :class:`mr2.MR2Loss` leaves its representation term out
of the training step (docs/mr2.md, "Linear probe"). One step: the head's forward, the loss (MR2: the
class statistics' update and the logit term), ``zero_grad``, backward and an SGD step, on CPU, float32.

Timed side by side, interleaved step by step in one process (the same batches, seed 0), the variants in
a random order per repeat (``--fixed-order``: the same order every repeat, as before 2026-12-06, when
the place right after cross-entropy's step was measured to cost about 20 %):

- ``ce``: ``F.cross_entropy``;
- ``mr2``: ``MR2Loss(K)``, the default (``T = d``), features as a linear probe gives them (no gradient);
  where numba is installed (``pip install "mr2[fast]"``) its statistics' update and logit temperatures
  run as one compiled function (docs/mr2.md, "The fused CPU step"; the script prints which);
- ``mr2 eager``: the same with that function switched off (``statistics.fused_step = False``): the
  eager tensor operations, as without numba;
- ``mr2 paper``: ``MR2Loss.from_variant("paper", K)`` (``T = 1``), the same features;
- ``mr2, term computed``: ``MR2Loss(K)`` given features that require a gradient (the representation
  term computed and differentiated, as a step that trains the features would): what the saving saves.
- ``floor``: the work a linear-probe step of MR2 cannot leave out, without its bookkeeping: the
  cross-entropy of the logits divided by per-class temperatures (fixed), the batch's squared feature
  norms and one ``index_add_`` of the features into a fresh [K, d] (the class sums): ``mr2 / floor`` is
  what the statistics' small operations (the moving averages, the temperatures, the checks) cost.
- with ``--baseline REV``, ``mr2 @REV``: ``MR2Loss(K)`` of the package as of git revision ``REV`` (its
  ``src/mr2`` exported to a temporary directory and imported as ``mr2_baseline``), in the same
  interleaved loop: a before / after comparison of one process, where back-to-back runs on a shared
  machine see different loads.

Usage::

    PYTHONPATH=src python benchmarks/bench_linear_probe.py --threads 2            # K = 10, 100, 1000
    PYTHONPATH=src python benchmarks/bench_linear_probe.py --quick --classes 10   # smoke test
    PYTHONPATH=src python benchmarks/bench_linear_probe.py --threads 2 --baseline b8d74b2   # before/after

A benchmark, not a test: it asserts nothing about time (tests/benchmarks runs its quick mode).
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mr2 import MR2Loss
from mr2.statistics import _fused_cpu

__all__ = ["VARIANTS", "main", "run_case"]

#: The timed variants, in the order of the table.
VARIANTS = ("ce", "mr2", "mr2 eager", "mr2 paper", "mr2, term computed", "floor")
BATCH_POOL = 4


#: ``MR2Loss`` of the ``--baseline`` revision (set by :func:`load_baseline`), timed as ``"mr2 @REV"``.
BASELINE: tuple[str, type[nn.Module]] | None = None


def load_baseline(revision: str) -> str:
    """Export ``src/mr2`` of git ``revision`` to a temporary directory as the package ``mr2_baseline``
    (its ``mr2`` imports rewritten), import its ``MR2Loss`` into :data:`BASELINE` and return the variant's
    name. Read from the repository this script lives in."""
    global BASELINE
    repo = Path(__file__).resolve().parent.parent
    target = Path(tempfile.mkdtemp(prefix="mr2_baseline_"))
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", revision, "src/mr2"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    package = target / "mr2_baseline"
    (target / "src" / "mr2").rename(package)
    for path in package.rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"\bfrom mr2([. ])", r"from mr2_baseline\1", text)
        text = re.sub(r"^(\s*)import mr2\b", r"\1import mr2_baseline", text, flags=re.MULTILINE)
        path.write_text(text)
    sys.path.insert(0, str(target))
    from mr2_baseline.losses.mr2 import MR2Loss as Baseline

    name = f"mr2 @{revision}"
    BASELINE = (name, Baseline)
    return name


def _variants() -> tuple[str, ...]:
    return VARIANTS if BASELINE is None else (*VARIANTS, BASELINE[0])


def _floor_loss(num_classes: int) -> Callable[..., torch.Tensor]:
    """The ``floor`` variant's loss (module docstring): fixed temperatures, the squared norms and the
    class sums computed (and dropped), the logit term returned."""
    temperatures = torch.linspace(0.5, 1.5, num_classes)

    def loss(logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            torch.linalg.vector_norm(features, dim=1).square_()
            features.new_zeros(num_classes, features.shape[1]).index_add_(0, target, features)
        return F.cross_entropy(logits / temperatures.index_select(0, target).unsqueeze(1), target)

    return loss


def _loss_for(name: str, num_classes: int) -> tuple[Callable[..., torch.Tensor], bool]:
    """``(loss(logits, features, target), features need a gradient)`` of a variant."""
    if BASELINE is not None and name == BASELINE[0]:
        return BASELINE[1](num_classes), False
    if name == "ce":
        return (lambda logits, features, target: F.cross_entropy(logits, target)), False
    if name == "floor":
        return _floor_loss(num_classes), False
    if name == "mr2 paper":
        return MR2Loss.from_variant("paper", num_classes), False
    loss = MR2Loss(num_classes)
    if name == "mr2 eager":
        loss.statistics.fused_step = False
    return loss, name == "mr2, term computed"


def run_case(
    num_classes: int, *, batch: int = 512, dim: int = 768, warmup: int = 5, repeats: int = 61, seed: int = 0,
    shuffle: bool = True,
) -> dict[str, list[float]]:
    """Milliseconds per training step of every variant of :data:`VARIANTS`, interleaved.

    ``shuffle``: each repeat runs the variants in a fresh random order (seeded by ``seed``), so that
    each variant follows each other one equally often on average: in one fixed order the step right
    after cross-entropy's was measured about 20 % slower than the same step (the paper's form) one place
    later (2026-12-06), and a rotated order keeps who follows whom. False: always in the order of
    :data:`VARIANTS` (the runs before that date).
    """
    g = torch.Generator().manual_seed(seed)
    batches = [
        (torch.randn(batch, dim, generator=g).relu_(), torch.randint(0, num_classes, (batch,), generator=g))
        for _ in range(BATCH_POOL)
    ]
    # Priming batches whose targets cover the K classes, stepped through by every variant before the
    # warm-up: the timed steps are the steady state of training (every class seen; the random batches
    # alone leave about 130 of K = 1,000 classes unseen).
    cover = [
        (torch.randn(batch, dim, generator=g).relu_(), torch.arange(start, start + batch) % num_classes)
        for start in range(0, num_classes, batch)
    ]
    setups = {}
    variants = _variants()
    for name in variants:
        torch.manual_seed(seed)
        head = nn.Linear(dim, num_classes)
        loss, wants_grad = _loss_for(name, num_classes)
        setups[name] = (head, torch.optim.SGD(head.parameters(), lr=0.01, momentum=0.9), loss, wants_grad)

    def step(name: str, r: int, batch: tuple[torch.Tensor, torch.Tensor] | None = None) -> float:
        head, optimizer, loss_fn, wants_grad = setups[name]
        features, target = batches[r % BATCH_POOL] if batch is None else batch
        if wants_grad:
            features = features.detach().requires_grad_()
        start = time.perf_counter()
        loss = loss_fn(head(features), features, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return 1e3 * (time.perf_counter() - start)

    shuffler = random.Random(seed)

    def order(r: int) -> list[str]:
        names = list(variants)
        if shuffle:
            shuffler.shuffle(names)
        return names

    for name in variants:
        for primer in cover:
            step(name, 0, primer)
    for r in range(warmup):
        for name in order(r):
            step(name, r)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(repeats):
        for name in order(r):
            times[name].append(step(name, r))
    return times


def format_table(results: Sequence[tuple[int, dict[str, list[float]]]], *, batch: int, dim: int) -> str:
    variants = _variants()
    base = None if BASELINE is None else BASELINE[0]
    extra = "" if base is None else f" {base} / ce (median) | {base} / ce (min) |"
    lines = [
        "| B | K | d | " + " | ".join(f"{v} median / min ms" for v in variants)
        + " | mr2 / ce (median) | mr2 / ce (min) | mr2 eager / ce (median / min) | mr2 paper / ce (median) |"
        + " term computed / ce (median) |"
        + " floor / ce (median / min) | mr2 / floor (median / min) |" + extra,
        "| ---: | ---: | ---: |" + " ---: |" * (len(variants) + 7 + (base is not None) * 2),
    ]
    for k, times in results:
        med = {v: statistics.median(times[v]) for v in variants}
        low = {v: min(times[v]) for v in variants}
        cells = [str(batch), str(k), str(dim), *(f"{med[v]:.2f} / {low[v]:.2f}" for v in variants),
                 f"{med['mr2'] / med['ce']:.2f}x", f"{low['mr2'] / low['ce']:.2f}x",
                 f"{med['mr2 eager'] / med['ce']:.2f}x / {low['mr2 eager'] / low['ce']:.2f}x",
                 f"{med['mr2 paper'] / med['ce']:.2f}x", f"{med['mr2, term computed'] / med['ce']:.2f}x",
                 f"{med['floor'] / med['ce']:.2f}x / {low['floor'] / low['ce']:.2f}x",
                 f"{med['mr2'] / med['floor']:.2f}x / {low['mr2'] / low['floor']:.2f}x"]
        if base is not None:
            cells += [f"{med[base] / med['ce']:.2f}x", f"{low[base] / low['ce']:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _load() -> str:
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--classes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--repeats", type=int, default=61)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="one warm-up step and two timed steps per case")
    parser.add_argument("--baseline", metavar="REV", default=None,
                        help="also time MR2Loss of git revision REV in the same loop (before / after)")
    parser.add_argument("--fixed-order", action="store_true",
                        help="the variants in one fixed order every repeat (default: random per repeat)")
    args = parser.parse_args(argv)
    if args.baseline is not None:
        print(f"baseline: MR2Loss of {args.baseline} as 'mr2 @{args.baseline}'")
        load_baseline(args.baseline)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print("command: " + " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]))
    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"python {platform.python_version()}, seed {args.seed}")
    print(f"load average at start (1, 5, 15 min): {_load()}")
    compiled = "yes" if _fused_cpu.available() else "no (pip install mr2[fast])"
    print(f"compiled steady step (numba): {compiled}, {torch.get_num_threads()} threads")
    warmup, repeats = (1, 2) if args.quick else (5, args.repeats)
    results = [
        (k, run_case(k, batch=args.batch, dim=args.dim, warmup=warmup, repeats=repeats, seed=args.seed,
                     shuffle=not args.fixed_order))
        for k in args.classes
    ]
    order = "one fixed order" if args.fixed_order else "a random order per repeat"
    print(f"Linear-probe training step (head forward, loss, backward, SGD step), {repeats} interleaved "
          f"repeats ({order}):")
    print(format_table(results, batch=args.batch, dim=args.dim))
    print(f"load average at end (1, 5, 15 min): {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
