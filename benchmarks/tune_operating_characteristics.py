"""Operating characteristics of ``mr2 tune``'s design: how often it advises "adopt", and at what cost.

    nice -n 10 .venv/bin/python benchmarks/tune_operating_characteristics.py \\
        [--design default] [--candidates 17 15] [--deltas 0 0.5 1 2] [--reps 500] [--seed 0]
    .venv/bin/python benchmarks/tune_operating_characteristics.py --extract   # rebuilds the cells file

Simulated trials, calibrated per cell to the 10 ``full`` tunes of the track record
(docs/benchmarks/tune-track/<cell>-full/recommendation.json; the calibration is in
``benchmarks/tune_oc_cells.json``), are fed to the SHIPPED :class:`mr2.tune.design.Plan` end to end:
the plan asks for trials round by round, the simulator answers each with the trial's validation
figures (selection) or test figures (confirmation), and the plan's :meth:`~mr2.tune.design.Plan.advice`
is scored. Per cell and on average over the cells it prints:

- null (``delta = 0``): every candidate has ERM's accuracies; P(adopt);
- alternative (``delta > 0``): one candidate, at a random position, has ``+delta`` points on each
  class of the true hard third (ERM's per-class accuracies ranked by
  :func:`mr2.report.tiers.assign_tiers`); P(adopt it) and P(adopt a useless one);
- trainings per tune, mean and maximum.

The noise model (docs/benchmarks/tune-operating-characteristics.md; TUNE-STATISTICS section 1):
sample ``i`` of class ``k`` is right for run ``r`` iff
``mu_k + u_rk + sqrt(rho) a_i + sqrt(1 - rho) e_ri > 0`` with ``a_i ~ N(0, 1)`` fixed per sample and
shared by every run (a sample's difficulty), ``u_rk ~ N(0, tau^2)`` the run's class-level seed noise,
``e_ri ~ N(0, 1)`` run-and-sample noise, and ``mu_k = sqrt(1 + tau^2) Phi^-1(p_k)`` so that class
``k``'s accuracy is ERM's recorded ``p_k`` on average. Validation: a fresh set per repetition
(``K x n_val`` samples), every sample drawn. Test: one set per cell and seed of this script
(``K x n_test`` samples), and a run's per-class test accuracy drawn from the normal approximation of
its number of correct samples given ``u_rk`` (mean and variance of the sum of the samples'
Bernoulli probabilities over that set, tabulated on a grid of ``mu_k + u_rk``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import special, stats

from mr2.report.tiers import assign_tiers
from mr2.tune.candidates import candidates
from mr2.tune.design import BASELINE_DESIGN, DEFAULT_DESIGN, Design, Plan, Request
from mr2.tune.selection import ValidationFigures, choose, split_halves
from mr2.tune.verdict import CONTRADICTED, SeedFigures

ROOT = Path(__file__).resolve().parents[1]
CELLS_FILE = Path(__file__).with_name("tune_oc_cells.json")
TRACK = ROOT / "docs" / "benchmarks" / "tune-track"
CELLS = ("cnn-n100", "cnn-n300", "cnn-n1000", "mlp-n100", "mlp-n300", "mlp-n1000",
         "glyphs-cnn-n100", "glyphs-cnn-n300", "glyphs-mlp-n100", "glyphs-mlp-n300")
#: tau and rho per cell, fitted in /work/shared/TUNE-STATISTICS.md (section 1) so that the simulated
#: seed SDs of the validation score and of the test hard tier match the recorded ones.
NOISE = {
    "cnn-n100": (0.04, 0.60), "cnn-n300": (0.06, 0.60), "cnn-n1000": (0.0, 0.60),
    "mlp-n100": (0.0, 0.97), "mlp-n300": (0.0, 0.98), "mlp-n1000": (0.0, 0.99),
    "glyphs-cnn-n100": (0.13, 0.93), "glyphs-cnn-n300": (0.10, 0.99),
    "glyphs-mlp-n100": (0.02, 0.90), "glyphs-mlp-n300": (0.06, 0.97),
}
#: Test samples per class: Fashion-MNIST 1,000; the glyph benchmark 140 (the reports' support).
TEST_PER_CLASS = {"fashion_mnist": 1000, "arrays": 140}
SELECTION_POOL = tuple(range(1000, 1020))
CONFIRMATION_POOL = tuple(range(2000, 2030))


# ---------------------------------------------------------------------------------------------
# Calibration data
# ---------------------------------------------------------------------------------------------

def _pooled_sd(groups: Sequence[Sequence[float]]) -> float:
    variances = [statistics.variance(g) for g in groups if len(g) >= 2]
    return math.sqrt(statistics.fmean(variances))


def extract() -> list[dict[str, Any]]:
    """The cells' calibration from the recorded ``full`` tunes (written to :data:`CELLS_FILE`)."""
    cells = []
    for name in CELLS:
        record = json.loads((TRACK / f"{name}-full" / "recommendation.json").read_text())
        selection = record["selection"]
        scored = [c["scores"] for c in selection["candidates"]
                  if c["eligible"] and len(c["scores"]) >= 2 and None not in c["scores"]]
        methods = record["confirmation"]["figures"]["methods"]
        per_class = methods["erm"]["per_class_mean"]
        dataset = record["base_config"]["data"]["name"]
        train = record["base_config"]["data"]["train_per_class"]
        tau, rho = NOISE[name]
        cells.append({
            "name": name,
            "num_classes": len(per_class),
            "val_per_class": round(train * record["base_config"]["data"]["val_fraction"]),
            "test_per_class": TEST_PER_CLASS[dataset],
            "erm_test_per_class": per_class,
            "tau": tau,
            "rho": rho,
            "recorded_val_score_sd": 100 * _pooled_sd(scored),
            "recorded_test_hard_sd": 100 * _pooled_sd([m["values"]["tier:hard"] for m in methods.values()]),
            "source": f"docs/benchmarks/tune-track/{name}-full/recommendation.json",
        })
    return cells


