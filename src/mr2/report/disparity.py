"""Class-wise disparity of one evaluated run, from its confusion matrix (fairlearn's vocabulary).

With ``C`` the K x K confusion matrix (rows: true class), ``n_k = sum_j C[k, j]`` the test samples of
class k and ``c_k = C[k, k]`` the correct ones:

- ``overall = sum_k c_k / sum_k n_k`` (sample-weighted accuracy);
- ``by_class[k] = c_k / n_k``, the per-class accuracy (recall); NaN when ``n_k = 0``;
- ``group_min()`` / ``group_max()``: worst / best per-class accuracy;
- ``difference()``: ``max_k acc_k - min_k acc_k`` ("between_groups") or
  ``max_k |acc_k - overall|`` ("to_overall");
- ``ratio()``: ``min_k acc_k / max_k acc_k`` ("between_groups") or
  ``min_k min(acc_k / overall, overall / acc_k)`` ("to_overall");
- ``std()``: population standard deviation of the per-class accuracies (ddof = 0: the K classes are
  the whole population, not a sample); ``cv() = std() / mean_k acc_k``;
- ``bottom_mean(f)``: mean accuracy of the ``ceil(f * K)`` worst classes (at least one);
- tier accuracies: see :mod:`mr2.report.tiers`.

Classes without a test sample are NaN in ``by_class`` and left out of every summary (with a
:class:`MissingClassWarning`), never counted as 0 or 1.

Every summary is computed by :func:`class_summary` on arrays with any leading batch shape, so the
bootstrap (:mod:`mr2.report.bootstrap`) evaluates thousands of resamples in one vectorised call.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike

from mr2.report.accuracy import per_class_accuracy
from mr2.report.bootstrap import ConfidenceInterval, bootstrap_confusion
from mr2.report.confusion import confusion_matrix
from mr2.report.exceptions import MissingClassWarning, ReportError
from mr2.report.serialization import json_safe
from mr2.report.summary import BOTTOM_FRACTION_INVALID, class_summary
from mr2.report.tiers import ASSIGNMENT_MISMATCH, TierSplit, _format_ids
from mr2.report.validation import validate_confusion

__all__ = ["DisparityReport"]

CONFUSION_EMPTY = "the confusion matrix counts no sample at all; nothing was evaluated"
_CLASS_NAMES_MISMATCH = "got {num_names} class names for {num_classes} classes"
_DIFFERENCE_METHOD_INVALID = "method must be 'between_groups' or 'to_overall', got {method!r}"
_MISSING_CLASSES_WARNING = (
    "{count} of {total} classes have no sample in the evaluated split (class ids {ids}); their accuracy is "
    "NaN and they are left out of every summary"
)


def _summary_key(name: str, method: str) -> str:
    """The summary's key of ``difference`` or ``ratio`` measured by ``method``."""
    if method == "between_groups":
        return name
    if method == "to_overall":
        return f"{name}_to_overall"
    raise ReportError(_DIFFERENCE_METHOD_INVALID.format(method=method))


