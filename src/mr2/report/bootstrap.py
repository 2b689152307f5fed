"""Bootstrap confidence intervals over test samples for the disparity metrics.

Every metric of the report depends on the test set only through the per-class counts
``(c_k, n_k)`` (correct and total samples of class k), so resampling test samples reduces to
resampling those counts, which is vectorised over all resamples and classes at once:

- ``stratified=True`` (default): the test samples of each class are resampled within the class, so
  ``n_k`` stays fixed and ``c_k* ~ Binomial(n_k, c_k / n_k)``. This matches a test set whose class
  composition is fixed by design (balanced test sets, as in the paper) and never empties a class.
- ``stratified=False``: the N test samples are resampled as a whole; the 2K cells
  ("class k, correct" / "class k, wrong") are drawn as ``Multinomial(N, counts / N)``, so ``n_k``
  varies and a rare class can be absent from a resample (it is then left out of that resample's
  summaries).

The interval is the percentile interval ``[q_{(1-conf)/2}, q_{(1+conf)/2}]`` of the resampled
metric; ``std`` is the bootstrap standard error. The random stream is numpy's ``default_rng(seed)``
(seed 0 by default), so a report is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from mr2.checks import is_int
from mr2.report.exceptions import ReportError
from mr2.report.serialization import json_safe
from mr2.report.summary import class_summary
from mr2.report.tiers import TierSplit
from mr2.report.validation import validate_confusion

__all__ = ["ConfidenceInterval", "bootstrap_confusion", "resample_class_counts"]

_NUM_RESAMPLES_INVALID = "num_resamples must be a positive integer, got {value!r}"
#: The most bootstrap resamples (the sweep spec's ``report.bootstrap`` limit too): 10^12 used to run
#: for a minute, take 3 GB and end in a MemoryError.
MAX_RESAMPLES = 100_000
NUM_RESAMPLES_TOO_LARGE = (
    "{value} bootstrap resamples is above the limit of {limit} (the intervals' resampling error is "
    "negligible long before: 1,000 is the default); use at most {limit}"
)
SEED_INVALID = "the bootstrap seed must be a non-negative integer or a numpy Generator, got {value!r}"
_CONFIDENCE_INVALID = "confidence must be in (0, 1), got {value!r}"
_UNKNOWN_METRIC = "unknown metric {name!r}; available: {available}"
_STATISTIC_SHAPE = (
    "statistic {name!r} must return one value per resample (shape [{expected}]), got shape {actual}"
)

#: A custom statistic: (correct [B, K], total [B, K]) -> values [B].
Statistic = Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]]

#: Resamples drawn per chunk are limited to about this many cells (memory bound for K = 1000).
_CHUNK_CELLS = 1 << 22


@dataclass(frozen=True)
class ConfidenceInterval:
    """A bootstrap confidence interval.

    Attributes:
        estimate: the metric on the original test set.
        low: lower percentile bound.
        high: upper percentile bound.
        std: standard deviation of the resampled metric (bootstrap standard error).
        confidence: the nominal coverage, e.g. 0.95.
        num_resamples: resamples where the metric was defined (not NaN).
    """

    estimate: float
    low: float
    high: float
    std: float
    confidence: float
    num_resamples: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (NaN as null)."""
        return dict(json_safe(asdict(self)))


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and (not is_int(seed) or seed < 0):
        raise ReportError(SEED_INVALID.format(value=seed))
    return np.random.default_rng(seed)


