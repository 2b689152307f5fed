"""Arithmetic of the released MR2 research code, for side-by-side comparisons only.

NOT the paper's formulas: the released code (BeierZhu/MR2) averages the representation term within
each class, sums over the classes present and divides by K, divides squared distances by ``10 d``
inside the exponential and multiplies the result by ``d / 10``.
:class:`mr2.losses.released.ReleasedMR2Loss` reproduces it with
``ReleasedMR2Loss.from_variant("released", ...)``; :class:`mr2.MR2Loss` is the paper's form.
"""

from __future__ import annotations

import torch

__all__ = ["released_class_normalised_mean"]


def released_class_normalised_mean(
    per_sample: torch.Tensor, target: torch.Tensor, num_classes: int
) -> torch.Tensor:
    """Mean of ``per_sample`` within each class having >= 2 samples, summed, divided by K.

    Example:
        >>> released_class_normalised_mean(
        ...     torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]), num_classes=4)
        tensor(0.5000)
    """
    dtype = per_sample.dtype
    count = torch.zeros(num_classes, dtype=dtype, device=per_sample.device)
    count.index_add_(0, target, torch.ones_like(per_sample))
    total = torch.zeros(num_classes, dtype=dtype, device=per_sample.device)
    total.index_add_(0, target, per_sample)
    has_pairs = count >= 2
    class_means = torch.where(has_pairs, total / count.clamp_min(1), torch.zeros_like(total))
    return class_means.sum() / num_classes
