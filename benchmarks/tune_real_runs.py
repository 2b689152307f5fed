"""``mr2 tune``'s operating characteristics on REAL trained runs: tunes resampled from pools of runs.

    .venv/bin/python benchmarks/tune_real_runs.py [--cells mlp-n100 ...] [--design default ...] \\
        [--reps 500] [--truth-seeds 6] [--scenarios as-is no-helper shift mix] [--seed 0] [--json FILE]

A pool (studies/tune_pools/pools.py, figures in ``docs/benchmarks/tune-pools/<cell>/``) holds, for a
track-record cell, every candidate of the ``full`` set and ERM trained on the same seeds through the
engine; per run, the validation per-class correct counts in each fixed half and the test per-class
correct counts: exactly what the engine way of tune derives from a run's predictions. Only seeds on
which every candidate has a run are used, so a candidate and ERM on one seed are the real same-seed
pair.

**Truth.** The last ``--truth-seeds`` pool seeds (or ``--truth`` SEEDS) are held out: no resampled
tune uses them (``--truth-seeds 0``: truth on every seed, the tunes' own included, flagged
IN-SAMPLE: a first look at a pool too small to hold seeds out). On them, each candidate's true
change against ERM is the mean over those seeds of its paired test hard-tier difference, the hard
tier being the third of classes with ERM's lowest test accuracy pooled over those seeds
(:func:`mr2.report.tiers.assign_tiers`: the best estimate of the true hard third), likewise for
overall accuracy. A candidate is *useful* when its true hard-tier change is above 0.

**A tune.** From the remaining pool seeds, the design's selection pool and confirmation pool are
drawn without replacement (disjoint; sizes: the design's largest stage and look, or the pools
``benchmarks/tune_operating_characteristics.py``'s ``DESIGNS`` gives); the SHIPPED
:class:`mr2.tune.design.Plan` is driven round by round, each request answered with the stored
figures of (candidate, seed) (:class:`mr2.tune.selection.ValidationFigures` in selection,
:class:`mr2.tune.verdict.SeedFigures` on the plan's hard classes in confirmation), and its advice is
scored against the truth.

**Scenarios** (what is changed in each tune's copy of the pool; the truth follows the change):

- ``as-is``: the real candidates, unchanged.
- ``no-helper``: only ERM and the candidates whose true hard-tier change is at or below 0 (real runs
  where nothing helps: every "adopt" is wrong).
- ``shift``: the ``no-helper`` candidates, one of them (``T``, drawn per tune) lifted by ``+delta``
  points on each class of the true hard third (``--deltas``): each of its wrong predictions of such
  a class, in validation and test, becomes right with probability ``delta / (100 (1 - a_k))``,
  ``a_k`` its pooled accuracy on the class (so its expected change there is ``+delta``; drawn anew
  per tune). "right" is adopting ``T``.
- ``mix``: TUNE-POWER's injected candidate, on the ``no-helper`` candidates: one of them (``T``, drawn
  per tune) gets, on a random half of the pool's seeds (drawn per tune), the runs of the candidate
  with the largest true change (``D``, a configuration outside this set) on the same seeds, so the
  pairing with ERM is kept; its truth is the mean of both truths. "right" is adopting ``T``.

Per cell, design and scenario it prints P(adopt), P(adopt a useful / useless candidate), P(adopt
the target) and P(the target is among the contenders) where there is one, the mean true change of
what the advice says to use (0 for ERM) against the best candidate's, the trainings, and the
candidates adopted. The design is a parameter: ``default`` is :data:`mr2.tune.design.DEFAULT_DESIGN`
as it is when this runs; any other name is one of the operating-characteristics benchmark's
``DESIGNS``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
POOLS = ROOT / "docs" / "benchmarks" / "tune-pools"
SCENARIOS = ("as-is", "no-helper", "shift", "mix")
REFERENCE = "erm"


class PoolError(ValueError):
    """A pool that cannot be resampled (too few complete seeds, unknown cell, bad truth seeds)."""


@dataclass
class Pool:
    """Every candidate's runs of one cell, indexed by seed (complete seeds only).

    Attributes:
        cell: the cell's name.
        labels: ERM first, then the candidates in the ``full`` set's order.
        seeds: the seeds on which every label has a run, ascending.
        val_correct: int64 [L, S, 2, K] validation correct counts per fixed half and class.
        val_count: int64 [2, K] validation samples per half and class.
        test_correct: int64 [L, S, K] test correct counts per class.
        test_count: int64 [K] test samples per class.
        labels_digest: the validation labels' SHA-256 (None: unknown).
    """

    cell: str
    labels: list[str]
    seeds: list[int]
    val_correct: np.ndarray
    val_count: np.ndarray
    test_correct: np.ndarray
    test_count: np.ndarray
    labels_digest: str | None = None
    _layout: Layout | None = field(default=None, repr=False, compare=False)

    @property
    def num_classes(self) -> int:
        return int(self.test_count.size)

    def subset(self, labels: Sequence[str]) -> Pool:
        rows = [self.labels.index(label) for label in labels]
        pool = Pool(self.cell, list(labels), list(self.seeds), self.val_correct[rows], self.val_count,
                    self.test_correct[rows], self.test_count, self.labels_digest)
        pool._layout = self._layout
        return pool

    def layout(self) -> Layout:
        """Labels and predictions that give the stored counts (built once)."""
        if self._layout is None:
            self._layout = Layout(self.val_count, self.test_count)
        return self._layout


def load_pool(cell: str, pools: Path = POOLS) -> Pool:
    """The pool of ``<pools>/<cell>/`` (runs.csv and meta.json of studies/tune_pools/pools.py).

    Raises:
        PoolError: no such pool, or no ERM run.
    """
    folder = pools / cell
    if not (folder / "runs.csv").is_file() or not (folder / "meta.json").is_file():
        raise PoolError(f"no pool for {cell!r} in {folder} (studies/tune_pools/pools.py train {cell} ...)")
    meta = json.loads((folder / "meta.json").read_text())
    with (folder / "runs.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    runs: dict[tuple[str, int], tuple[list[list[int]], list[int]]] = {}
    for r in rows:
        key = (r["label"], int(r["seed"]))
        runs[key] = (json.loads(r["val_half_correct"]), json.loads(r["test_correct"]))
    order = list(meta.get("candidates", {})) or sorted({label for label, _ in runs})
    present = {label for label, _ in runs}
    labels = [label for label in order if label in present]
    if REFERENCE not in labels:
        raise PoolError(f"the pool of {cell!r} has no {REFERENCE} run")
    labels = [REFERENCE, *[label for label in labels if label != REFERENCE]]
    seeds = sorted(set.intersection(*({s for (lab, s) in runs if lab == label} for label in labels)))
    val = np.array([[runs[(label, s)][0] for s in seeds] for label in labels], dtype=np.int64)
    test = np.array([[runs[(label, s)][1] for s in seeds] for label in labels], dtype=np.int64)
    k = len(meta["test_count"])
    return Pool(cell, labels, seeds, val.reshape(len(labels), len(seeds), 2, k),
                np.asarray(meta["val_half_count"], dtype=np.int64),
                test.reshape(len(labels), len(seeds), k), np.asarray(meta["test_count"], dtype=np.int64),
                meta.get("val_labels_digest"))


# ---------------------------------------------------------------------------------------------
# Figures, as the engine way of tune builds them from predictions
# ---------------------------------------------------------------------------------------------

class Layout:
    """Labels with the pool's per-class counts and, per run, predictions with its correct counts, so
    that the figures come from the library's own :meth:`ValidationFigures.from_predictions` and
    :func:`mr2.tune.verdict.seed_figures` (they depend on the counts only; the validation labels'
    digest is the pool's).

    A validation sample's half is :func:`mr2.tune.selection.split_halves`' on these labels; the
    per-(half, class) sample counts equal the real split's (``ceil`` / ``floor`` of ``n_k / 2``).
    """

    def __init__(self, val_count: np.ndarray, test_count: np.ndarray) -> None:
        from mr2.tune.selection import split_halves

        self.k = int(test_count.size)
        per_class = np.asarray(val_count, dtype=np.int64).sum(0)
        self.y_val = np.repeat(np.arange(self.k), per_class)
        halves = split_halves(self.y_val).astype(np.int64)
        self.val_cell = halves * self.k + self.y_val
        counts = np.bincount(self.val_cell, minlength=2 * self.k).reshape(2, self.k)
        if not np.array_equal(counts, val_count):
            raise PoolError(f"the pool's validation half counts {np.asarray(val_count).tolist()} are not "
                            f"split_halves' {counts.tolist()}")
        self.val_rank = _rank_within(self.val_cell)
        self.y_test = np.repeat(np.arange(self.k), np.asarray(test_count, dtype=np.int64))
        self.test_rank = _rank_within(self.y_test)

    def _predict(self, labels: np.ndarray, cell: np.ndarray, rank: np.ndarray,
                 correct: np.ndarray) -> np.ndarray:
        right = rank < np.asarray(correct, dtype=np.int64).reshape(-1)[cell]
        return np.where(right, labels, (labels + 1) % self.k)

    def validation(self, label: str, seed: int, half_correct: np.ndarray, digest: str | None = None) -> Any:
        """The figures of a run with these per-(half, class) correct counts ([2, K])."""
        from dataclasses import replace

        from mr2.tune.selection import ValidationFigures

        predicted = self._predict(self.y_val, self.val_cell, self.val_rank, half_correct)
        figures = ValidationFigures.from_predictions(f"{label}@{seed}", int(seed), self.y_val, predicted,
                                                     self.k)
        return figures if digest is None else replace(figures, labels_digest=digest)

    def test(self, correct: np.ndarray, hard: Sequence[int]) -> Any:
        """The test figures of a run with these per-class correct counts ([K]) on ``hard``."""
        from mr2.tune.verdict import seed_figures

        predicted = self._predict(self.y_test, self.y_test, self.test_rank, correct)
        return seed_figures(self.y_test, predicted, list(hard), self.k)


def _rank_within(cell: np.ndarray) -> np.ndarray:
    """Each sample's position among the samples of its cell (0, 1, ...), in order."""
    order = np.argsort(cell, kind="stable")
    sorted_cell = cell[order]
    rank = np.empty(cell.size, dtype=np.int64)
    rank[order] = np.arange(cell.size) - np.searchsorted(sorted_cell, sorted_cell, side="left")
    return rank


# ---------------------------------------------------------------------------------------------
# Truth
# ---------------------------------------------------------------------------------------------

@dataclass
class Truth:
    """Each label's true change against ERM on the held-out seeds (points).

    Attributes:
        seeds: the held-out seeds.
        hard: the true hard third (ERM's lowest test accuracies pooled over ``seeds``).
        hard_change / hard_se / overall_change: label -> mean paired change (and its SE) in points.
    """

    seeds: list[int]
    hard: list[int]
    hard_change: dict[str, float]
    hard_se: dict[str, float]
    overall_change: dict[str, float]
    accuracy: dict[str, np.ndarray] = field(default_factory=dict)  # label -> [K] pooled test accuracy

    def best(self, labels: Sequence[str]) -> str:
        return max(labels, key=lambda label: (self.hard_change[label], label == REFERENCE))


def measure_truth(pool: Pool, seeds: Sequence[int]) -> Truth:
    from mr2.report.tiers import assign_tiers

    columns = [pool.seeds.index(s) for s in seeds]
    test = pool.test_correct[:, columns].astype(np.float64) / pool.test_count  # [L, S, K]
    erm = pool.labels.index(REFERENCE)
    tiers = assign_tiers(test[erm].mean(0), min(3, pool.num_classes))
    hard = [int(k) for k in np.flatnonzero(tiers == tiers.max())]
    hard_tier = 100 * test[:, :, hard].mean(2)  # [L, S]
    overall = 100 * (pool.test_correct[:, columns].sum(2) / pool.test_count.sum())
    diff = hard_tier - hard_tier[erm]
    n = len(columns)
    se = diff.std(1, ddof=1) / math.sqrt(n) if n > 1 else np.full(len(pool.labels), math.nan)
    return Truth(list(seeds), hard,
                 {label: float(diff[i].mean()) for i, label in enumerate(pool.labels)},
                 {label: float(se[i]) for i, label in enumerate(pool.labels)},
                 {label: float((overall[i] - overall[erm]).mean()) for i, label in enumerate(pool.labels)},
                 {label: test[i].mean(0) for i, label in enumerate(pool.labels)})


# ---------------------------------------------------------------------------------------------
# Resampled tunes
# ---------------------------------------------------------------------------------------------

@dataclass
class TuneResult:
    adopt: bool
    use: str
    contenders: list[str]
    trainings: int


def run_tune(pool: Pool, design: Any, selection: Sequence[int], confirmation: Sequence[int],
             val_correct: np.ndarray | None = None, test_correct: np.ndarray | None = None) -> TuneResult:
    """One tune through the shipped Plan on ``pool`` (or on the given modified counts)."""
    from mr2.tune.design import Plan

    val = pool.val_correct if val_correct is None else val_correct
    test = pool.test_correct if test_correct is None else test_correct
    layout = pool.layout()
    row = {label: i for i, label in enumerate(pool.labels)}
    column = {s: j for j, s in enumerate(pool.seeds)}
    plan = Plan(pool.labels, reference=REFERENCE, selection_seeds=selection, confirmation_seeds=confirmation,
                design=design)
    while requests := plan.next_round():
        for r in requests:
            i, j = row[r.label], column[r.seed]
            if r.phase == "selection":
                # screen_reuse: the same run's test figures are the screen's first seed
                reused = layout.test(test[i, j], range(layout.k)) if design.screen_reuse else None
                plan.record_validation(r.label, r.seed, layout.validation(r.label, r.seed, val[i, j],
                                                                          pool.labels_digest), test=reused)
            else:
                plan.record_test(r.label, r.seed, layout.test(test[i, j], plan.hard_classes))
    advice = plan.advice()
    return TuneResult(advice.adopt, advice.use, list(advice.contenders), plan.trainings)


def pool_sizes(design_name: str, design: Any) -> tuple[int, int]:
    """The selection and confirmation pool sizes a tune of this design draws."""
    if design_name != "default":
        _, selection, confirmation = oc_designs()[design_name]
        return int(selection), int(confirmation)
    # What the design uses at most: ERM's 2 selection seeds at least; a screen's seeds and the looks after it.
    return design.selection_seeds, design.confirmation_seeds


def oc_designs() -> dict[str, tuple[Any, int, int]]:
    """``DESIGNS`` of benchmarks/tune_operating_characteristics.py (imported from its file)."""
    spec = importlib.util.spec_from_file_location("tune_oc", Path(__file__).with_name(
        "tune_operating_characteristics.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tune_oc", module)
    spec.loader.exec_module(module)
    return dict(module.DESIGNS)


def resolve_design(name: str) -> Any:
    """``default``: :data:`mr2.tune.design.DEFAULT_DESIGN` as it is now; else a ``DESIGNS`` entry."""
    if name == "default":
        from mr2.tune import design

        return design.DEFAULT_DESIGN
    designs = oc_designs()
    if name not in designs:
        raise PoolError(f"unknown design {name!r}; 'default' or one of: {', '.join(sorted(designs))}")
    return designs[name][0]


def shifted(correct: np.ndarray, count: np.ndarray, hard: Sequence[int], probability: np.ndarray,
            rng: np.random.Generator) -> np.ndarray:
    """``correct`` [..., K] with each wrong prediction of a ``hard`` class turned right with that
    class's ``probability`` [K] (binomial draws)."""
    out = correct.copy()
    wrong = np.maximum(count - correct, 0)
    cols = np.asarray(list(hard), dtype=np.int64)
    out[..., cols] += rng.binomial(wrong[..., cols], np.clip(probability[cols], 0.0, 1.0))
    return out


@dataclass
class Summary:
    tunes: int = 0
    adopt: int = 0
    useful: int = 0
    useless: int = 0
    right: int = 0
    target_contender: int = 0
    gain: float = 0.0
    best_gain: float = 0.0
    trainings: list[int] = field(default_factory=list)
    adopted: Counter[str] = field(default_factory=Counter)
    has_target: bool = False

    def row(self) -> dict[str, Any]:
        n = max(self.tunes, 1)
        return {"tunes": self.tunes, "adopt": self.adopt / n, "useful": self.useful / n,
                "useless": self.useless / n,
                "right": self.right / n if self.has_target else None,
                "target_contender": self.target_contender / n if self.has_target else None,
                "gain": self.gain / n, "best_gain": self.best_gain / n,
                "trainings_mean": float(np.mean(self.trainings)) if self.trainings else math.nan,
                "trainings_max": int(max(self.trainings)) if self.trainings else 0,
                "adopted": dict(self.adopted.most_common())}


def run_scenario(pool: Pool, truth: Truth, design: Any, sizes: tuple[int, int], scenario: str, reps: int,
                 rng: np.random.Generator, delta: float = 0.0, held_out: bool = True) -> Summary:
    """``reps`` resampled tunes of one scenario (module docstring); ``held_out=False``: the tunes draw
    from every pool seed, the truth's included (in-sample truth: a first look only)."""
    tune_seeds = [s for s in pool.seeds if s not in set(truth.seeds)] if held_out else list(pool.seeds)
    n_sel, n_conf = sizes
    if len(tune_seeds) < n_sel + n_conf:
        raise PoolError(f"{pool.cell}: {len(tune_seeds)} pool seeds outside the truth's, a tune needs "
                        f"{n_sel} + {n_conf}; train more seeds or hold out fewer (--truth-seeds)")
    nohelp = [label for label in pool.labels if label == REFERENCE or truth.hard_change[label] <= 0]
    base = pool if scenario == "as-is" else pool.subset(nohelp)
    if len(base.labels) < 2:
        raise PoolError(f"{pool.cell}: no candidate without a gain for scenario {scenario!r}")
    change = dict(truth.hard_change)
    donor: str | None = None
    if scenario == "mix":
        donor = max(pool.labels, key=lambda label: change[label])
        if change[donor] <= 0:
            raise PoolError(f"{pool.cell}: no candidate with a true gain to mix in")
        donor_val = pool.val_correct[pool.labels.index(donor)]
        donor_test = pool.test_correct[pool.labels.index(donor)]
    summary = Summary(has_target=scenario in ("shift", "mix"))
    for _ in range(reps):
        draw = rng.permutation(len(tune_seeds))[:n_sel + n_conf]
        seeds = [tune_seeds[i] for i in draw]
        val, test = base.val_correct, base.test_correct
        tune_change = change
        target: str | None = None
        if scenario in ("shift", "mix"):
            candidates = [label for label in base.labels if label != REFERENCE]
            target = candidates[int(rng.integers(len(candidates)))]
            i = base.labels.index(target)
            val, test = val.copy(), test.copy()
        if scenario == "shift":
            assert target is not None
            accuracy = truth.accuracy[target]
            probability = (delta / 100.0) / np.maximum(1.0 - accuracy, 1e-9)
            val[i] = shifted(val[i], base.val_count[None, :, :], truth.hard, probability, rng)
            test[i] = shifted(test[i], base.test_count[None, :], truth.hard, probability, rng)
            tune_change = {**change, target: change[target] + delta}
        elif scenario == "mix":
            assert target is not None and donor is not None
            half = rng.permutation(len(base.seeds))[:len(base.seeds) // 2]
            val[i, half], test[i, half] = donor_val[half], donor_test[half]
            tune_change = {**change, target: (change[target] + change[donor]) / 2}
        result = run_tune(base, design, seeds[:n_sel], seeds[n_sel:], val, test)
        best = max(base.labels, key=lambda label: tune_change[label])
        summary.tunes += 1
        summary.trainings.append(result.trainings)
        summary.best_gain += max(tune_change[best], 0.0)
        summary.target_contender += target is not None and target in result.contenders
        if result.adopt:
            summary.adopt += 1
            summary.adopted[result.use] += 1
            gain = tune_change[result.use]
            summary.gain += gain
            summary.useful += gain > 0
            summary.useless += gain <= 0
            summary.right += result.use == target
    return summary


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", nargs="+", default=None, help="pools to use (default: every pool)")
    parser.add_argument("--design", nargs="+", default=["default"],
                        help="'default' (DEFAULT_DESIGN now) or names of the OC benchmark's DESIGNS")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--deltas", nargs="+", type=float, default=[1.0, 2.0], help="shift's lifts (points)")
    parser.add_argument("--reps", type=int, default=500, help="tunes per cell, design and scenario")
    parser.add_argument("--truth-seeds", type=int, default=6,
                        help="the last N complete pool seeds; 0: in-sample truth on every seed (first look)")
    parser.add_argument("--truth", default="", help="explicit held-out seeds (comma-separated)")
    parser.add_argument("--pools", type=Path, default=POOLS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args(argv)
    cells = args.cells or sorted(p.name for p in args.pools.iterdir() if (p / "runs.csv").is_file())
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    results: dict[str, Any] = {"args": settings, "cells": {}}
    start = time.time()
    for c, cell in enumerate(cells):
        pool = load_pool(cell, args.pools)
        if args.truth:
            truth_seeds = [int(s) for s in args.truth.split(",")]
            missing = sorted(set(truth_seeds) - set(pool.seeds))
            if missing:
                raise PoolError(f"{cell}: truth seeds {missing} are not complete pool seeds {pool.seeds}")
        else:
            truth_seeds = pool.seeds[-args.truth_seeds:] if args.truth_seeds > 0 else list(pool.seeds)
        held_out = args.truth or args.truth_seeds > 0
        truth = measure_truth(pool, truth_seeds)
        tune_seeds = [s for s in pool.seeds if s not in set(truth_seeds)] if held_out else list(pool.seeds)
        if not held_out:
            print(f"\n**{cell}: IN-SAMPLE truth (--truth-seeds 0): measured on the tunes' own seeds; a "
                  "first look only, not the benchmark's truth.**")
        print(f"\n## {cell}: K = {pool.num_classes}, {len(pool.labels)} labels x {len(pool.seeds)} complete "
              f"seeds; tunes draw from {len(tune_seeds)} seeds {tune_seeds}, truth on {truth_seeds}\n")
        print(f"True change against ERM on the held-out seeds (points; hard tier = classes {truth.hard}):\n")
        print("| candidate | hard tier (SE) | overall |")
        print("|---|---:|---:|")
        for label in sorted(pool.labels[1:], key=lambda lab: -truth.hard_change[lab]):
            print(f"| {label} | {truth.hard_change[label]:+.2f} ({truth.hard_se[label]:.2f}) | "
                  f"{truth.overall_change[label]:+.2f} |")
        cell_out: dict[str, Any] = {"seeds": pool.seeds, "truth_seeds": truth_seeds, "hard": truth.hard,
                                    "truth": truth.hard_change, "truth_se": truth.hard_se,
                                    "truth_overall": truth.overall_change, "designs": {}}
        for d, design_name in enumerate(args.design):
            design = resolve_design(design_name)
            sizes = pool_sizes(design_name, design)
            print(f"\n### design {design_name} ({sizes[0]} selection + {sizes[1]} confirmation seeds per "
                  f"tune; {design.to_dict()})\n")
            print("| scenario | tunes | adopt | useful | useless | right | target a contender | "
                  "gain of advice (best) | trainings mean / max | adopted |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
            rows: dict[str, Any] = {}
            runs = [(s, 0.0) for s in args.scenarios if s != "shift"]
            runs += [("shift", delta) for delta in args.deltas if "shift" in args.scenarios]
            for s, (scenario, delta) in enumerate(runs):
                name = f"shift+{delta:g}" if scenario == "shift" else scenario
                rng = np.random.default_rng([args.seed, c, d, s])
                try:
                    summary = run_scenario(pool, truth, design, sizes, scenario, args.reps, rng, delta,
                                           held_out=bool(held_out))
                except PoolError as error:
                    print(f"| {name} | skipped: {error} |||||||||")
                    continue
                row = summary.row()
                rows[name] = row
                top = ", ".join(f"{label} {n}" for label, n in list(row["adopted"].items())[:4])
                print(f"| {name} | {row['tunes']} | {_pct(row['adopt'])} | {_pct(row['useful'])} | "
                      f"{_pct(row['useless'])} | {_pct(row['right'])} | {_pct(row['target_contender'])} | "
                      f"{row['gain']:+.2f} ({row['best_gain']:+.2f}) | {row['trainings_mean']:.1f} / "
                      f"{row['trainings_max']} | {top} |", flush=True)
            cell_out["designs"][design_name] = {"design": design.to_dict(), "sizes": sizes, "scenarios": rows}
        results["cells"][cell] = cell_out
    print(f"\n{time.time() - start:.0f} s; seed {args.seed}, {args.reps} tunes per cell, design and "
          "scenario.")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    try:
        main()
    except PoolError as error:
        print(f"tune_real_runs.py: {error}", file=sys.stderr)
        sys.exit(2)
