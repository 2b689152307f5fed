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

Class and tier names are spelled by :func:`mr2.report.log_keys.log_keys` (every character outside
``[A-Za-z0-9_.-]`` becomes ``_``: ``T-shirt/top`` is logged as ``class_accuracy/T-shirt_top``), the
spelling of the engine's TensorBoard tags.

``update`` takes what a classifier returns: logits [N, K], class ids [N], or a ``(logits, features)``
tuple or list (the first element is used). With ``validate_args=True`` (the default) it refuses
non-finite logits and class ids outside ``[0, K)``; both checks read the batch on the host, one sync
per ``update`` on an accelerator. ``validate_args=False`` skips them (torchmetrics' opt-out): a NaN
row then counts as a prediction of class 0 (``argmax`` of NaN) and an out-of-range id fails with an
indexing error or a device-side assert; use it only when the inputs are checked elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mr2.extras import needs_extra

with needs_extra("mr2.metrics", "torchmetrics", "metrics"):
    from torchmetrics import Metric

from mr2.checks import is_int
from mr2.report.confusion import confusion_matrix
from mr2.report.disparity import DisparityReport
from mr2.report.exceptions import ReportError
from mr2.report.limits import allocatable_bytes, confusion_bytes, format_bytes
from mr2.report.log_keys import log_key, log_keys
from mr2.report.tiers import TierSplit

__all__ = ["ClasswiseDisparity"]

#: How many K x K int64 matrices ``ClasswiseDisparity`` holds at its peak: the state, torchmetrics'
#: copy of it for ``reset()``, and two of a batch's counts (``update``), the report's copy
#: (``compute``) and the new state ``reset()`` builds while the old one lives (measured with K = 4000:
#: 2.06, 3.10, 3.10 and 4.11 times the state after construction, update, compute and a reset while
#: the report is held; the 0.11 is a fixed overhead, not a fifth matrix).
PEAK_MATRICES = 4

NUM_CLASSES_INVALID = "num_classes must be a positive integer, got {value!r}"
NUM_CLASSES_TOO_LARGE = (
    "ClasswiseDisparity({value}) would take {peak} of memory at its peak ({matrices} K x K int64 "
    "matrices of {size}: the state, its copy for reset(), the report's copy and a new state), "
    "more than {limit}; check num_classes (the number of classes, not of samples), or {remedy}"
)
#: ``{limit}`` and ``{remedy}`` of :data:`NUM_CLASSES_TOO_LARGE` without ``max_bytes``.
LIMIT_AVAILABLE = "the {size} this process can allocate now (available memory, address-space limit)"
REMEDY_AVAILABLE = (
    "free memory or raise the address-space limit (ulimit -v); max_bytes=N sets the limit yourself"
)
#: ``{limit}`` and ``{remedy}`` of :data:`NUM_CLASSES_TOO_LARGE` with ``max_bytes``.
LIMIT_GIVEN = "the limit max_bytes={value} ({size})"
REMEDY_GIVEN = "raise max_bytes"
ALLOCATION_FAILED = (
    "ClasswiseDisparity({value}) could not allocate its K x K int64 state of {size} ({error}); "
    "check num_classes (the number of classes, not of samples), or free memory"
)
MAX_BYTES_INVALID = "max_bytes must be a positive integer (bytes) or None, got {value!r}"
CLASS_NAMES_MISMATCH = "got {num_names} class names for {num_classes} classes; pass one name per class"
CLASS_NAMES_INVALID = "class_names must be a list of K strings (one per class), got {kind}"
TIERS_MISMATCH = "the tier split was made for {expected} classes, the metric has {actual}"
TIERS_INVALID = (
    "tiers must be a mr2.report.TierSplit ranked on a reference run (TierSplit.from_accuracy("
    "reference_per_class_accuracy)) or None, got {kind}"
)
VALIDATE_ARGS_INVALID = "validate_args must be True or False, got {value!r}"
PREDS_INVALID = (
    "update takes the classifier's output: logits [N, K] (floating point), class ids [N] (integer) "
    "or a (logits, features) tuple; got {description}"
)
TARGET_INVALID = "update's target must be a tensor of class ids [N] (integer); got {description}"
LOGITS_NOT_FINITE = (
    "logits hold {count} non-finite value(s) (NaN or infinity); the model diverged or the input "
    "holds NaN/Inf (argmax would score such a row as class 0). Nothing of this batch was counted"
)

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
        validate_args: check every batch for non-finite logits and class ids outside ``[0, K)``
            (one host sync per ``update`` on an accelerator); False skips both checks, see the module
            docstring for what that trades off.
        max_bytes: the most memory the metric may take at its peak (:func:`peak_bytes`: 4 K x K
            int64 matrices); None (the default): what this process can allocate now
            (:func:`mr2.report.limits.allocatable_bytes`), so a K that cannot fit is refused at
            construction, naming the bytes, not half-way through an evaluation.
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
        validate_args: bool = True,
        max_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not is_int(num_classes) or num_classes < 1:
            raise ReportError(NUM_CLASSES_INVALID.format(value=num_classes))
        _check_memory(num_classes, max_bytes)
        if class_names is not None:
            if isinstance(class_names, str) or not isinstance(class_names, Sequence):
                raise ReportError(CLASS_NAMES_INVALID.format(kind=type(class_names).__name__))
            wrong = next((name for name in class_names if not isinstance(name, str)), None)
            if wrong is not None:
                raise ReportError(
                    CLASS_NAMES_INVALID.format(
                        kind=f"{type(class_names).__name__} holding {type(wrong).__name__}"
                    )
                )
            if len(class_names) != num_classes:
                raise ReportError(
                    CLASS_NAMES_MISMATCH.format(num_names=len(class_names), num_classes=num_classes)
                )
        if tiers is not None:
            if not isinstance(tiers, TierSplit):
                raise ReportError(TIERS_INVALID.format(kind=type(tiers).__name__))
            if tiers.num_classes != num_classes:
                raise ReportError(TIERS_MISMATCH.format(expected=tiers.num_classes, actual=num_classes))
        if not isinstance(validate_args, bool):
            raise ReportError(VALIDATE_ARGS_INVALID.format(value=validate_args))
        super().__init__(**kwargs)
        self.validate_args = validate_args
        self.num_classes = num_classes
        self.class_names = list(class_names) if class_names is not None else None
        self.tiers = tiers
        self.bottom_fraction = bottom_fraction
        try:
            self.add_state(
                "confusion",
                default=torch.zeros(num_classes, num_classes, dtype=torch.int64),
                dist_reduce_fx="sum",
            )
        except (RuntimeError, MemoryError) as error:  # the limit was unknown, or memory went meanwhile
            if isinstance(error, RuntimeError) and "alloc" not in str(error):
                raise
            raise ReportError(
                ALLOCATION_FAILED.format(
                    value=num_classes,
                    size=format_bytes(confusion_bytes(num_classes)),
                    error=str(error).splitlines()[0] or type(error).__name__,
                )
            ) from error

    def update(
        self, preds: torch.Tensor | tuple[torch.Tensor, ...] | list[torch.Tensor], target: torch.Tensor
    ) -> None:
        """Add a batch: logits/probabilities [N, K], predicted ids [N] or a ``(logits, features)``
        tuple (what mr2's classifiers return), and targets [N].

        Raises:
            ReportError: an input of another type or shape (named in the message), non-finite
                logits or class ids outside ``[0, K)`` (with ``validate_args``).
        """
        preds = _classifier_output(preds)
        if not isinstance(target, torch.Tensor):
            raise ReportError(TARGET_INVALID.format(description=_describe(target)))
        if self.validate_args and not self._values_ok(preds, target):
            if preds.dim() == 2 and preds.is_floating_point():
                bad = int((~torch.isfinite(preds)).sum())
                if bad:
                    raise ReportError(LOGITS_NOT_FINITE.format(count=bad))
            confusion_matrix(preds, target, self.num_classes)  # raises the range error, naming it
        self.confusion += confusion_matrix(preds, target, self.num_classes, validate_args=False).to(
            self.confusion.device
        )

    def _values_ok(self, preds: torch.Tensor, target: torch.Tensor) -> bool:
        """Finite logits and class ids in ``[0, K)``, read in ONE host sync (the checks of
        ``validate_args``; the messages are made only when it fails)."""
        checks: list[torch.Tensor] = []
        if preds.dim() == 2 and preds.is_floating_point():
            checks.append(torch.isfinite(preds).all())
        for labels in (preds, target) if preds.dim() == 1 else (target,):
            if labels.numel() and not (
                labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool
            ):
                checks += [labels.min() >= 0, labels.max() < self.num_classes]
        if not checks:
            return True
        return bool(torch.stack([check.to(target.device) for check in checks]).all())

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
                logged[f"{prefix}tier/{log_key(name)}"] = float(value)
        names = log_keys(self.class_names or [str(k) for k in range(self.num_classes)])
        for name, value in zip(names, report.by_class.tolist(), strict=True):
            logged[f"{prefix}class_accuracy/{name}"] = float(value)
        return logged


def peak_bytes(num_classes: int) -> int:
    """The most memory a ``ClasswiseDisparity(num_classes)`` takes: :data:`PEAK_MATRICES` K x K int64
    matrices.

    >>> peak_bytes(1000)
    32000000
    """
    return PEAK_MATRICES * confusion_bytes(num_classes)


def _check_memory(num_classes: int, max_bytes: object) -> None:
    """Refuse a K whose peak exceeds ``max_bytes`` (None: what this process can allocate now)."""
    if max_bytes is not None and (not is_int(max_bytes) or max_bytes < 1):
        raise ReportError(MAX_BYTES_INVALID.format(value=max_bytes))
    peak = peak_bytes(num_classes)
    if max_bytes is None:
        available = allocatable_bytes()
        if available is None or peak <= available:
            return
        limit = LIMIT_AVAILABLE.format(size=format_bytes(available))
        remedy = REMEDY_AVAILABLE
    else:
        if peak <= max_bytes:
            return
        limit = LIMIT_GIVEN.format(value=max_bytes, size=format_bytes(max_bytes))
        remedy = REMEDY_GIVEN
    raise ReportError(
        NUM_CLASSES_TOO_LARGE.format(
            value=num_classes,
            peak=format_bytes(peak),
            matrices=PEAK_MATRICES,
            size=format_bytes(confusion_bytes(num_classes)),
            limit=limit,
            remedy=remedy,
        )
    )


def _describe(value: object) -> str:
    """A short description of an input for an error message (type; shape and dtype of a tensor)."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"an object of type {type(value).__name__}"


def _classifier_output(preds: object) -> torch.Tensor:
    """The logits or class ids in what a classifier returned (a tensor, or a tuple/list whose first
    element is one)."""
    if isinstance(preds, (tuple, list)):
        kind = type(preds).__name__
        if not preds:
            raise ReportError(PREDS_INVALID.format(description=f"an empty {kind}"))
        if not isinstance(preds[0], torch.Tensor):
            raise ReportError(
                PREDS_INVALID.format(description=f"a {kind} whose first element is {_describe(preds[0])}")
            )
        preds = preds[0]
    if not isinstance(preds, torch.Tensor):
        raise ReportError(PREDS_INVALID.format(description=_describe(preds)))
    if preds.dim() == 2 and (preds.is_complex() or preds.dtype == torch.bool):
        raise ReportError(PREDS_INVALID.format(description=_describe(preds)))
    return preds
