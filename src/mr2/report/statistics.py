"""Statistics over seeds and classes: mean ± std, paired t-test, sign test, Spearman correlation.

Thin wrappers of :mod:`scipy.stats` (``ttest_rel``, ``binomtest``, ``spearmanr``) that drop NaN pairs
and guard the degenerate inputs where scipy returns NaN with a warning:

- paired t-test: differences of the same value on every seed (zero spread) give ``t = +-inf, p = 0``
  (or ``t = 0, p = 1`` when every difference is 0). Accuracies are ratios of counts, so "the same
  value" is judged up to rounding (``0.8 - 0.7`` vs ``0.7 - 0.6``);
- Spearman: a constant input (or fewer than 3 pairs) gives ``rho = p = NaN``;
- sign test: no untied class gives ``p = NaN``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from mr2.report.exceptions import ReportError
from mr2.report.serialization import json_safe

__all__ = [
    "PairedTest",
    "RankCorrelation",
    "SignTest",
    "mean_std",
    "nan_mean_rows",
    "paired_t_test",
    "sign_test",
    "spearman",
]

SAMPLES_MISMATCH = "paired samples must have the same shape [n], got {a} and {b}"
LENGTH_MISMATCH = "x and y must have the same shape [K], got {x} and {y}"

#: Differences of accuracies below this are rounding noise.
_ROUNDING = 1e-12


@dataclass(frozen=True)
class PairedTest:
    """Paired t-test of ``a - b`` over seeds.

    Attributes:
        difference: mean of the paired differences.
        statistic: t (``+-inf`` when every difference is the same non-zero value).
        pvalue: two-sided p-value (NaN with fewer than 2 pairs).
        num_pairs: n.
    """

    difference: float
    statistic: float
    pvalue: float
    num_pairs: int


@dataclass(frozen=True)
class SignTest:
    """Per-class sign test: classes that improve, worsen or tie, and the binomial p-value."""

    better: int
    worse: int
    ties: int
    pvalue: float


@dataclass(frozen=True)
class RankCorrelation:
    """Spearman rank correlation with its two-sided p-value.

    Attributes:
        rho: Spearman's rho (NaN when fewer than 3 pairs or a constant input).
        pvalue: two-sided p-value of rho = 0 (t-distribution with n - 2 degrees of freedom).
        n: pairs used (classes where both values are defined).
    """

    rho: float
    pvalue: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (NaN as null)."""
        return dict(json_safe({"rho": self.rho, "pvalue": self.pvalue, "n": self.n}))


def mean_std(values: ArrayLike) -> tuple[float, float, int]:
    """Mean and sample standard deviation (ddof = 1) over seeds, ignoring NaN.

    Returns:
        ``(mean, std, n)``; std is NaN for n < 2, both NaN for n = 0.

    >>> mean_std([0.70, 0.72, np.nan])
    (0.71, 0.014142135623730963, 2)
    """
    array = np.asarray(values, dtype=np.float64)
    array = array[~np.isnan(array)]
    n = int(array.size)
    mean = float(array.mean()) if n else math.nan
    std = float(array.std(ddof=1)) if n > 1 else math.nan
    return mean, std, n


def nan_mean_rows(rows: ArrayLike) -> NDArray[np.float64]:
    """Mean over axis 0 ignoring NaN (NaN where a column is all NaN), without warnings.

    >>> nan_mean_rows([[0.5, np.nan], [1.0, np.nan]])
    array([0.75,  nan])
    """
    values = np.asarray(rows, dtype=np.float64)
    present = ~np.isnan(values)
    counts = present.sum(axis=0).astype(np.float64)
    sums = np.where(present, values, 0.0).sum(axis=0)
    return np.divide(sums, counts, out=np.full(sums.shape, np.nan), where=counts > 0)


def paired_t_test(a: ArrayLike, b: ArrayLike) -> PairedTest:
    """Two-sided paired t-test of ``a - b``: ``scipy.stats.ttest_rel`` with NaN pairs dropped.

    ``t = mean(d) / (sd(d) / sqrt(n))`` with ``n - 1`` degrees of freedom. A zero spread of the
    differences gives ``t = +-inf, p = 0`` (or ``t = 0, p = 1`` when every difference is 0) instead of
    scipy's NaN and warning.

    >>> test = paired_t_test([0.72, 0.73, 0.71], [0.70, 0.72, 0.70])
    >>> round(test.difference, 4), round(test.statistic, 3), test.num_pairs
    (0.0133, 4.0, 3)
    """
    from scipy import stats

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ReportError(SAMPLES_MISMATCH.format(a=x.shape, b=y.shape))
    keep = ~np.isnan(x) & ~np.isnan(y)
    d = x[keep] - y[keep]
    n = int(d.size)
    if n < 2:
        return PairedTest(float(d.mean()) if n else math.nan, math.nan, math.nan, n)
    mean = float(d.mean())
    if float(d.std(ddof=1)) <= _ROUNDING:
        if abs(mean) <= _ROUNDING:
            return PairedTest(0.0, 0.0, 1.0, n)
        return PairedTest(mean, math.copysign(math.inf, mean), 0.0, n)
    result = stats.ttest_rel(x[keep], y[keep])
    return PairedTest(mean, float(result.statistic), float(result.pvalue), n)


def sign_test(values: ArrayLike, reference: ArrayLike, *, atol: float = 1e-12) -> SignTest:
    """Exact two-sided sign test of ``values[k] > reference[k]`` over classes (ties and NaN dropped).

    >>> sign_test([0.9, 0.8, 0.7, 0.6], [0.8, 0.7, 0.7, 0.5])
    SignTest(better=3, worse=0, ties=1, pvalue=0.25)
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    y = np.asarray(reference, dtype=np.float64)
    keep = ~np.isnan(x) & ~np.isnan(y)
    diff = x[keep] - y[keep]
    tied = np.abs(diff) <= atol
    better = int(((diff > 0) & ~tied).sum())
    worse = int(((diff < 0) & ~tied).sum())
    trials = better + worse
    pvalue = float(stats.binomtest(better, trials, 0.5).pvalue) if trials else math.nan
    return SignTest(better, worse, int(tied.sum()), pvalue)


def spearman(x: ArrayLike, y: ArrayLike) -> RankCorrelation:
    """Spearman rank correlation of ``x`` and ``y`` over the pairs where both are not NaN.

    ``scipy.stats.spearmanr`` (Pearson's correlation of the average ranks; ``p`` from
    ``t = rho * sqrt((n - 2) / (1 - rho^2))`` with ``n - 2`` degrees of freedom), returning NaN
    instead of warning for a constant input or fewer than 3 pairs.

    Example:
        >>> r = spearman([1.0, 2.0, 3.0, 4.0], [0.1, 0.4, 0.3, 0.9])
        >>> round(r.rho, 3), r.n
        (0.8, 4)
    """
    from scipy import stats

    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ReportError(LENGTH_MISMATCH.format(x=a.shape, y=b.shape))
    keep = ~np.isnan(a) & ~np.isnan(b)
    n = int(keep.sum())
    a, b = a[keep], b[keep]
    if n < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return RankCorrelation(math.nan, math.nan, n)
    result = stats.spearmanr(a, b)
    return RankCorrelation(float(result.statistic), float(result.pvalue), n)