def load_cells() -> list[dict[str, Any]]:
    return list(json.loads(CELLS_FILE.read_text()))


# ---------------------------------------------------------------------------------------------
# The simulator
# ---------------------------------------------------------------------------------------------

@dataclass
class Cell:
    """One calibrated setting: its classes, samples, ERM's accuracies and noise."""

    name: str
    num_classes: int
    val_per_class: int
    test_per_class: int
    p: np.ndarray  # [K] ERM's per-class accuracy
    tau: float
    rho: float
    recorded_val_sd: float
    recorded_test_sd: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cell:
        return cls(d["name"], d["num_classes"], d["val_per_class"], d["test_per_class"],
                   np.asarray(d["erm_test_per_class"], dtype=np.float64), d["tau"], d["rho"],
                   d["recorded_val_score_sd"], d["recorded_test_hard_sd"])

    @property
    def true_hard(self) -> np.ndarray:
        tiers = assign_tiers(self.p, 3)
        return tiers == tiers.max()


class Simulator:
    """Trials of one cell; a fresh validation set per :meth:`new_tune`, one test set per simulator."""

    def __init__(self, cell: Cell, rng: np.random.Generator, grid_step: float = 0.005) -> None:
        self.cell = cell
        self.rng = rng
        k = cell.num_classes
        self.y_val = np.repeat(np.arange(k), cell.val_per_class)
        halves = split_halves(self.y_val).astype(np.int64)
        self.index = halves * k + self.y_val  # a sample's (half, class) cell
        count = np.bincount(self.index, minlength=2 * k).reshape(2, k)
        self.half_count = (tuple(int(v) for v in count[0]), tuple(int(v) for v in count[1]))
        self.scale = math.sqrt(1.0 + cell.tau ** 2)
        # Test set: tabulate, per class, mean and variance of the accuracy as functions of m = mu + u.
        sr, se = math.sqrt(cell.rho), math.sqrt(1.0 - cell.rho)
        a_test = rng.standard_normal((k, cell.test_per_class))
        mu_all = self.scale * stats.norm.ppf(np.clip(np.concatenate([cell.p, cell.p + 0.03]), 1e-6, 1 - 1e-6))
        low = float(mu_all.min()) - 6 * cell.tau - 1.0
        high = float(mu_all.max()) + 6 * cell.tau + 1.0
        self.grid = np.arange(low, high + grid_step, grid_step)
        mean = np.empty((k, self.grid.size))
        var = np.empty((k, self.grid.size))
        for j in range(k):  # K rows of [G, n_test]
            prob = special.ndtr((self.grid[:, None] + sr * a_test[j][None, :]) / se)
            mean[j] = prob.mean(1)
            var[j] = (prob * (1 - prob)).mean(1) / cell.test_per_class
        self.test_mean, self.test_sd = mean, np.sqrt(var)
        self.a_val = np.zeros(self.y_val.size)
        self.mu: dict[str, np.ndarray] = {}

    def new_tune(self, mu: dict[str, np.ndarray]) -> None:
        """A fresh validation set; ``mu``: label -> [K] probit means."""
        self.a_val = self.rng.standard_normal(self.y_val.size)
        self.mu = mu

    def validation(self, requests: Sequence[Request]) -> list[ValidationFigures]:
        c = self.cell
        k = c.num_classes
        mu = np.stack([self.mu[r.label] for r in requests])  # [R, K]
        u = c.tau * self.rng.standard_normal(mu.shape)
        latent = ((mu + u)[:, self.y_val] + math.sqrt(c.rho) * self.a_val[None, :]
                  + math.sqrt(1 - c.rho) * self.rng.standard_normal((len(requests), self.y_val.size)))
        correct = latent > 0
        cells = (np.arange(len(requests))[:, None] * (2 * k) + self.index[None, :])[correct]
        halves = np.bincount(cells, minlength=len(requests) * 2 * k).reshape(-1, 2, k)
        per_class = halves.sum(1) / c.val_per_class
        overall = correct.mean(1)
        return [ValidationFigures(f"{r.label}@{r.seed}", r.seed, float(overall[i]),
                                  tuple(per_class[i].tolist()),
                                  half_correct=(tuple(halves[i, 0].tolist()), tuple(halves[i, 1].tolist())),
                                  half_count=self.half_count)
                for i, r in enumerate(requests)]

    def test_accuracy(self, mu: np.ndarray) -> np.ndarray:
        """[R, K] per-class test accuracies of runs with probit means ``mu`` [R, K]."""
        u = self.cell.tau * self.rng.standard_normal(mu.shape)
        m = mu + u
        position = np.clip((m - self.grid[0]) / (self.grid[1] - self.grid[0]), 0, self.grid.size - 1.001)
        left = position.astype(np.int64)
        weight = position - left
        rows = np.arange(self.cell.num_classes)[None, :]
        mean = (1 - weight) * self.test_mean[rows, left] + weight * self.test_mean[rows, left + 1]
        sd = (1 - weight) * self.test_sd[rows, left] + weight * self.test_sd[rows, left + 1]
        return np.clip(mean + sd * self.rng.standard_normal(m.shape), 0.0, 1.0)

    def test(self, requests: Sequence[Request], hard: Sequence[int]) -> list[SeedFigures]:
        acc = self.test_accuracy(np.stack([self.mu[r.label] for r in requests]))
        hard_tier = acc[:, list(hard)].mean(1)
        overall = acc.mean(1)
        return [SeedFigures(float(hard_tier[i]), float(overall[i])) for i in range(len(requests))]


