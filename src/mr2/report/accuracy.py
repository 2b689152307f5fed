"""Per-class accuracy with NaN for classes without samples: the one helper every layer uses.

``accuracy_k = correct_k / total_k``, NaN where ``total_k = 0`` (a class without a test sample has no
accuracy; it is never counted as 0 or 1), computed without a floating-point warning. Works on numpy
arrays (float64, any leading batch shape) and on torch tensors (float64, on the tensors' device, no
host sync), so the report, the run-directory reader and the training engine share it. This module
depends on numpy and torch only.
"""

from __future__ import annotations

from typing import overload

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

__all__ = ["confusion_accuracy", "per_class_accuracy"]


@overload
def per_class_accuracy(correct: torch.Tensor, total: torch.Tensor) -> torch.Tensor: ...


@overload
def per_class_accuracy(correct: ArrayLike, total: ArrayLike) -> NDArray[np.float64]: ...


def per_class_accuracy(
    correct: ArrayLike | torch.Tensor, total: ArrayLike | torch.Tensor
) -> NDArray[np.float64] | torch.Tensor:
    """``correct / total`` elementwise, NaN where ``total == 0`` (no warning; batched).

    Args:
        correct: correctly classified samples per class, shape [..., K].
        total: samples per class, shape [..., K] (broadcast against ``correct``).

    Returns:
        float64, numpy when both inputs are array-like, a torch tensor when either is a tensor.

    Example:
        >>> per_class_accuracy([3, 0, 0], [4, 2, 0])
        array([0.75, 0.  ,  nan])
        >>> per_class_accuracy(torch.tensor([3, 0]), torch.tensor([4, 0]))
        tensor([0.7500,    nan], dtype=torch.float64)
    """
    if isinstance(correct, torch.Tensor) or isinstance(total, torch.Tensor):
        c = torch.as_tensor(correct).double()
        t = torch.as_tensor(total).double().to(c.device)
        return c / t.where(t > 0, torch.nan)
    c_np = np.asarray(correct, dtype=np.float64)
    t_np = np.asarray(total, dtype=np.float64)
    shape = np.broadcast(c_np, t_np).shape
    return np.divide(c_np, t_np, out=np.full(shape, np.nan), where=t_np > 0)


@overload
def confusion_accuracy(confusion: torch.Tensor) -> torch.Tensor: ...


@overload
def confusion_accuracy(confusion: ArrayLike) -> NDArray[np.float64]: ...


def confusion_accuracy(confusion: ArrayLike | torch.Tensor) -> NDArray[np.float64] | torch.Tensor:
    """Per-class accuracy (recall) of a K x K confusion matrix (rows: true class), NaN for empty rows.

    ``accuracy_k = C[k, k] / sum_j C[k, j]``; batched over leading axes ``[..., K, K]``.

    Example:
        >>> confusion_accuracy([[3, 1], [0, 0]])
        array([0.75,  nan])
    """
    if isinstance(confusion, torch.Tensor):
        return per_class_accuracy(confusion.diagonal(dim1=-2, dim2=-1), confusion.sum(dim=-1))
    matrix = np.asarray(confusion)
    return per_class_accuracy(np.diagonal(matrix, axis1=-2, axis2=-1), matrix.sum(axis=-1))
