"""Logit margins on an evaluated split, per sample and summarised per class.

The margin of a sample is ``m = z_y - max_{j != y} z_j`` (true-class logit minus the largest other
logit): positive when it is classified correctly, and the quantity the MR2 temperatures ``gamma_y``
are meant to enlarge for hard classes. ``final.json`` stores its per-class mean and median
(``logit_margins``); these functions compute them without a loop over classes or samples.
"""

from __future__ import annotations

import torch

from mr2.report.confusion import _check_num_classes
from mr2.report.exceptions import ReportError

__all__ = ["logit_margins", "per_class_margin_summary"]

_LOGITS_SHAPE = (
    "logits must have shape [N, K] with K >= 2 and target shape [N]; got logits {logits} and "
    "target {target}"
)
_MARGIN_SHAPE = "margins and target must both have shape [N]; got {margins} and {target}"


def logit_margins(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample logit margin ``z[n, y_n] - max_{j != y_n} z[n, j]``.

    Args:
        logits: shape [N, K], K >= 2.
        target: true class ids, shape [N].

    Returns:
        Margins, shape [N], in the dtype of ``logits``.

    Example:
        >>> logit_margins(torch.tensor([[2.0, 0.5, 1.0], [0.0, 3.0, 1.0]]), torch.tensor([0, 2]))
        tensor([ 1., -2.])
    """
    if logits.dim() != 2 or logits.shape[1] < 2 or target.shape != (logits.shape[0],):
        raise ReportError(_LOGITS_SHAPE.format(logits=tuple(logits.shape), target=tuple(target.shape)))
    index = target.long()[:, None]
    true = logits.gather(1, index)[:, 0]
    others = logits.scatter(1, index, float("-inf"))
    return true - others.max(dim=1).values


def per_class_margin_summary(
    margins: torch.Tensor, target: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class mean and median of the margins, NaN for classes without samples.

    The median follows numpy: the mean of the two middle values for an even count. Computed by one
    sort of the margins and a stable sort by class, then indexing each class's middle positions.

    Args:
        margins: shape [N] (floating).
        target: class ids, shape [N].
        num_classes: K.

    Returns:
        ``(mean, median)``, each float64 of shape [K].

    Example:
        >>> mean, median = per_class_margin_summary(
        ...     torch.tensor([1.0, 3.0, 2.0, 10.0, 5.0]), torch.tensor([0, 0, 0, 2, 2]), 3)
        >>> mean.tolist()[0], median.tolist()
        (2.0, [2.0, nan, 7.5])
    """
    _check_num_classes(num_classes)
    if margins.dim() != 1 or margins.shape != target.shape:
        raise ReportError(_MARGIN_SHAPE.format(margins=tuple(margins.shape), target=tuple(target.shape)))
    values = margins.detach().to(torch.float64)
    labels = target.long()
    counts = torch.bincount(labels, minlength=num_classes)
    sums = torch.zeros(num_classes, dtype=torch.float64, device=values.device)
    sums.index_add_(0, labels, values)
    nan = torch.full_like(sums, float("nan"))
    present = counts > 0
    mean = torch.where(present, sums / counts.clamp(min=1), nan)

    by_value = torch.argsort(values)
    order = by_value[torch.argsort(labels[by_value], stable=True)]
    ordered = values[order]
    starts = torch.cumsum(counts, 0) - counts
    last = max(int(values.shape[0]) - 1, 0)
    low = (starts + (counts - 1).clamp(min=0) // 2).clamp(max=last)
    high = (starts + counts // 2).clamp(max=last)
    if values.shape[0] == 0:
        return mean, nan.clone()
    median = torch.where(present, (ordered[low] + ordered[high]) / 2, nan)
    return mean, median
