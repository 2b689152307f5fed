"""Every scalar disparity metric from per-class correct and total counts, batched (pure numpy).

With ``n_k`` the test samples of class k and ``c_k`` the correct ones:

- ``overall = sum_k c_k / sum_k n_k`` (sample-weighted accuracy);
- ``group_min`` / ``group_max``: worst / best per-class accuracy ``c_k / n_k``;
- ``difference``: ``max_k acc_k - min_k acc_k``; ``difference_to_overall``: ``max_k |acc_k - overall|``;
- ``ratio``: ``min_k acc_k / max_k acc_k``; ``ratio_to_overall``:
  ``min_k min(acc_k / overall, overall / acc_k)``;
- ``mean_class_accuracy``: unweighted mean of the per-class accuracies;
- ``std``: population standard deviation (ddof = 0) of the per-class accuracies; ``cv = std / mean``;
- ``bottom_mean``: mean accuracy of the ``ceil(f * K')`` worst classes (at least one);
- ``tier:<name>``: mean per-class accuracy of each tier's classes (:mod:`mr2.report.tiers`).

Classes without samples are left out of every summary. :func:`class_summary` takes any leading batch
shape, so the bootstrap evaluates thousands of resamples in one call; :class:`DisparityReport` and
:func:`mr2.report.bootstrap.bootstrap_confusion` are both built on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from mr2.report.accuracy import per_class_accuracy
from mr2.report.exceptions import ReportError
from mr2.report.tiers import TierSplit

__all__ = ["BOTTOM_FRACTION_INVALID", "class_summary", "summary_metric_names"]

BOTTOM_FRACTION_INVALID = "bottom_fraction must be in (0, 1], got {value!r}"

#: Scalar summaries in :func:`class_summary` order (tier accuracies follow, one per tier).
_BASE_METRICS = (
    "overall",
    "group_min",
    "group_max",
    "difference",
    "difference_to_overall",
    "ratio",
    "ratio_to_overall",
    "mean_class_accuracy",
    "std",
    "cv",
    "bottom_mean",
)


def summary_metric_names(tier_names: Sequence[str] = ()) -> tuple[str, ...]:
    """Names of the scalars :func:`class_summary` returns: the base metrics, then ``tier:<name>``.

    >>> summary_metric_names(("easy", "hard"))[-2:]
    ('tier:easy', 'tier:hard')
    """
    return _BASE_METRICS + tuple(f"tier:{name}" for name in tier_names)


def _safe_divide(num: NDArray[np.float64], den: NDArray[np.float64]) -> NDArray[np.float64]:
    """num / den, NaN where den is 0 or either is NaN, without floating-point warnings."""
    ok = (den != 0) & ~np.isnan(den) & ~np.isnan(num)
    return np.divide(num, den, out=np.full(np.broadcast(num, den).shape, np.nan), where=ok)


def _bottom_count(fraction: float, num_valid: NDArray[np.int64]) -> NDArray[np.int64]:
    # Round before ceil so that 0.1 * 30 = 3.0000000000000004 gives 3 classes, not 4.
    count = np.ceil(np.round(fraction * num_valid.astype(np.float64), 9)).astype(np.int64)
    return np.clip(count, 1, None)


def class_summary(
    correct: ArrayLike,
    total: ArrayLike,
    *,
    tiers: TierSplit | None = None,
    bottom_fraction: float = 0.1,
) -> dict[str, NDArray[np.float64]]:
    """Every scalar disparity metric from per-class correct and total counts, batched.

    Args:
        correct: correctly classified samples per class, shape [..., K].
        total: test samples per class, shape [..., K] (classes with 0 are left out).
        tiers: a fixed tier split (adds ``tier:<name>`` entries), or None.
        bottom_fraction: f in (0, 1]; ``bottom_mean`` is the mean of the ``ceil(f * K')`` lowest
            per-class accuracies, K' the number of classes with samples.

    Returns:
        ``{name: array of shape [...]}`` for every name of :func:`summary_metric_names`
        (NaN where undefined, e.g. every class empty, or ``ratio`` with a best class at 0).

    Example:
        >>> out = class_summary([9, 5, 1], [10, 10, 10])
        >>> float(out["overall"]), float(out["group_min"]), float(out["difference"])
        (0.5, 0.1, 0.8)
    """
    if not 0.0 < bottom_fraction <= 1.0:
        raise ReportError(BOTTOM_FRACTION_INVALID.format(value=bottom_fraction))
    c = np.asarray(correct, dtype=np.float64)
    t = np.asarray(total, dtype=np.float64)
    acc = per_class_accuracy(c, t)
    present = t > 0
    num_valid = present.sum(axis=-1)
    any_valid = num_valid > 0

    overall = _safe_divide(c.sum(axis=-1), t.sum(axis=-1))
    low = np.where(any_valid, np.where(present, acc, np.inf).min(axis=-1), np.nan)
    high = np.where(any_valid, np.where(present, acc, -np.inf).max(axis=-1), np.nan)
    filled = np.where(present, acc, 0.0)
    mean = _safe_divide(filled.sum(axis=-1), num_valid.astype(np.float64))
    deviation = np.where(present, acc - mean[..., None], 0.0)
    std = np.sqrt(_safe_divide((deviation**2).sum(axis=-1), num_valid.astype(np.float64)))
    to_overall = np.where(
        any_valid,
        np.where(present, np.abs(acc - overall[..., None]), -np.inf).max(axis=-1),
        np.nan,
    )
    # min_k min(acc_k / overall, overall / acc_k); a class at 0 gives 0; overall = 0 gives NaN.
    up = _safe_divide(acc, np.broadcast_to(overall[..., None], acc.shape))
    down = _safe_divide(np.broadcast_to(overall[..., None], acc.shape), acc)
    per_class_ratio = np.where(acc == 0, 0.0, np.fmin(up, down))
    ratio_to_overall = np.where(
        any_valid & (overall > 0),
        np.where(present, per_class_ratio, np.inf).min(axis=-1),
        np.nan,
    )

    # Bottom-f mean: NaN sorts last, so the first `count` sorted values are the lowest present ones.
    ascending = np.sort(acc, axis=-1)
    count = _bottom_count(bottom_fraction, num_valid)
    cumulative = np.cumsum(np.where(np.isnan(ascending), 0.0, ascending), axis=-1)
    picked = np.take_along_axis(cumulative, (count - 1)[..., None], axis=-1)[..., 0]
    bottom = np.where(any_valid, picked / count, np.nan)

    out: dict[str, NDArray[np.float64]] = {
        "overall": overall,
        "group_min": low,
        "group_max": high,
        "difference": high - low,
        "difference_to_overall": to_overall,
        "ratio": _safe_divide(low, high),
        "ratio_to_overall": ratio_to_overall,
        "mean_class_accuracy": mean,
        "std": std,
        "cv": _safe_divide(std, mean),
        "bottom_mean": bottom,
    }
    if tiers is not None:
        tier_acc = tiers.accuracy(acc)
        for index, name in enumerate(tiers.names):
            out[f"tier:{name}"] = tier_acc[..., index]
    return out
