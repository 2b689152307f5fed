"""``ClasswiseDisparity``: the class-wise disparity report as a :class:`torchmetrics.Metric`.

The state is one K x K confusion matrix (rows: true class), an integer sum, so torchmetrics'
distributed synchronisation (``dist_reduce_fx="sum"``) is exact and every rank computes the same
report. ``compute()`` returns :class:`mr2.report.DisparityReport`; ``to_log_dict(prefix)`` returns a
flat ``{name: float}`` that ``LightningModule.log_dict`` and TensorBoard's ``add_scalars`` accept:

- ``{prefix}overall``, ``{prefix}worst_class_accuracy``, ``{prefix}best_class_accuracy``,
  ``{prefix}difference``, ``{prefix}mean_class_accuracy``, ``{prefix}std``, ``{prefix}bottom_mean``;
- ``{prefix}tier/{tier}`` for each tier when a fixed :class:`mr2.report.TierSplit` is given;
- ``{prefix}class_accuracy/{class name}`` for every class (the id when no names are given; NaN for a
  class without samples).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

try:
    from torchmetrics import Metric
except ModuleNotFoundError as error:  # pragma: no cover - exercised only without the extra
    raise ModuleNotFoundError(
        "mr2.metrics needs torchmetrics: pip install 'mr2[metrics]'"
    ) from error

from mr2.checks import is_int
from mr2.report.confusion import confusion_matrix
from mr2.report.disparity import DisparityReport
from mr2.report.exceptions import ReportError
from mr2.report.tiers import TierSplit

__all__ = ["ClasswiseDisparity"]

NUM_CLASSES_INVALID = "num_classes must be a positive integer, got {value!r}"
CLASS_NAMES_MISMATCH = "got {num_names} class names for {num_classes} classes; pass one name per class"
TIERS_MISMATCH = "the tier split was made for {expected} classes, the metric has {actual}"

#: The summary metrics of ``to_log_dict``: (log name, DisparityReport summary key).
_LOGGED = (
    ("overall", "overall"),
    ("worst_class_accuracy", "group_min"),
    ("best_class_accuracy", "group_max"),
    ("difference", "difference"),
    ("mean_class_accuracy", "mean_class_accuracy"),
    ("std", "std"),
    ("bottom_mean", "bottom_mean"),
)


class ClasswiseDisparity(Metric):
    """Per-class accuracy disparity of a classifier, accumulated over batches and ranks.

    Args:
        num_classes: K.
        class_names: optional K names (used by the report and the log names).
        tiers: optional fixed tier split (ranked on a reference run); without it the report ranks
            the run by its own accuracy and ``to_log_dict`` logs no tier.
        bottom_fraction: fraction of the worst classes averaged in ``bottom_mean``.
        **kwargs: torchmetrics' options (``process_group``, ``dist_sync_on_step``, ...).

    Example:
        >>> metric = ClasswiseDisparity(3, class_names=["cat", "dog", "fox"])
        >>> metric.update(torch.tensor([0, 1, 1, 2]), torch.tensor([0, 1, 2, 2]))
        >>> report = metric.compute()
        >>> report.by_class.tolist(), report.worst_class()
        ([1.0, 1.0, 0.5], 2)
        >>> metric.to_log_dict("val/")["val/class_accuracy/fox"]
        0.5
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    confusion: torch.Tensor

    def __init__(
        self,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        *,
        tiers: TierSplit | None = None,
        bottom_fraction: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_int(num_classes) or num_classes < 1:
            raise ReportError(NUM_CLASSES_INVALID.format(value=num_classes))
        if class_names is not None and len(class_names) != num_classes:
            raise ReportError(
                CLASS_NAMES_MISMATCH.format(num_names=len(class_names), num_classes=num_classes)
            )
        if tiers is not None and tiers.num_classes != num_classes:
            raise ReportError(TIERS_MISMATCH.format(expected=tiers.num_classes, actual=num_classes))
        self.num_classes = num_classes
        self.class_names = list(class_names) if class_names is not None else None
        self.tiers = tiers
        self.bottom_fraction = bottom_fraction
        self.add_state(
            "confusion",
            default=torch.zeros(num_classes, num_classes, dtype=torch.int64),
            dist_reduce_fx="sum",
        )

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Add a batch: predicted ids [N] or logits/probabilities [N, K], and targets [N]."""
        self.confusion += confusion_matrix(preds, target, self.num_classes).to(self.confusion.device)

    def compute(self) -> DisparityReport:
        """The report of every sample seen (on every rank)."""
        return DisparityReport(
            self.confusion,
            class_names=self.class_names,
            tiers=self.tiers,
            bottom_fraction=self.bottom_fraction,
        )

    def to_log_dict(self, prefix: str = "") -> dict[str, float]:
        """The report as a flat ``{name: float}`` (see the module docstring for the names)."""
        report = self.compute()
        summary = report.summary()
        logged = {f"{prefix}{name}": float(summary[key]) for name, key in _LOGGED}
        if self.tiers is not None:
            for name, value in report.tier_accuracy().items():
                logged[f"{prefix}tier/{name}"] = float(value)
        names = self.class_names or [str(k) for k in range(self.num_classes)]
        for name, value in zip(names, report.by_class.tolist(), strict=True):
            logged[f"{prefix}class_accuracy/{name}"] = float(value)
        return logged