def probit_means(cell: Cell, labels: Sequence[str], good: str | None, delta: float) -> dict[str, np.ndarray]:
    scale = math.sqrt(1.0 + cell.tau ** 2)
    erm = scale * stats.norm.ppf(cell.p)
    target = cell.p + np.where(cell.true_hard, delta / 100, 0.0)
    lifted = scale * stats.norm.ppf(np.clip(target, 1e-6, 1 - 1e-6))
    return {label: (lifted if label == good else erm) for label in labels}


# ---------------------------------------------------------------------------------------------
# One scenario through the shipped Plan
# ---------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    adopt: np.ndarray  # bool [reps]
    right: np.ndarray  # adopted the good candidate
    trainings: np.ndarray
    recommended: np.ndarray  # selection's choice (choose's recommendation) is not ERM
    helps_old: np.ndarray  # the old message "helps": confirmed or supported (d > 0, not contradicted)
    picked_good: np.ndarray  # the good candidate is among the contenders


def labels_for(count: int) -> list[str]:
    """ERM and ``count`` candidate labels of the default set (17: --config, 15: your own code)."""
    if count == 17:
        return [c.label for c in candidates("full")]
    if count == 15:
        return [c.label for c in candidates("full", losses_only=True)]
    return ["erm", *[f"c{i}" for i in range(count)]]


