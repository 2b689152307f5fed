"""The confirmation's shared spread and shared level (issue 44, measured and not shipped):
benchmarks/tune_research_design.py's pooled_spread, max_t_critical / max_t_level, and the shipped Plan
given a ``ResearchDesign(variance="pooled", multiplicity="max_t")`` holding its level under the null,
checked against slow, obvious float64 oracles and by Monte Carlo."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import load_script
from mr2.tune.design import Plan, nominal_levels
from mr2.tune.selection import ValidationFigures
from mr2.tune.verdict import SeedFigures

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_research_design.py"
# under the name the benchmark scripts import it by (shared with them)
RD = sys.modules.get("tune_research_design") or load_script(SCRIPT, "tune_research_design")
pooled_spread, max_t_critical, max_t_level = RD.pooled_spread, RD.max_t_critical, RD.max_t_level


def _anova_oracle(blocks: list[np.ndarray]) -> tuple[float, int]:
    """Two-way (method x seed) residual mean square per block by loops, pooled; SD of a difference."""
    squares, df = 0.0, 0
    for y in blocks:
        methods, seeds = y.shape
        grand = sum(y[m][s] for m in range(methods) for s in range(seeds)) / (methods * seeds)
        for m in range(methods):
            row = sum(y[m][s] for s in range(seeds)) / seeds
            for s in range(seeds):
                column = sum(y[k][s] for k in range(methods)) / methods
                squares += (y[m][s] - row - column + grand) ** 2
        df += (methods - 1) * (seeds - 1)
    return math.sqrt(2 * squares / df), df


def test_pooled_spread_matches_the_two_way_residual_by_loops():
    rng = np.random.default_rng(0)
    blocks = [rng.normal(size=(5, 3)), rng.normal(size=(3, 3)), rng.normal(size=(2, 3)), rng.normal(size=(1, 3))]
    sd, df = pooled_spread(blocks)
    oracle_sd, oracle_df = _anova_oracle(blocks[:3])  # a one-method block has no residual
    assert df == oracle_df == 4 * 2 + 2 * 2 + 1 * 2
    assert sd == pytest.approx(oracle_sd, rel=1e-12)
    assert pooled_spread([np.ones((1, 4))]) == (pytest.approx(math.nan, nan_ok=True), 0)


def test_pooled_spread_estimates_the_paired_difference_sd_whatever_the_seed_effect():
    """With a large seed effect shared by every method, the pooled SD estimates sd(c - e), not the
    methods' own seed SD (Monte Carlo, 2,000 blocks of 5 methods x 3 seeds)."""
    rng = np.random.default_rng(1)
    sigma, seed_sd = 0.5, 3.0
    blocks = [rng.normal(0, seed_sd, size=(1, 3)) + rng.normal(0, sigma, size=(5, 3)) for _ in range(2000)]
    sd, df = pooled_spread(blocks)
    assert df == 2000 * 8
    assert sd == pytest.approx(math.sqrt(2) * sigma, rel=0.02)


def _max_t_tail_by_monte_carlo(c: float, m: int, df: int, reps: int, rng: np.random.Generator) -> float:
    """m contenders and ERM on n seeds, normal noise; each contender's mean difference over the
    pooled (two-way residual) SD: P(the largest t > c)."""
    n = 3
    methods = m + 1
    seeds_df = (methods - 1) * (n - 1)
    extra = df - seeds_df  # residual df from other independent blocks, as a chi-square
    y = rng.standard_normal((reps, methods, n))
    residual = y - y.mean(2, keepdims=True) - y.mean(1, keepdims=True) + y.mean((1, 2), keepdims=True)
    squares = (residual ** 2).sum((1, 2)) + (rng.chisquare(extra, reps) if extra > 0 else 0.0)
    sd = np.sqrt(2 * squares / df)
    t = (y[:, 1:].mean(2) - y[:, :1].mean(2)) / (sd[:, None] / math.sqrt(n))
    return float((t.max(1) > c).mean())


@pytest.mark.parametrize(("m", "df", "level"), [(4, 8, 0.05), (4, 14, 0.01), (2, 4, 0.05), (3, 30, 0.02)])
def test_max_t_critical_spends_its_level_by_monte_carlo(m, df, level):
    rng = np.random.default_rng(2)
    reps = 200_000
    c = max_t_critical(m, df, level)
    observed = _max_t_tail_by_monte_carlo(c, m, df, reps, rng)
    assert observed == pytest.approx(level, abs=4 * math.sqrt(level / reps))
    # Less than Bonferroni's critical value, more than one comparison's.
    from scipy import stats

    assert stats.t.isf(level, df) < c < stats.t.isf(level / m, df) or m == 1


