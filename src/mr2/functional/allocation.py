"""Margin theory of MR2: the class-sensitive bound (Proposition 1) and its optimal margins."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from mr2.checks import MR2InputError, check_finite, is_int

__all__ = ["BoundTerms", "class_sensitive_bound", "gamma_allocation"]

_MOMENTS_NOT_1D = "second_moments must be a 1-D tensor [num_classes]; got shape {shape}."
_MOMENTS_NEGATIVE = "second_moments must be >= 0 with a positive sum (a_k = ||mu_k||^2 + s_k)."
_BAD_C_BAR = "c_bar (the mean margin) must be a positive number; got {value!r}."
_MARGINS_SHAPE = "margins must have the shape of second_moments {expected}; got {shape}."
_MARGINS_NOT_POSITIVE = "margins (gamma_k) must all be > 0."
_BAD_NUM_SAMPLES = "num_samples (N, the training-set size) must be a positive integer; got {value!r}."


def _check_moments(second_moments: torch.Tensor, check_values: bool) -> None:
    if second_moments.dim() != 1:
        raise MR2InputError(_MOMENTS_NOT_1D.format(shape=tuple(second_moments.shape)))
    if check_values:
        check_finite("second_moments", second_moments, True)
        if bool((second_moments < 0).any()) or not bool(second_moments.sum() > 0):
            raise MR2InputError(_MOMENTS_NEGATIVE)


def gamma_allocation(
    second_moments: torch.Tensor, c_bar: float = 1.0, *, check_values: bool = True
) -> torch.Tensor:
    r"""The per-class gammas of Corollary 1: ``gamma_k^3`` proportional to ``a_k``.

    The bound calls them margins; the paper's loss uses them as logit TEMPERATURES
    (``z / gamma_y``), the labelled variant ``additive_margin`` as additive logit margins.

    .. math::
        \gamma_y = \bar c \, K \, a_y^{1/3} \Big/ \sum_k a_k^{1/3}

    minimises the complexity term :math:`\sum_k a_k / \gamma_k^2` of the class-sensitive bound at a
    fixed mean margin ``c_bar`` (the mean of the returned margins is exactly ``c_bar``).

    Args:
        second_moments: [K] class feature second moments ``a_k = ||mu_k||^2 + s_k`` (>= 0).
        c_bar: the mean margin (overall strength), > 0.
        check_values: validate the values (one host sync); the loss disables it on its hot path.

    Returns:
        [K] margins, in the dtype of ``second_moments``.

    Example:
        >>> gamma_allocation(torch.tensor([1.0, 8.0, 27.0]), c_bar=2.0)
        tensor([1., 2., 3.])
    """
    if not (isinstance(c_bar, (int, float)) and c_bar > 0 and math.isfinite(c_bar)):
        raise MR2InputError(_BAD_C_BAR.format(value=c_bar))
    _check_moments(second_moments, check_values)
    root = second_moments.clamp_min(0).pow(1.0 / 3.0)
    return c_bar * second_moments.shape[0] * root / root.sum()


class BoundTerms(NamedTuple):
    """The complexity term of Proposition 1 and how the classes share it.

    Attributes:
        complexity: 0-dim, ``4 sqrt(2) Lambda K / sqrt(N) * sqrt(sum_k a_k / gamma_k^2)``.
        per_class: [K], ``a_k / gamma_k^2``.
        shares: [K], each class's fraction of ``sum_k a_k / gamma_k^2`` (sums to 1).
    """

    complexity: torch.Tensor
    per_class: torch.Tensor
    shares: torch.Tensor


def class_sensitive_bound(
    second_moments: torch.Tensor,
    margins: torch.Tensor,
    num_samples: int,
    *,
    weight_norm_bound: float = 1.0,
) -> BoundTerms:
    r"""Complexity term of the class-sensitive generalisation bound (Proposition 1).

    .. math::
        R(f) \le \tfrac{1}{\ln 2} R^{\gamma, ce}_{emp}(f)
            + \frac{4\sqrt{2}\,\Lambda K}{\sqrt{N}} \sqrt{\sum_k a_k / \gamma_k^2}
            + O(1/\sqrt{N})

    Args:
        second_moments: [K] ``a_k = ||mu_k||^2 + s_k``.
        margins: [K] ``gamma_k`` > 0.
        num_samples: N, the number of training samples.
        weight_norm_bound: Lambda, the bound on the classifier weight norms.

    Returns:
        :class:`BoundTerms`.

    Example:
        >>> a = torch.tensor([1.0, 8.0])
        >>> uniform = class_sensitive_bound(a, torch.ones(2), num_samples=100)
        >>> optimal = class_sensitive_bound(a, gamma_allocation(a), num_samples=100)
        >>> bool(optimal.complexity < uniform.complexity), uniform.shares.tolist()
        (True, [0.1111111119389534, 0.8888888955116272])
    """
    _check_moments(second_moments, True)
    if margins.shape != second_moments.shape:
        raise MR2InputError(
            _MARGINS_SHAPE.format(expected=tuple(second_moments.shape), shape=tuple(margins.shape))
        )
    if not bool((margins > 0).all()):
        raise MR2InputError(_MARGINS_NOT_POSITIVE)
    if not is_int(num_samples) or num_samples < 1:
        raise MR2InputError(_BAD_NUM_SAMPLES.format(value=num_samples))
    per_class = second_moments / margins.pow(2)
    total = per_class.sum()
    num_classes = second_moments.shape[0]
    constant = 4.0 * math.sqrt(2.0) * weight_norm_bound * num_classes / math.sqrt(num_samples)
    return BoundTerms(constant * total.sqrt(), per_class, per_class / total)
