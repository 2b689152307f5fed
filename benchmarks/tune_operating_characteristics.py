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
import importlib.util
import json
import math
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import special, stats

from mr2.report.tiers import assign_tiers
from mr2.tune.candidates import candidates
from mr2.tune.design import DEFAULT_DESIGN, Design, Plan, Request
from mr2.tune.selection import ValidationFigures, choose, split_halves
from mr2.tune.verdict import CONTRADICTED, SeedFigures

ROOT = Path(__file__).resolve().parents[1]
CELLS_FILE = Path(__file__).with_name("tune_oc_cells.json")
RESEARCH_NAME = "tune_research_design"
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

def _pooled_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The pooled SD of groups (each about its own mean) and its degrees of freedom."""
    squares = sum(float(((np.asarray(g) - np.mean(g)) ** 2).sum()) for g in groups if len(g) >= 2)
    df = sum(len(g) - 1 for g in groups if len(g) >= 2)
    return math.sqrt(squares / df), df


def recorded(name: str) -> dict[str, Any]:
    """The re-run record's figures of a cell (``<cell>-full-v2``), points: the test hard tier's seed
    SD pooled over ERM and the contenders, the paired-difference SD against ERM (shared seeds), the
    same-seed correlation of ERM's and the contenders' test hard tier (pooled cross-products), the
    validation score's seed SD pooled over the candidates with 2 or more selection runs; each with its
    degrees of freedom."""
    record = json.loads((TRACK / f"{name}-full-v2" / "recommendation.json").read_text())
    methods = record["confirmation"]["figures"]["methods"]
    hard = {label: dict(zip(m["seeds"], m["values"]["tier:hard"], strict=True))
            for label, m in methods.items()}
    erm = hard["erm"]
    test_sd, test_df = _pooled_sd([[100 * v for v in h.values()] for h in hard.values()])
    diffs, cross, erm_ss, other_ss = [], 0.0, 0.0, 0.0
    for label, values in hard.items():
        if label == "erm":
            continue
        shared = sorted(set(erm) & set(values))
        a = 100 * np.array([erm[s] for s in shared])
        b = 100 * np.array([values[s] for s in shared])
        diffs.append(list(b - a))
        cross += float(((a - a.mean()) * (b - b.mean())).sum())
        erm_ss += float(((a - a.mean()) ** 2).sum())
        other_ss += float(((b - b.mean()) ** 2).sum())
    diff_sd, diff_df = _pooled_sd(diffs)
    scored = [[100 * v for v in c["scores"]] for c in record["selection"]["candidates"]
              if len(c["scores"]) >= 2 and None not in c["scores"]]
    val_sd, val_df = _pooled_sd(scored)
    return {"record": record, "test_sd": test_sd, "test_df": test_df, "diff_sd": diff_sd, "diff_df": diff_df,
            "seed_corr": cross / math.sqrt(erm_ss * other_ss), "val_sd": val_sd, "val_df": val_df}


def extract(seed: int = 0) -> list[dict[str, Any]]:
    """The cells' calibration from the re-run ``full`` tunes (written to :data:`CELLS_FILE`): ERM's
    per-class test accuracies, the recorded SDs with their degrees of freedom, kappa = the recorded
    same-seed correlation (0 where negative), and ``tau`` fitted (:func:`fit_tau`) so that the
    simulated paired-difference SD is the recorded one (a run's test hard-tier SD of
    ``diff_sd / sqrt(2 (1 - kappa))``); ``rho`` (the samples' shared difficulty)
    as fitted on the validation score in TUNE-STATISTICS section 1."""
    cells = []
    for i, name in enumerate(CELLS):
        figures = recorded(name)
        record = figures["record"]
        per_class = record["confirmation"]["figures"]["methods"]["erm"]["per_class_mean"]
        dataset = record["base_config"]["data"]["name"]
        train = record["base_config"]["data"]["train_per_class"]
        cell = Cell(name, len(per_class), round(train * record["base_config"]["data"]["val_fraction"]),
                    TEST_PER_CLASS[dataset], np.asarray(per_class, dtype=np.float64), 0.0, NOISE[name][1],
                    figures["val_sd"], figures["test_sd"])
        kappa = max(0.0, figures["seed_corr"])
        # The paired difference is what the confirmation tests: tau is fitted to it
        # (its SD is sqrt(2 (1 - kappa)) times a run's).
        target = figures["diff_sd"] / math.sqrt(2.0 * (1.0 - kappa))
        tau = fit_tau(cell, target, np.random.default_rng([seed, i, 7]))
        cells.append({
            "name": name,
            "num_classes": cell.num_classes,
            "val_per_class": cell.val_per_class,
            "test_per_class": cell.test_per_class,
            "erm_test_per_class": per_class,
            "tau": tau,
            "rho": cell.rho,
            "seed_corr": round(kappa, 3),
            "recorded_val_score_sd": figures["val_sd"],
            "recorded_test_hard_sd": figures["test_sd"],
            "recorded_diff_sd": figures["diff_sd"],
            "recorded_seed_corr": figures["seed_corr"],
            "df": {"val": figures["val_df"], "test": figures["test_df"], "diff": figures["diff_df"]},
            "source": f"docs/benchmarks/tune-track/{name}-full-v2/recommendation.json",
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
    seed_corr: float = 0.0  # same-seed correlation of any two methods' runs (kappa)
    recorded_diff_sd: float = math.nan  # paired-difference SD of the test hard tier (points)
    recorded_seed_corr: float = math.nan
    df: dict[str, int] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cell:
        return cls(d["name"], d["num_classes"], d["val_per_class"], d["test_per_class"],
                   np.asarray(d["erm_test_per_class"], dtype=np.float64), d["tau"], d["rho"],
                   d["recorded_val_score_sd"], d["recorded_test_hard_sd"], d.get("seed_corr", 0.0),
                   d.get("recorded_diff_sd", math.nan), d.get("recorded_seed_corr", math.nan), d.get("df"))

    @property
    def true_hard(self) -> np.ndarray:
        tiers = assign_tiers(self.p, 3)
        return tiers == tiers.max()


class Simulator:
    """Trials of one cell; a fresh validation set per :meth:`new_tune`, one test set per simulator.

    Runs on the same seed share a part of their noise (the cell's ``seed_corr``, kappa): a run's
    class-level seed noise is ``tau (sqrt(kappa) g_s + sqrt(1 - kappa) g_r)`` and its
    run-and-sample noise (validation) or test sampling draw ``sqrt(kappa) h_s + sqrt(1 - kappa) h_r``,
    ``g_s, h_s`` drawn once per tune and seed, so two methods' same-seed runs correlate about kappa
    (the re-run records' same-seed correlation of ERM's and a candidate's test hard tier). Test
    accuracies lie on the count lattice (``c / n_test``) and carry their rounding SD, so the
    verdict's SD floor applies as it does on real figures.
    """

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
        mu_all = self.scale * stats.norm.ppf(np.clip(np.concatenate([cell.p - 0.06, cell.p + 0.03]),
                                                     1e-6, 1 - 1e-6))
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
        self.rounding_sd = 0.0
        self.a_val = np.zeros(self.y_val.size)
        self.mu: dict[str, np.ndarray] = {}
        self.skewed: tuple[str, np.ndarray, np.ndarray, float] | None = None
        self._shared: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}

    def new_tune(self, mu: dict[str, np.ndarray],
                 skewed: tuple[str, np.ndarray, np.ndarray, float] | None = None) -> None:
        """A fresh validation set; ``mu``: label -> [K] probit means; ``skewed``: (label, usual [K],
        collapsed [K], q): that label's runs have the collapsed means with probability q each."""
        self.a_val = self.rng.standard_normal(self.y_val.size)
        self.mu = mu
        self.skewed = skewed
        self._shared = {}

    def _means(self, requests: Sequence[Request]) -> np.ndarray:
        mu = np.stack([self.mu[r.label] for r in requests])  # [R, K]
        if self.skewed is not None:
            label, usual, collapsed, q = self.skewed
            rows = np.array([r.label == label for r in requests])
            if rows.any():
                down = self.rng.random(int(rows.sum())) < q
                mu[rows] = np.where(down[:, None], collapsed[None, :], usual[None, :])
        return mu

    def _seed_noise(self, requests: Sequence[Request], width: int, tag: str = ""
                    ) -> tuple[np.ndarray, np.ndarray]:
        """[R, K] class-level and [R, width] sample-level standard normals, correlated kappa between
        runs of one seed (and phase; ``tag`` names another draw of the same runs)."""
        kappa = self.cell.seed_corr
        k = self.cell.num_classes
        own_u = self.rng.standard_normal((len(requests), k))
        own_e = self.rng.standard_normal((len(requests), width))
        if kappa <= 0:
            return own_u, own_e
        shared_u, shared_e = [], []
        for r in requests:
            key = (r.phase + tag, r.seed)
            if key not in self._shared:
                self._shared[key] = (self.rng.standard_normal(k), self.rng.standard_normal(width))
            shared_u.append(self._shared[key][0])
            shared_e.append(self._shared[key][1])
        a, b = math.sqrt(kappa), math.sqrt(1.0 - kappa)
        return a * np.stack(shared_u) + b * own_u, a * np.stack(shared_e) + b * own_e

    def validation(self, requests: Sequence[Request]) -> list[ValidationFigures]:
        return self.selection(requests, test=False)[0]

    def selection(self, requests: Sequence[Request], test: bool = True
                  ) -> tuple[list[ValidationFigures], list[SeedFigures]]:
        """Selection runs' validation figures and (``test``) the same runs' test figures (every
        class's accuracy; the hard tier on all classes until the plan scores them again): one run,
        one class-level seed noise ``g`` on both splits. Without ``test`` the draws are the same as
        before the test figures existed."""
        c = self.cell
        k = c.num_classes
        mu = self._means(requests)
        g, e = self._seed_noise(requests, self.y_val.size)
        tests: list[SeedFigures] = []
        if test:
            _, z = self._seed_noise(requests, k, tag="-test")
            tests = self._figures(self.test_accuracy(mu, g, z), list(range(k)))
        latent = ((mu + c.tau * g)[:, self.y_val] + math.sqrt(c.rho) * self.a_val[None, :]
                  + math.sqrt(1 - c.rho) * e)
        correct = latent > 0
        cells = (np.arange(len(requests))[:, None] * (2 * k) + self.index[None, :])[correct]
        halves = np.bincount(cells, minlength=len(requests) * 2 * k).reshape(-1, 2, k)
        per_class = halves.sum(1) / c.val_per_class
        overall = correct.mean(1)
        return [ValidationFigures(f"{r.label}@{r.seed}", r.seed, float(overall[i]),
                                  tuple(per_class[i].tolist()),
                                  half_correct=(tuple(halves[i, 0].tolist()), tuple(halves[i, 1].tolist())),
                                  half_count=self.half_count)
                for i, r in enumerate(requests)], tests

    def test_accuracy(self, mu: np.ndarray, g: np.ndarray | None = None,
                      z: np.ndarray | None = None) -> np.ndarray:
        """[R, K] per-class test accuracies (on the count lattice) of runs with probit means ``mu``
        [R, K]; ``g``, ``z``: their class-level and sampling standard normals (drawn if None)."""
        g = self.rng.standard_normal(mu.shape) if g is None else g
        z = self.rng.standard_normal(mu.shape) if z is None else z
        m = mu + self.cell.tau * g
        position = np.clip((m - self.grid[0]) / (self.grid[1] - self.grid[0]), 0, self.grid.size - 1.001)
        left = position.astype(np.int64)
        weight = position - left
        rows = np.arange(self.cell.num_classes)[None, :]
        mean = (1 - weight) * self.test_mean[rows, left] + weight * self.test_mean[rows, left + 1]
        sd = (1 - weight) * self.test_sd[rows, left] + weight * self.test_sd[rows, left + 1]
        n = self.cell.test_per_class
        return np.clip(np.rint(n * (mean + sd * z)), 0, n) / n

    def test(self, requests: Sequence[Request], hard: Sequence[int]) -> list[SeedFigures]:
        g, z = self._seed_noise(requests, self.cell.num_classes)
        return self._figures(self.test_accuracy(self._means(requests), g, z), hard)

    def _figures(self, acc: np.ndarray, hard: Sequence[int]) -> list[SeedFigures]:
        hard_tier = acc[:, list(hard)].mean(1)
        overall = acc.mean(1)
        h = len(hard)
        rounding = math.sqrt(h / (12.0 * self.cell.test_per_class ** 2)) / h
        counts = (self.cell.test_per_class,) * self.cell.num_classes
        return [SeedFigures(float(hard_tier[i]), float(overall[i]), rounding,
                            per_class=tuple(acc[i].tolist()), class_counts=counts)
                for i in range(acc.shape[0])]


def fit_tau(cell: Cell, target_sd: float, rng: np.random.Generator, draws: int = 4000) -> float:
    """The class-level seed noise ``tau`` whose simulated test hard-tier seed SD (true hard classes,
    on the count lattice) is ``target_sd`` points (bisection; 0 when even tau = 0 is noisier)."""
    wide = Simulator(Cell(**{**cell.__dict__, "tau": 1.0}), rng)
    hard = np.flatnonzero(cell.true_hard)
    g = rng.standard_normal((draws, cell.num_classes))
    z = rng.standard_normal((draws, cell.num_classes))

    def sd(tau: float) -> float:
        wide.cell.tau = tau
        mu = math.sqrt(1 + tau ** 2) * stats.norm.ppf(cell.p)
        acc = wide.test_accuracy(np.broadcast_to(mu, g.shape).copy(), g, z)
        return 100 * float(acc[:, hard].mean(1).std(ddof=1))

    low, high = 0.0, 1.0
    if sd(low) >= target_sd:
        return 0.0
    for _ in range(30):
        middle = (low + high) / 2
        low, high = (middle, high) if sd(middle) < target_sd else (low, middle)
    return round((low + high) / 2, 4)


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


#: The left-skewed null: one candidate's runs are +0.5 point on the true hard classes, or -4.5 with
#: probability 0.1 (mean 0: no better than ERM), the others equal ERM.
SKEWED = (0.5, -4.5, 0.1)


def run_scenario(sim: Simulator, design: Design, labels: list[str], delta: float, reps: int,
                 pools: tuple[Sequence[int], Sequence[int]], progress: Callable[[int], None] | None = None,
                 skewed: tuple[float, float, float] | None = None) -> Outcome:
    """``reps`` tunes through the shipped :class:`Plan`; ``skewed``: (usual, collapsed, q) points for
    one candidate at a random position (``right`` then counts adopting it), ``delta`` ignored."""
    rng = sim.rng
    out = {name: np.zeros(reps, dtype=bool) for name in ("adopt", "right", "recommended", "helps_old",
                                                         "picked_good")}
    trainings = np.zeros(reps, dtype=np.int64)
    others = labels[1:]
    for rep in range(reps):
        good = others[int(rng.integers(len(others)))] if (delta > 0 or skewed) else None
        if skewed is None:
            sim.new_tune(probit_means(sim.cell, labels, good, delta))
        else:
            usual, collapsed, q = skewed
            sim.new_tune(probit_means(sim.cell, labels, None, 0.0),
                         (str(good), probit_means(sim.cell, [str(good)], good, usual)[str(good)],
                          probit_means(sim.cell, [str(good)], good, collapsed)[str(good)], q))
        plan = Plan(labels, selection_seeds=pools[0], confirmation_seeds=pools[1], design=design)
        while requests := plan.next_round():
            if requests[0].phase == "selection" and design.screen_reuse:
                for r, figures, test in zip(requests, *sim.selection(requests), strict=True):
                    plan.record_validation(r.label, r.seed, figures, test=test)
            elif requests[0].phase == "selection":
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


def calibration(sim: Simulator, reps: int = 200, seeds: int = 3) -> tuple[float, float, float, float]:
    """Simulated seed SDs (points): the validation score (``choose``'s split-half hard tier, pooled
    over 4 candidates equal to ERM), the test hard tier on ``choose``'s hard classes, the paired
    difference of two methods' test hard tiers on shared seeds, and their same-seed correlation."""
    labels = ["erm", "c1", "c2", "c3"]
    val_var, test_var, diff_var = [], [], []
    cross = erm_ss = other_ss = 0.0
    for _ in range(reps):
        sim.new_tune(probit_means(sim.cell, labels, None, 0.0))
        requests = [Request("selection", label, s) for s in range(seeds) for label in labels]
        figures = sim.validation(requests)
        runs: dict[str, list[ValidationFigures]] = {label: [] for label in labels}
        for r, f in zip(requests, figures, strict=True):
            runs[r.label].append(f)
        choice = choose(runs, "hard_tier", "erm")
        val_var.extend(statistics.variance(s.scores) for s in choice.scores)
        tests = sim.test([Request("confirmation", label, s) for s in range(seeds) for label in ("erm", "c1")],
                         choice.hard_classes)
        a = np.array([t.hard_tier for t in tests[0::2]])
        b = np.array([t.hard_tier for t in tests[1::2]])
        test_var.append(float(a.var(ddof=1)))
        diff_var.append(float((b - a).var(ddof=1)))
        cross += float(((a - a.mean()) * (b - b.mean())).sum())
        erm_ss += float(((a - a.mean()) ** 2).sum())
        other_ss += float(((b - b.mean()) ** 2).sum())
    return (100 * math.sqrt(statistics.fmean(val_var)), 100 * math.sqrt(statistics.fmean(test_var)),
            100 * math.sqrt(statistics.fmean(diff_var)), cross / math.sqrt(erm_ss * other_ss))


# ---------------------------------------------------------------------------------------------
# Designs compared
# ---------------------------------------------------------------------------------------------

def _research_module() -> Any:
    """benchmarks/tune_research_design.py (the options measured here and not shipped: binding or
    recursive boundaries, a pooled variance, max-t), imported by path under its own name (the
    benchmarks are scripts, not a package; pickling finds its designs there)."""
    if RESEARCH_NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(RESEARCH_NAME, Path(__file__).with_name(
            f"{RESEARCH_NAME}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[RESEARCH_NAME] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(RESEARCH_NAME, None)
            raise
    return sys.modules[RESEARCH_NAME]


RESEARCH = _research_module()
#: A design with research options (``research(SCREEN_DESIGN, boundaries="binding")``): the shipped
#: ``Plan`` asks it for its levels and spreads (benchmarks/tune_research_design.py).
research = RESEARCH.research


def _race(selection: tuple[int, ...], keep: tuple[int, ...], contenders: int, looks: tuple[int, ...],
          spending: str = "obrien_fleming", futility: float | None = 0.0) -> tuple[Design, int, int]:
    design = Design(selection_looks=selection, keep=keep, gate="best", contenders=contenders,
                    confirmation_looks=looks, spending=spending, futility=futility)  # type: ignore[arg-type]
    return design, selection[-1], looks[-1]


#: ``mr2 tune`` before issue 37 with the advice gated on ``confirmed`` (one selection round, ``choose``'s
#: recommendation confirmed on every confirmation seed; ERM alone still trained there when chosen).
BASELINE_DESIGN = Design(gate="margin", reference_alone=True)

#: ``DEFAULT_DESIGN`` from issue 37 until the screen (issue 44): racing selection 1 then 3 seeds, 7
#: kept, the 4 best confirmed with Bonferroni over them, looks at 3, 6, 9 fresh seeds.
RACING_DESIGN = Design(selection_looks=(1, 3), keep=(7,), gate="best", contenders=4,
                       confirmation_looks=(3, 6, 9), spending="obrien_fleming", futility=0.5)

#: Issue 44's screen: every candidate on 1 validation seed (ERM on 2), the 14 best eligible screened
#: on 2 fresh test seeds, the finalist tested alone with looks at 3, 6, 9, 12 seeds after the screen.
SCREEN_DESIGN = Design(selection_looks=(1,), gate="best", contenders=14, screen=2,
                       confirmation_looks=(3, 6, 9, 12), spending="obrien_fleming", futility=0.5)

#: Issue 44, part 4 (the default since): the 16 best by one validation seed (no overall guard) screened
#: on the first selection seed's test figures and 1 fresh seed; the finalist at 4, 8, 12, 16 seeds.
REUSE_DESIGN = replace(SCREEN_DESIGN, screen=1, screen_reuse=True, contenders=16, selection_guard="none",
                       confirmation_looks=(4, 8, 12, 16))

#: name -> (design, selection pool size, confirmation pool size). ``sA,BkC``: selection stages at A
#: then B seeds per candidate, C kept after the first; ``mM``: M contenders confirmed; ``LX,Y``:
#: confirmation looks at X, Y fresh seeds; ``fF``: futility at t <= F (0 unless given).
DESIGNS: dict[str, tuple[Design, int, int]] = {
    "default": (DEFAULT_DESIGN, DEFAULT_DESIGN.selection_seeds, DEFAULT_DESIGN.confirmation_seeds),
    "racing": (RACING_DESIGN, 3, 9),
    # Issue 44: the screen (chosen by the rule in docs/benchmarks/tune-operating-characteristics.md).
    "s1-scr2-m14-L3,6,9,12": (SCREEN_DESIGN, 2, 14),
    # Issue 44, part 3: the screen with binding levels (the search's winner: Pocock-type spending).
    "s1-scr2-m14-L3,6,9,12-binding": (research(SCREEN_DESIGN, boundaries="binding"), 2, 14),
    "s1-scr2-m14-L3,6,9,12-binding-pocock": (research(SCREEN_DESIGN, boundaries="binding", spending="pocock"),
                                             2, 14),
    # Issue 44, part 4: the screen's first seed is the selection run's test figures (screen_reuse).
    "s1-scr1r-m14-L3,6,9,12": (replace(SCREEN_DESIGN, screen=1, screen_reuse=True), 2, 13),
    "s1-scr1r-m16-L4,8,12,16-noguard": (REUSE_DESIGN, 2, 17),
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
    # Issue 44: the confirmation's spread pooled over ERM and the contenders, and a max-t level.
    "pooled": (research(RACING_DESIGN, variance="pooled"), 3, 9),
    "pooled-maxt": (research(RACING_DESIGN, variance="pooled", multiplicity="max_t"), 3, 9),
    "pooled-maxt-k8m5": (research(RACING_DESIGN, variance="pooled", multiplicity="max_t", keep=(8,),
                                  contenders=5), 3, 9),
    "pooled-maxt-k6m4": (research(RACING_DESIGN, variance="pooled", multiplicity="max_t", keep=(6,)), 3, 9),
    "pooled-maxt-pocock": (research(RACING_DESIGN, variance="pooled", multiplicity="max_t",
                                    spending="pocock"), 3, 9),
    "noguard": (replace(RACING_DESIGN, selection_guard="none"), 3, 9),
    # Issue 44: seeds for the candidates still in doubt (three racing stages, the same trainings).
    "s1,2,3k9,5": (replace(RACING_DESIGN, selection_looks=(1, 2, 3), keep=(9, 5)), 3, 9),
    "s1,2,3k10,6": (replace(RACING_DESIGN, selection_looks=(1, 2, 3), keep=(10, 6)), 3, 9),
    "pooled-maxt-noguard": (research(RACING_DESIGN, variance="pooled", multiplicity="max_t",
                                     selection_guard="none"), 3, 9),
}


def pools_for(name: str) -> tuple[Sequence[int], Sequence[int]]:
    design, selection, confirmation = DESIGNS[name]
    return SELECTION_POOL[:selection], CONFIRMATION_POOL[:max(confirmation, design.confirmation_seeds)]


Rows = dict[str, dict[int, dict[str, dict[str, float]]]]


def _cell_results(job: tuple[int, Cell, argparse.Namespace, list[str], float]
                  ) -> tuple[tuple[float, float, float, float] | None, Rows]:
    """One cell: its calibration (if asked) and every design x candidate count x scenario, in that
    order, from the cell's own generator ``[seed, cell index]``."""
    i, cell, args, scenarios, start = job
    sim = Simulator(cell, np.random.default_rng([args.seed, i]))
    calibrated = calibration(sim, args.calibration_reps) if args.calibration_reps else None
    rows: Rows = {}
    for design_name in args.design:
        design, _, _ = DESIGNS[design_name]
        pools = pools_for(design_name)
        for count in args.candidates:
            labels = labels_for(count)
            table = rows.setdefault(design_name, {}).setdefault(count, {})
            for scenario in scenarios:
                t0 = time.time()
                skewed = SKEWED if scenario == "skewed" else None
                delta = 0.0 if skewed else float(scenario)
                o = run_scenario(sim, design, labels, delta, args.reps, pools, skewed=skewed)
                table[scenario] = {
                    "adopt": float(o.adopt.mean()), "right": float(o.right.mean()),
                    "useless": float((o.adopt & ~o.right).mean()),
                    "picked_good": float(o.picked_good.mean()),
                    "trainings_mean": float(o.trainings.mean()), "trainings_max": int(o.trainings.max()),
                }
                print(f"  [{time.time() - start:7.1f}s] {design_name} {count} {cell.name} {scenario}: "
                      f"adopt {100 * o.adopt.mean():.1f}% right {100 * o.right.mean():.1f}% "
                      f"picked {100 * o.picked_good.mean():.1f}% "
                      f"trainings {o.trainings.mean():.1f}/{o.trainings.max()} ({time.time() - t0:.1f}s)",
                      file=sys.stderr, flush=True)
    return calibrated, rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--design", nargs="+", default=["default"], choices=sorted(DESIGNS))
    parser.add_argument("--candidates", nargs="+", type=int, default=[17])
    parser.add_argument("--deltas", nargs="+", type=float, default=[0.0, 0.5, 1.0, 2.0])
    parser.add_argument("--no-skewed", action="store_true", help="leave out the left-skewed null")
    parser.add_argument("--reps", type=int, default=200, help="tunes per cell and scenario")
    parser.add_argument("--cells", nargs="+", default=list(CELLS), choices=CELLS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calibration-reps", type=int, default=200)
    parser.add_argument("--seed-corr", type=float, default=None,
                        help="what-if: every cell's same-seed correlation kappa set to this (common random "
                             "numbers); a run's own seed SD is kept: the paired SD shrinks with 1 - kappa")
    parser.add_argument("--extract", action="store_true", help="rebuild the cells file and exit")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument("--workers", type=int, default=1,
                        help="cells simulated in parallel processes (the figures do not depend on it)")
    args = parser.parse_args(argv)
    if args.extract:
        CELLS_FILE.write_text(json.dumps(extract(args.seed), indent=1) + "\n")
        print(f"wrote {CELLS_FILE}")
        return {}
    cells = {c["name"]: Cell.from_dict(c) for c in load_cells()}
    if args.seed_corr is not None:
        for cell in cells.values():
            # A run's own SD is unchanged; the paired difference's shrinks with 1 - kappa.
            cell.recorded_diff_sd *= math.sqrt((1 - args.seed_corr) / (1 - cell.seed_corr))
            cell.seed_corr = args.seed_corr
    results: dict[str, Any] = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    start = time.time()
    scenarios: list[str] = [f"{d:g}" for d in args.deltas] + ([] if args.no_skewed else ["skewed"])
    jobs = [(i, cells[name], args, scenarios, start) for i, name in enumerate(args.cells)]
    if args.workers > 1:
        # One process per cell; each cell's generator is [seed, cell index] and runs its scenarios in
        # the same order as the serial loop, so the figures do not depend on --workers.
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            per_cell = pool.map(_cell_results, jobs, chunksize=1)
    else:
        per_cell = [_cell_results(job) for job in jobs]
    if args.calibration_reps:
        print("## Calibration: seed SDs (points) recorded in the re-run records (degrees of freedom) "
              "-> simulated\n")
        print("| cell | K | val / class | test / class | tau | rho | kappa | val score SD | test hard SD "
              "| paired-difference SD | same-seed correlation |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, (calibrated, _) in zip(args.cells, per_cell, strict=True):
            cell = cells[name]
            val_sd, test_sd, diff_sd, corr = calibrated
            results.setdefault("calibration", {})[name] = {
                "val_sd": [cell.recorded_val_sd, val_sd], "test_sd": [cell.recorded_test_sd, test_sd],
                "diff_sd": [cell.recorded_diff_sd, diff_sd], "seed_corr": [cell.recorded_seed_corr, corr]}
            df = cell.df or {}
            print(f"| {name} | {cell.num_classes} | {cell.val_per_class} | {cell.test_per_class} | "
                  f"{cell.tau:g} | {cell.rho:g} | {cell.seed_corr:g} | "
                  f"{cell.recorded_val_sd:.2f} ({df.get('val', '?')}) -> {val_sd:.2f} | "
                  f"{cell.recorded_test_sd:.2f} ({df.get('test', '?')}) -> {test_sd:.2f} | "
                  f"{cell.recorded_diff_sd:.2f} ({df.get('diff', '?')}) -> {diff_sd:.2f} | "
                  f"{cell.recorded_seed_corr:+.2f} -> {corr:+.2f} |", flush=True)
    for design_name in args.design:
        design, _, _ = DESIGNS[design_name]
        for count in args.candidates:
            table = {name: rows[design_name][count]
                     for name, (_, rows) in zip(args.cells, per_cell, strict=True)}
            results.setdefault("designs", {}).setdefault(design_name, {})[str(count)] = table
            print_tables(design_name, design, count, table, scenarios, args.reps)
    print(f"\n{time.time() - start:.0f} s in all; seed {args.seed}, {args.reps} tunes per cell and scenario.")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return results


def print_tables(design_name: str, design: Design, count: int, table: dict[str, dict[str, dict[str, float]]],
                 scenarios: Sequence[str], reps: int) -> None:
    """Per cell: P(adopt) under the null and the skewed null, P(adopt the good one) at each delta,
    P(the good one among the contenders) and the mean trainings (null / alternatives); the mean row
    with the binomial SE of the mean of the 10 cells' rates."""
    print(f"\n## Design `{design_name}` ({design.to_dict()}), {count} candidates vs ERM, {reps} tunes "
          "per cell and scenario (%; trainings per tune)\n")
    alts = [s for s in scenarios if s not in ("0", "skewed")]
    header = ["cell"]
    header += ["null: adopt"] if "0" in scenarios else []
    header += ["skewed null: adopt (adopt it)"] if "skewed" in scenarios else []
    header += [f"+{d}: adopt it (picked)" for d in alts]
    header += ["trainings null / alt (max)"]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    columns: dict[str, list[float]] = {}

    def add(key: str, value: float) -> float:
        columns.setdefault(key, []).append(value)
        return value

    for name, rows in table.items():
        values = []
        if "0" in rows:
            values.append(f"{100 * add('null', rows['0']['adopt']):.1f}")
        if "skewed" in rows:
            values.append(f"{100 * add('skewed', rows['skewed']['adopt']):.1f} "
                          f"({100 * add('skewed_it', rows['skewed']['right']):.1f})")
        for d in alts:
            right, picked = add(d, rows[d]["right"]), add(d + "p", rows[d]["picked_good"])
            values.append(f"{100 * right:.1f} ({100 * picked:.0f})")
        null_t = add("tn", rows["0"]["trainings_mean"]) if "0" in rows else math.nan
        alt_t = add("ta", statistics.fmean(rows[d]["trainings_mean"] for d in alts)) if alts else math.nan
        top = max(r["trainings_max"] for r in rows.values())
        add("tx", top)
        values.append(f"{null_t:.1f} / {alt_t:.1f} ({top})")
        print(f"| {name} | " + " | ".join(values) + " |")

    def mean_se(key: str) -> str:
        v = np.asarray(columns[key])
        se = math.sqrt(float((v * (1 - v)).sum()) / reps) / v.size
        return f"**{100 * v.mean():.1f}** ± {100 * se:.1f}"

    means = []
    if "0" in table[next(iter(table))]:
        means.append(f"{mean_se('null')} (max {100 * max(columns['null']):.1f})")
    if "skewed" in columns:
        means.append(f"{mean_se('skewed')} ({100 * statistics.fmean(columns['skewed_it']):.1f})")
    for d in alts:
        means.append(f"{mean_se(d)} ({100 * statistics.fmean(columns[d + 'p']):.0f})")
    tn = statistics.fmean(columns["tn"]) if "tn" in columns else math.nan
    ta = statistics.fmean(columns["ta"]) if "ta" in columns else math.nan
    means.append(f"{tn:.1f} / {ta:.1f} ({max(columns['tx']):.0f})")
    print("| **mean** | " + " | ".join(means) + " |", flush=True)


if __name__ == "__main__":
    main()