def test_max_t_critical_matches_dunnett_tables_and_the_t_quantile():
    # Dunnett (1955), one-sided, 4 treatments, infinite df, 5 %: 2.16; 1 treatment: t quantile.
    assert max_t_critical(4, 10_000, 0.05) == pytest.approx(2.16, abs=0.01)
    from scipy import stats

    assert max_t_critical(1, 8, 0.05) == pytest.approx(stats.t.isf(0.05, 8), rel=1e-9)
    # Against scipy's multivariate t (randomised QMC integration, a loose tolerance).
    from scipy.stats import multivariate_t

    c = max_t_critical(3, 10, 0.05)
    shape = np.full((3, 3), 0.5) + 0.5 * np.eye(3)
    cdf = multivariate_t(shape=shape, df=10, seed=0).cdf(np.full(3, c), maxpts=2_000_000)
    assert 1 - cdf == pytest.approx(0.05, abs=5e-4)
    # Tiny levels at low df (the first look) stay exact where the quadrature resolves them.
    assert max_t_level(4, 8, 1.5e-5) > 1.5e-5 / 4


def _val(label: str, seed: int, hard: float) -> ValidationFigures:
    per_class = (hard, hard, 0.8, 0.8, 0.9, 0.9)
    correct = tuple(round(a * 10) for a in per_class)
    return ValidationFigures(f"{label}@{seed}", seed, sum(per_class) / 6, per_class,
                             half_correct=(correct, correct), half_count=((10,) * 6, (10,) * 6))


def _replica(y: np.ndarray, m: int, design: Any, looks: tuple[int, ...]) -> np.ndarray:
    """The pooled max-t confirmation written out, vectorised over tunes: y [reps, methods, seeds]
    (ERM first); adopt when a contender's p is below the look's level (no futility, no overall
    check, so every contender runs every look and the pooled df is the same in every tune)."""
    from scipy import stats

    levels = nominal_levels([n / looks[-1] for n in looks], design.alpha, design.spending)
    previous, df = 0, 0
    squares = np.zeros(y.shape[0])
    adopted = np.zeros(y.shape[0], dtype=bool)
    for n, level in zip(looks, levels):
        block = y[:, :, previous:n]
        residual = (block - block.mean(2, keepdims=True) - block.mean(1, keepdims=True)
                    + block.mean((1, 2), keepdims=True))
        squares += (residual ** 2).sum((1, 2))
        df += (block.shape[1] - 1) * (block.shape[2] - 1)
        previous = n
        pooled = np.sqrt(2 * squares / df)[:, None]  # [reps, 1]
        nominal = stats.t.sf(max_t_critical(m, df, level), df)
        diff = y[:, 1:, :n] - y[:, :1, :n]  # [reps, m, n]
        own = diff.std(2, ddof=1)
        use_pooled = pooled > own
        sd = np.where(use_pooled, pooled, own)
        t = diff.mean(2) / (sd / math.sqrt(n))
        p = np.where(use_pooled, stats.t.sf(t, df), stats.t.sf(t, n - 1))
        adopted |= (p < nominal).any(1)
    return adopted


def test_the_pooled_max_t_confirmation_holds_its_level_and_agrees_with_the_plan():
    """Null: 4 contenders equal to ERM, normal per-seed noise with a shared seed effect, looks at 3, 6
    and 9 seeds, no futility: the replica adopts at most alpha of the time (20,000 tunes) and agrees
    with Plan tune by tune (the first 100)."""
    design = RD.ResearchDesign(selection_looks=(2,), contenders=4, confirmation_looks=(3, 6, 9), futility=None,
                               variance="pooled", multiplicity="max_t")
    labels = ["erm", "a", "b", "c", "d"]
    rng = np.random.default_rng(3)
    reps = 20_000
    y = 0.7 + 0.02 * rng.standard_normal((reps, 1, 9)) + 0.01 * rng.standard_normal((reps, 5, 9))
    replica = _replica(y, 4, design, (3, 6, 9))
    for rep in range(100):
        plan = Plan(labels, selection_seeds=[0, 1], confirmation_seeds=list(range(10, 19)), design=design)
        while requests := plan.next_round():
            for r in requests:
                row = labels.index(r.label)
                if r.phase == "selection":
                    plan.record_validation(r.label, r.seed, _val(r.label, r.seed, 0.5 + 0.01 * row))
                else:
                    plan.record_test(r.label, r.seed, SeedFigures(float(y[rep, row, r.seed - 10]), 0.9))
        assert plan.advice().adopt == replica[rep], rep
    rate = float(replica.mean())
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps), rate
    assert rate >= 0.02, rate  # not vacuous: conservative (union over looks, own SD when larger)