def run_scenario(sim: Simulator, design: Design, labels: list[str], delta: float, reps: int,
                 pools: tuple[Sequence[int], Sequence[int]], progress: Callable[[int], None] | None = None,
                 ) -> Outcome:
    rng = sim.rng
    out = {name: np.zeros(reps, dtype=bool) for name in ("adopt", "right", "recommended", "helps_old",
                                                         "picked_good")}
    trainings = np.zeros(reps, dtype=np.int64)
    others = labels[1:]
    for rep in range(reps):
        good = others[int(rng.integers(len(others)))] if delta > 0 else None
        sim.new_tune(probit_means(sim.cell, labels, good, delta))
        plan = Plan(labels, selection_seeds=pools[0], confirmation_seeds=pools[1], design=design)
        while requests := plan.next_round():
            if requests[0].phase == "selection":
                for r, figures in zip(requests, sim.validation(requests), strict=True):
                    plan.record_validation(r.label, r.seed, figures)
            else:
                for r, seed_figures in zip(requests, sim.test(requests, plan.hard_classes), strict=True):
                    plan.record_test(r.label, r.seed, seed_figures)
        advice = plan.advice()
        out["adopt"][rep] = advice.adopt
        out["right"][rep] = advice.adopt and advice.use == good
        choice = plan.choice
        out["recommended"][rep] = choice is not None and not choice.is_reference
        verdict = advice.verdict
        # The message of mr2 tune before issue 37: "helps" on confirmed or supported (d > 0, not
        # contradicted).
        out["helps_old"][rep] = (verdict is not None and verdict.chosen != "erm"
                                 and verdict.outcome != CONTRADICTED and verdict.mean_difference > 0)
        out["picked_good"][rep] = good is not None and good in advice.contenders
        trainings[rep] = plan.trainings
        if progress is not None:
            progress(rep)
    return Outcome(out["adopt"], out["right"], trainings, out["recommended"], out["helps_old"],
                   out["picked_good"])


def calibration(sim: Simulator, reps: int = 200, seeds: int = 3) -> tuple[float, float]:
    """Simulated seed SDs (points): the validation score (``choose``'s split-half hard tier, pooled
    over 4 candidates equal to ERM) and the test hard tier on ``choose``'s hard classes."""
    labels = ["erm", "c1", "c2", "c3"]
    val_var, test_var = [], []
    for _ in range(reps):
        sim.new_tune(probit_means(sim.cell, labels, None, 0.0))
        requests = [Request("selection", label, s) for s in range(seeds) for label in labels]
        figures = sim.validation(requests)
        runs: dict[str, list[ValidationFigures]] = {label: [] for label in labels}
        for r, f in zip(requests, figures, strict=True):
            runs[r.label].append(f)
        choice = choose(runs, "hard_tier", "erm")
        val_var.extend(statistics.variance(s.scores) for s in choice.scores)
        tests = sim.test([Request("confirmation", "erm", s) for s in range(seeds)], choice.hard_classes)
        test_var.append(statistics.variance([t.hard_tier for t in tests]))
    return 100 * math.sqrt(statistics.fmean(val_var)), 100 * math.sqrt(statistics.fmean(test_var))


# ---------------------------------------------------------------------------------------------
# Designs compared
# ---------------------------------------------------------------------------------------------

def _race(selection: tuple[int, ...], keep: tuple[int, ...], contenders: int, looks: tuple[int, ...],
          spending: str = "obrien_fleming", futility: float | None = 0.0) -> tuple[Design, int, int]:
    design = Design(selection_looks=selection, keep=keep, gate="best", contenders=contenders,
                    confirmation_looks=looks, spending=spending, futility=futility)  # type: ignore[arg-type]
    return design, selection[-1], looks[-1]