class DisparityReport:
    """Class-wise accuracy disparity of one run, in fairlearn MetricFrame's vocabulary.

    Args:
        confusion: K x K confusion matrix (rows: true class), numpy or torch, integer counts.
        class_names: optional names, one per class.
        tiers: a fixed :class:`TierSplit` (normally ranked by a reference run). When None, the tiers
            are ranked by this run's own accuracy and labelled ``"own accuracy"``.
        num_tiers: number of tiers when ``tiers`` is None (at most one per class with samples).
        bottom_fraction: default fraction for :meth:`bottom_mean` (0.1: the worst 10 % of classes).
        warn_missing: emit a :class:`MissingClassWarning` when some class has no test sample.

    Attributes:
        confusion: the matrix, int64 [K, K].
        support: test samples per class, int64 [K].
        correct: correctly classified samples per class, int64 [K].
        overall: overall (sample-weighted) accuracy.
        by_class: per-class accuracy (recall), float64 [K], NaN for classes without samples.
        missing_classes: ids of classes without test samples.
        tiers: the tier split used by :meth:`tier_accuracy`.

    Example:
        >>> report = DisparityReport([[9, 1, 0], [2, 7, 1], [4, 4, 2]])
        >>> round(report.overall, 4), report.by_class.tolist()
        (0.6, [0.9, 0.7, 0.2])
        >>> report.group_min(), report.worst_class(), round(report.difference(), 4)
        (0.2, 2, 0.7)
        >>> {k: round(v, 2) for k, v in report.tier_accuracy().items()}
        {'easy': 0.9, 'medium': 0.7, 'hard': 0.2}
    """

    def __init__(
        self,
        confusion: ArrayLike | torch.Tensor,
        *,
        class_names: Sequence[str] | None = None,
        tiers: TierSplit | None = None,
        num_tiers: int = 3,
        bottom_fraction: float = 0.1,
        warn_missing: bool = True,
    ) -> None:
        self.confusion = validate_confusion(confusion)
        self.num_classes = int(self.confusion.shape[0])
        if class_names is not None and len(class_names) != self.num_classes:
            raise ReportError(
                _CLASS_NAMES_MISMATCH.format(num_names=len(class_names), num_classes=self.num_classes)
            )
        if not 0.0 < bottom_fraction <= 1.0:
            raise ReportError(BOTTOM_FRACTION_INVALID.format(value=bottom_fraction))
        self.class_names = list(class_names) if class_names is not None else None
        self.support = self.confusion.sum(axis=1)
        self.correct = np.diagonal(self.confusion).copy()
        if int(self.support.sum()) == 0:
            raise ReportError(CONFUSION_EMPTY)
        self.by_class = per_class_accuracy(self.correct, self.support)
        self.overall = float(self.correct.sum() / self.support.sum())
        self.missing_classes = np.flatnonzero(self.support == 0)
        if warn_missing and self.missing_classes.size:
            warnings.warn(
                _MISSING_CLASSES_WARNING.format(
                    count=self.missing_classes.size,
                    total=self.num_classes,
                    ids=_format_ids(self.missing_classes),
                ),
                MissingClassWarning,
                stacklevel=2,
            )
        self.bottom_fraction = float(bottom_fraction)
        if tiers is None:
            with warnings.catch_warnings():
                # Missing classes were already reported above.
                warnings.simplefilter("ignore", MissingClassWarning)
                # Fewer classes with samples than tiers (K = 2, say): one class per tier.
                num_ranked = self.num_classes - self.missing_classes.size
                tiers = TierSplit.from_accuracy(
                    self.by_class, min(num_tiers, num_ranked), ranked_by="own accuracy"
                )
        elif tiers.num_classes != self.num_classes:
            raise ReportError(
                ASSIGNMENT_MISMATCH.format(actual=self.num_classes, expected=tiers.num_classes)
            )
        self.tiers = tiers
        self._summary = {
            name: float(value)
            for name, value in class_summary(
                self.correct, self.support, tiers=tiers, bottom_fraction=self.bottom_fraction
            ).items()
        }

    @classmethod
    def from_predictions(
        cls,
        preds: torch.Tensor,
        target: torch.Tensor,
        num_classes: int,
        **kwargs: Any,
    ) -> DisparityReport:
        """Build the report from predicted ids [N] (or logits [N, K]) and targets [N]."""
        return cls(confusion_matrix(preds, target, num_classes), **kwargs)

    def group_min(self) -> float:
        """Worst per-class accuracy."""
        return self._summary["group_min"]

    def group_max(self) -> float:
        """Best per-class accuracy."""
        return self._summary["group_max"]

    def worst_class(self) -> int:
        """Id of the worst class (lowest id among ties)."""
        return int(np.argmin(np.where(np.isnan(self.by_class), np.inf, self.by_class)))

    def best_class(self) -> int:
        """Id of the best class (lowest id among ties)."""
        return int(np.argmax(np.where(np.isnan(self.by_class), -np.inf, self.by_class)))

    def difference(self, method: str = "between_groups") -> float:
        """``max - min`` per-class accuracy, or ``max_k |acc_k - overall|`` for ``"to_overall"``."""
        return self._summary[_summary_key("difference", method)]

    def ratio(self, method: str = "between_groups") -> float:
        """``min / max`` per-class accuracy, or ``min_k min(acc_k/overall, overall/acc_k)``."""
        return self._summary[_summary_key("ratio", method)]

    def mean_class_accuracy(self) -> float:
        """Unweighted mean of the per-class accuracies (balanced accuracy)."""
        return self._summary["mean_class_accuracy"]

    def std(self) -> float:
        """Population standard deviation (ddof = 0) of the per-class accuracies."""
        return self._summary["std"]

    def cv(self) -> float:
        """Coefficient of variation ``std() / mean_class_accuracy()``."""
        return self._summary["cv"]

    def bottom_mean(self, fraction: float | None = None) -> float:
        """Mean accuracy of the ``ceil(fraction * K')`` worst classes (default fraction: the
        report's ``bottom_fraction``)."""
        if fraction is None or fraction == self.bottom_fraction:
            return self._summary["bottom_mean"]
        return float(
            class_summary(self.correct, self.support, bottom_fraction=fraction)["bottom_mean"]
        )

    def tier_accuracy(self) -> dict[str, float]:
        """``{tier name: mean per-class accuracy of its classes}``, easiest tier first."""
        return {name: self._summary[f"tier:{name}"] for name in self.tiers.names}

    def summary(self) -> dict[str, float]:
        """Every scalar metric by name (see :func:`summary_metric_names`)."""
        return dict(self._summary)

    def bootstrap(self, **kwargs: Any) -> dict[str, ConfidenceInterval]:
        """Bootstrap confidence intervals of every summary metric; see
        :func:`mr2.report.bootstrap.bootstrap_confusion` for the arguments."""
        kwargs.setdefault("bottom_fraction", self.bottom_fraction)
        return bootstrap_confusion(self.confusion, tiers=self.tiers, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (NaN written as null)."""
        return json_safe(
            {
                "num_classes": self.num_classes,
                "num_samples": int(self.support.sum()),
                "overall": self.overall,
                "by_class": self.by_class,
                "support": self.support,
                "class_names": self.class_names,
                "missing_classes": self.missing_classes,
                "worst_class": self.worst_class(),
                "best_class": self.best_class(),
                "bottom_fraction": self.bottom_fraction,
                "summary": self._summary,
                "tiers": {**self.tiers.to_dict(), "accuracy": self.tier_accuracy()},
            }
        )

    def __repr__(self) -> str:
        return (
            f"DisparityReport(num_classes={self.num_classes}, overall={self.overall:.4f}, "
            f"group_min={self.group_min():.4f}, group_max={self.group_max():.4f})"
        )
