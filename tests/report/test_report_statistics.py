"""Statistics over seeds and classes, against float64 loop oracles written from the textbook formulas
(the implementation wraps scipy.stats; the oracles do not)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from mr2.report import statistics as statistics_module
from mr2.report.exceptions import ReportError
from mr2.report.statistics import mean_std, nan_mean_rows, paired_t_test, sign_test, spearman


def student_t_two_sided(t: float, dof: int) -> float:
    """P(|T_dof| > |t|) from the regularized incomplete beta function."""
    return float(special.betainc(dof / 2.0, 0.5, dof / (dof + t * t)))


def oracle_paired_t(a: list[float], b: list[float]) -> tuple[float, float, float]:
    d = [x - y for x, y in zip(a, b) if not (math.isnan(x) or math.isnan(y))]
    n = len(d)
    mean = sum(d) / n
    variance = sum((v - mean) ** 2 for v in d) / (n - 1)
    t = mean / math.sqrt(variance / n)
    return mean, t, student_t_two_sided(t, n - 1)


def oracle_ranks(values: list[float]) -> list[float]:
    """Average ranks (1-based), ties sharing their mean rank, by comparing every pair."""
    ranks = []
    for v in values:
        below = sum(1 for w in values if w < v)
        equal = sum(1 for w in values if w == v)
        ranks.append(below + (equal + 1) / 2.0)
    return ranks


def oracle_spearman(x: list[float], y: list[float]) -> tuple[float, float]:
    pairs = [(a, b) for a, b in zip(x, y) if not (math.isnan(a) or math.isnan(b))]
    rx = oracle_ranks([a for a, _ in pairs])
    ry = oracle_ranks([b for _, b in pairs])
    n = len(pairs)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    rho = cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    t = rho * math.sqrt((n - 2) / (1 - rho * rho))
    return rho, student_t_two_sided(t, n - 2)


def oracle_sign_p(better: int, worse: int) -> float:
    n = better + worse
    k = min(better, worse)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail) if better != worse else 1.0


@pytest.mark.parametrize("seed", range(6))
def test_paired_t_test_matches_the_formula(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3 + seed
    a = rng.normal(0.7, 0.01, n)
    b = a - rng.normal(0.004, 0.01, n)
    if seed == 5:
        a[1] = np.nan  # the pair is dropped
    ours = paired_t_test(a, b)
    mean, t, p = oracle_paired_t(a.tolist(), b.tolist())
    assert ours.difference == pytest.approx(mean, rel=1e-12)
    assert ours.statistic == pytest.approx(t, rel=1e-10)
    assert ours.pvalue == pytest.approx(p, rel=1e-9)
    assert ours.num_pairs == n - (seed == 5)


def test_paired_t_test_degenerate_cases() -> None:
    single = paired_t_test([0.7], [0.6])
    assert math.isnan(single.pvalue) and math.isnan(single.statistic)
    assert single.difference == pytest.approx(0.1)
    # Equal differences up to rounding (0.8 - 0.7 vs 0.7 - 0.6): t = inf, p = 0, no scipy warning.
    constant = paired_t_test([0.7, 0.8], [0.6, 0.7])
    assert (constant.statistic, constant.pvalue) == (math.inf, 0.0)
    assert paired_t_test([0.6, 0.7], [0.7, 0.8]).statistic == -math.inf
    same = paired_t_test([0.7, 0.8], [0.7, 0.8])
    assert (same.difference, same.statistic, same.pvalue) == (0.0, 0.0, 1.0)
    with pytest.raises(ReportError) as info:
        paired_t_test([0.7, 0.8], [0.7])
    assert str(info.value) == statistics_module.SAMPLES_MISMATCH.format(a=(2,), b=(1,))


@pytest.mark.parametrize("seed", range(5))
def test_spearman_matches_the_formula_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, 30).astype(float)
    y = x + rng.integers(0, 4, 30)
    if seed == 4:
        x[3] = np.nan
    ours = spearman(x, y)
    rho, p = oracle_spearman(x.tolist(), y.tolist())
    assert ours.rho == pytest.approx(rho, abs=1e-12)
    assert ours.pvalue == pytest.approx(p, rel=1e-8)
    assert ours.n == 30 - (seed == 4)


def test_spearman_degenerate_cases() -> None:
    constant = spearman([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0])
    assert math.isnan(constant.rho) and math.isnan(constant.pvalue) and constant.n == 4
    assert math.isnan(spearman([1.0, 2.0], [1.0, 2.0]).rho)
    perfect = spearman([1.0, 2.0, 3.0, 4.0], [40.0, 30.0, 20.0, 10.0])
    assert (perfect.rho, perfect.pvalue) == (-1.0, 0.0)
    with pytest.raises(ReportError) as info:
        spearman([1.0, 2.0], [1.0])
    assert str(info.value) == statistics_module.LENGTH_MISMATCH.format(x=(2,), y=(1,))


def test_sign_test_matches_the_binomial_sum() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 10, 50) / 10
    b = rng.integers(0, 10, 50) / 10
    ours = sign_test(a, b)
    better = sum(1 for x, y in zip(a, b) if x > y)
    worse = sum(1 for x, y in zip(a, b) if x < y)
    assert (ours.better, ours.worse, ours.ties) == (better, worse, 50 - better - worse)
    assert ours.pvalue == pytest.approx(oracle_sign_p(better, worse), rel=1e-12)
    assert math.isnan(sign_test([0.5, np.nan], [0.5, 0.2]).pvalue)


def test_mean_std_and_nan_mean_rows() -> None:
    mean, std, n = mean_std([0.70, 0.72, 0.74, np.nan])
    assert (mean, n) == (pytest.approx(0.72), 3)
    assert std == pytest.approx(0.02)
    assert math.isnan(mean_std([0.7])[1])
    assert all(math.isnan(v) for v in mean_std([])[:2])
    rows = np.array([[0.5, np.nan, 1.0], [1.0, np.nan, np.nan]])
    np.testing.assert_array_equal(nan_mean_rows(rows), [0.75, np.nan, 1.0])