#: name -> (design, selection pool size, confirmation pool size). ``sA,BkC``: selection stages at A
#: then B seeds per candidate, C kept after the first; ``mM``: M contenders confirmed; ``LX,Y``:
#: confirmation looks at X, Y fresh seeds; ``fF``: futility at t <= F (0 unless given).
DESIGNS: dict[str, tuple[Design, int, int]] = {
    "default": (DEFAULT_DESIGN, max(DEFAULT_DESIGN.selection_looks or (3,)),
                max(DEFAULT_DESIGN.confirmation_looks or (5,))),
    "baseline-3": (BASELINE_DESIGN, 3, 3),
    "baseline-5": (BASELINE_DESIGN, 3, 5),
    "argmax-5": (Design(gate="best"), 3, 5),
    "s2,4k4-m2-L3,6": _race((2, 4), (4,), 2, (3, 6)),
    "s2,3k5-m3-L3,6": _race((2, 3), (5,), 3, (3, 6)),
    "s2-m4-L3,6": _race((2,), (), 4, (3, 6)),
    "s2-m3-L3,6": _race((2,), (), 3, (3, 6)),
    "s2-m2-L4,8": _race((2,), (), 2, (4, 8)),
    "s1,3k5-m2-L4,8": _race((1, 3), (5,), 2, (4, 8)),
    "s1,3k5-m3-L4,8": _race((1, 3), (5,), 3, (4, 8)),
    "s1,3k6-m3-L3,6,9": _race((1, 3), (6,), 3, (3, 6, 9)),
    "s1,2,4k6,3-m2-L4,8": _race((1, 2, 4), (6, 3), 2, (4, 8)),
    "s1,3k6-m4-L3,6,9": _race((1, 3), (6,), 4, (3, 6, 9)),
    "s1,3k8-m4-L4,8": _race((1, 3), (8,), 4, (4, 8)),
    "s1,3k6-m3-L4,8,12": _race((1, 3), (6,), 3, (4, 8, 12)),
    "s1,3k5-m4-L3,6,9": _race((1, 3), (5,), 4, (3, 6, 9)),
    "s1,3k6-m4-L3,6,9-f0.5": _race((1, 3), (6,), 4, (3, 6, 9), futility=0.5),
}


