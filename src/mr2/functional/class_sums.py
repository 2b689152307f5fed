"""Per-class sufficient statistics of a batch, indexed by class id."""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["ClassSums", "class_sums"]


class ClassSums(NamedTuple):
    """Per-class sums of one batch.

    Attributes:
        counts: [K] number of samples of each class (in the features' dtype).
        feature_sums: [K, d] sum of the features of each class.
        sq_norm_sums: [K] sum of the squared L2 norms ``||x||^2`` of each class's features.
    """

    counts: torch.Tensor
    feature_sums: torch.Tensor
    sq_norm_sums: torch.Tensor


def class_sums(features: torch.Tensor, target: torch.Tensor, num_classes: int) -> ClassSums:
    """Sum features, squared norms and counts per class with ``index_add_`` (no loop over classes).

    Args:
        features: [B, d] floating-point features.
        target: [B] class ids in ``[0, num_classes)``.
        num_classes: K; classes absent from the batch get zeros.

    Returns:
        :class:`ClassSums` with ``counts`` [K], ``feature_sums`` [K, d], ``sq_norm_sums`` [K].

    Example:
        >>> x = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 1.0]])
        >>> sums = class_sums(x, torch.tensor([0, 0, 2]), num_classes=3)
        >>> sums.counts.tolist(), sums.feature_sums.tolist(), sums.sq_norm_sums.tolist()
        ([2.0, 0.0, 1.0], [[4.0, 2.0], [0.0, 0.0], [0.0, 1.0]], [14.0, 0.0, 1.0])
    """
    dtype, device = features.dtype, features.device
    count = torch.zeros(num_classes, dtype=dtype, device=device)
    count.index_add_(0, target, torch.ones_like(target, dtype=dtype))
    feature_sum = torch.zeros(num_classes, features.shape[1], dtype=dtype, device=device)
    feature_sum.index_add_(0, target, features)
    sq_norm_sum = torch.zeros(num_classes, dtype=dtype, device=device)
    sq_norm_sum.index_add_(0, target, (features * features).sum(dim=1))
    return ClassSums(count, feature_sum, sq_norm_sum)