def resample_class_counts(
    correct: ArrayLike,
    total: ArrayLike,
    num_resamples: int,
    *,
    stratified: bool = True,
    seed: int | np.random.Generator | None = 0,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Bootstrap resamples of per-class (correct, total) counts.

    Args:
        correct: correct samples per class, shape [K].
        total: samples per class, shape [K].
        num_resamples: B.
        stratified: resample within classes (fixed ``total``) or over the whole test set.
        seed: seed or generator.

    Returns:
        ``(correct*, total*)``, each int64 of shape [B, K].

    Example:
        >>> c, t = resample_class_counts([5, 0], [10, 4], 3, seed=1)
        >>> t.tolist(), bool((c[:, 1] == 0).all())
        ([[10, 4], [10, 4], [10, 4]], True)
    """
    if not is_int(num_resamples) or num_resamples < 1:
        raise ReportError(_NUM_RESAMPLES_INVALID.format(value=num_resamples))
    c = np.asarray(correct, dtype=np.int64)
    n = np.asarray(total, dtype=np.int64)
    rng = _rng(seed)
    num_classes = c.shape[0]
    if stratified:
        p = np.divide(c, n, out=np.zeros(num_classes), where=n > 0)
        return rng.binomial(n, p, size=(num_resamples, num_classes)), np.broadcast_to(
            n, (num_resamples, num_classes)
        ).copy()
    # Cells: [correct of class 0..K-1, wrong of class 0..K-1].
    cells = np.concatenate([c, n - c]).astype(np.float64)
    draws = rng.multinomial(int(n.sum()), cells / cells.sum(), size=num_resamples)
    resampled_correct = draws[:, :num_classes]
    return resampled_correct, resampled_correct + draws[:, num_classes:]


def bootstrap_confusion(
    confusion: ArrayLike | torch.Tensor,
    *,
    metrics: Sequence[str] | None = None,
    statistics: Mapping[str, Statistic] | None = None,
    tiers: TierSplit | None = None,
    bottom_fraction: float = 0.1,
    num_resamples: int = 1000,
    confidence: float = 0.95,
    stratified: bool = True,
    seed: int | np.random.Generator | None = 0,
) -> dict[str, ConfidenceInterval]:
    """Bootstrap confidence intervals of disparity metrics of one confusion matrix.

    Args:
        confusion: K x K confusion matrix.
        metrics: names from :func:`mr2.report.summary.summary_metric_names` (default: all,
            including ``tier:<name>`` when ``tiers`` is given).
        statistics: extra custom metrics, ``{name: f(correct [B, K], total [B, K]) -> [B]}``.
        tiers: fixed tier split (kept fixed across resamples: the tiers are a property of the
            reference run, not of this run's test noise).
        bottom_fraction: fraction for ``bottom_mean``.
        num_resamples: B.
        confidence: nominal coverage of the percentile interval.
        stratified: resample within classes (default) or over all test samples.
        seed: seed or numpy generator, for reproducibility.

    Returns:
        ``{name: ConfidenceInterval}``.

    Example:
        >>> ci = bootstrap_confusion([[90, 10], [30, 70]], metrics=["overall"], seed=0)
        >>> ci["overall"].estimate, ci["overall"].low < 0.8 < ci["overall"].high
        (0.8, True)
    """
    if not 0.0 < confidence < 1.0:
        raise ReportError(_CONFIDENCE_INVALID.format(value=confidence))
    if not is_int(num_resamples) or num_resamples < 1:
        raise ReportError(_NUM_RESAMPLES_INVALID.format(value=num_resamples))
    if num_resamples > MAX_RESAMPLES:
        raise ReportError(NUM_RESAMPLES_TOO_LARGE.format(value=num_resamples, limit=MAX_RESAMPLES))
    _rng(seed)  # a bad seed is refused before any work
    matrix = validate_confusion(confusion)
    total = matrix.sum(axis=1)
    correct = np.diagonal(matrix).copy()
    estimate = class_summary(correct, total, tiers=tiers, bottom_fraction=bottom_fraction)
    names = list(estimate) if metrics is None else list(metrics)
    for name in names:
        if name not in estimate:
            raise ReportError(_UNKNOWN_METRIC.format(name=name, available=", ".join(estimate)))
    custom = dict(statistics or {})
    point = {name: float(estimate[name]) for name in names}
    for name, fn in custom.items():
        value = np.asarray(fn(correct[None].astype(np.float64), total[None].astype(np.float64)))
        if value.shape != (1,):
            raise ReportError(_STATISTIC_SHAPE.format(name=name, expected=1, actual=value.shape))
        point[name] = float(value[0])

    rng = _rng(seed)
    chunk = max(1, _CHUNK_CELLS // (2 * matrix.shape[0]))
    samples: dict[str, list[NDArray[np.float64]]] = {name: [] for name in point}
    for start in range(0, num_resamples, chunk):
        size = min(chunk, num_resamples - start)
        c_b, n_b = resample_class_counts(correct, total, size, stratified=stratified, seed=rng)
        resampled = class_summary(c_b, n_b, tiers=tiers, bottom_fraction=bottom_fraction)
        for name in names:
            samples[name].append(resampled[name])
        for name, fn in custom.items():
            value = np.asarray(fn(c_b.astype(np.float64), n_b.astype(np.float64)), dtype=float)
            if value.shape != (size,):
                raise ReportError(
                    _STATISTIC_SHAPE.format(name=name, expected=size, actual=value.shape)
                )
            samples[name].append(value)

    alpha = (1.0 - confidence) / 2.0
    result: dict[str, ConfidenceInterval] = {}
    for name, parts in samples.items():
        values = np.concatenate(parts)
        values = values[~np.isnan(values)]
        if values.size == 0:
            low = high = spread = float("nan")
        else:
            low, high = (float(q) for q in np.quantile(values, [alpha, 1.0 - alpha]))
            spread = float(values.std(ddof=1)) if values.size > 1 else 0.0
        result[name] = ConfidenceInterval(
            estimate=point[name],
            low=low,
            high=high,
            std=spread,
            confidence=confidence,
            num_resamples=int(values.size),
        )
    return result