def pools_for(name: str) -> tuple[Sequence[int], Sequence[int]]:
    _, selection, confirmation = DESIGNS[name]
    return SELECTION_POOL[:selection], CONFIRMATION_POOL[:confirmation]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--design", nargs="+", default=["default"], choices=sorted(DESIGNS))
    parser.add_argument("--candidates", nargs="+", type=int, default=[17, 15])
    parser.add_argument("--deltas", nargs="+", type=float, default=[0.0, 0.5, 1.0, 2.0])
    parser.add_argument("--reps", type=int, default=500, help="tunes per cell and scenario")
    parser.add_argument("--cells", nargs="+", default=list(CELLS), choices=CELLS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calibration-reps", type=int, default=200)
    parser.add_argument("--extract", action="store_true", help="rebuild the cells file and exit")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args(argv)
    if args.extract:
        CELLS_FILE.write_text(json.dumps(extract(), indent=1) + "\n")
        print(f"wrote {CELLS_FILE}")
        return {}
    cells = {c["name"]: Cell.from_dict(c) for c in load_cells()}
    results: dict[str, Any] = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    start = time.time()
    simulators = {}
    print("## Calibration: seed SD of the validation score and of the test hard tier (points)\n")
    print("| cell | K | val / class | test / class | tau | rho | val SD recorded -> simulated "
          "| test hard SD recorded -> simulated |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, name in enumerate(args.cells):
        cell = cells[name]
        sim = Simulator(cell, np.random.default_rng([args.seed, i]))
        simulators[name] = sim
        if args.calibration_reps:
            val_sd, test_sd = calibration(sim, args.calibration_reps)
            results.setdefault("calibration", {})[name] = [cell.recorded_val_sd, val_sd,
                                                           cell.recorded_test_sd, test_sd]
            print(f"| {name} | {cell.num_classes} | {cell.val_per_class} | {cell.test_per_class} | "
                  f"{cell.tau:g} | {cell.rho:g} | {cell.recorded_val_sd:.2f} -> {val_sd:.2f} | "
                  f"{cell.recorded_test_sd:.2f} -> {test_sd:.2f} |", flush=True)
    for design_name in args.design:
        design, _, _ = DESIGNS[design_name]
        pools = pools_for(design_name)
        for count in args.candidates:
            labels = labels_for(count)
            table: dict[str, dict[float, dict[str, float]]] = {}
            for name in args.cells:
                sim = simulators[name]
                table[name] = {}
                for delta in args.deltas:
                    t0 = time.time()
                    o = run_scenario(sim, design, labels, delta, args.reps, pools)
                    table[name][delta] = {
                        "adopt": float(o.adopt.mean()), "right": float(o.right.mean()),
                        "useless": float((o.adopt & ~o.right).mean()),
                        "recommended": float(o.recommended.mean()), "helps_old": float(o.helps_old.mean()),
                        "picked_good": float(o.picked_good.mean()),
                        "trainings_mean": float(o.trainings.mean()), "trainings_max": int(o.trainings.max()),
                    }
                    print(f"  [{time.time() - start:7.1f}s] {design_name} {count} {name} delta={delta:g}: "
                          f"adopt {100 * o.adopt.mean():.1f}% right {100 * o.right.mean():.1f}% "
                          f"trainings {o.trainings.mean():.1f}/{o.trainings.max()} ({time.time() - t0:.1f}s)",
                          file=sys.stderr, flush=True)
            results.setdefault("designs", {}).setdefault(design_name, {})[str(count)] = {
                name: {str(d): v for d, v in rows.items()} for name, rows in table.items()}
            print_tables(design_name, design, count, table, args.deltas, args.reps)
    print(f"\n{time.time() - start:.0f} s in all; seed {args.seed}, {args.reps} tunes per cell and scenario.")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return results


def print_tables(design_name: str, design: Design, count: int,
                 table: dict[str, dict[float, dict[str, float]]], deltas: Sequence[float], reps: int) -> None:
    print(f"\n## Design `{design_name}` ({design.to_dict()}), {count} candidates vs ERM, {reps} tunes "
          "per cell and scenario (%; trainings per tune)\n")
    alts = [d for d in deltas if d > 0]
    header = ["cell"]
    if 0.0 in deltas:
        header += ["null: adopt", "null: recommended", "null: old 'helps'", "null trainings mean / max"]
    for d in alts:
        header += [f"+{d:g}: adopt it", f"+{d:g}: adopt a useless one"]
    if alts:
        header += ["alt trainings mean / max"]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    means: dict[str, list[float]] = {}

    def cell_row(name: str, rows: dict[float, dict[str, float]]) -> list[str]:
        values: list[str] = []
        if 0.0 in rows:
            r = rows[0.0]
            for key in ("adopt", "recommended", "helps_old"):
                values.append(f"{100 * r[key]:.1f}")
                means.setdefault(f"0:{key}", []).append(r[key])
            values.append(f"{r['trainings_mean']:.1f} / {r['trainings_max']}")
            means.setdefault("0:tm", []).append(r["trainings_mean"])
            means.setdefault("0:tx", []).append(r["trainings_max"])
        for d in alts:
            r = rows[d]
            values += [f"{100 * r['right']:.1f}", f"{100 * r['useless']:.1f}"]
            means.setdefault(f"{d}:right", []).append(r["right"])
            means.setdefault(f"{d}:useless", []).append(r["useless"])
        if alts:
            tm = statistics.fmean(rows[d]["trainings_mean"] for d in alts)
            tx = max(rows[d]["trainings_max"] for d in alts)
            values.append(f"{tm:.1f} / {tx}")
            means.setdefault("a:tm", []).append(tm)
            means.setdefault("a:tx", []).append(tx)
        return values

    for name, rows in table.items():
        print(f"| {name} | " + " | ".join(cell_row(name, rows)) + " |")
    mean_row = []
    if 0.0 in deltas:
        adopt = means["0:adopt"]
        mean_row.append(f"**{100 * statistics.fmean(adopt):.1f}** (max {100 * max(adopt):.1f})")
        mean_row += [f"{100 * statistics.fmean(means[f'0:{k}']):.1f}" for k in ("recommended", "helps_old")]
        mean_row.append(f"{statistics.fmean(means['0:tm']):.1f} / {max(means['0:tx']):.0f}")
    for d in alts:
        mean_row += [f"**{100 * statistics.fmean(means[f'{d}:right']):.1f}**",
                     f"{100 * statistics.fmean(means[f'{d}:useless']):.1f}"]
    if alts:
        mean_row.append(f"{statistics.fmean(means['a:tm']):.1f} / {max(means['a:tx']):.0f}")
    print("| **mean** | " + " | ".join(mean_row) + " |", flush=True)


if __name__ == "__main__":
    main()
