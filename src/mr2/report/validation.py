"""Validation of a confusion matrix given by a caller or read from a file (shape, integer counts)."""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from mr2.report.exceptions import ReportError

__all__ = ["CONFUSION_NOT_COUNTS", "CONFUSION_NOT_SQUARE", "validate_confusion"]

CONFUSION_NOT_SQUARE = (
    "a confusion matrix must be a square K x K array (rows: true class, columns: predicted class), "
    "got shape {shape}"
)
CONFUSION_NOT_COUNTS = (
    "a confusion matrix must hold non-negative integer counts; got {problem}. Build it with "
    "mr2.report.confusion_matrix(preds, target, num_classes)"
)


def validate_confusion(confusion: ArrayLike | torch.Tensor) -> NDArray[np.int64]:
    """Return ``confusion`` as a validated int64 numpy array [K, K] (a copy).

    Raises:
        ReportError: not a non-empty square matrix of non-negative integer counts.

    Example:
        >>> validate_confusion([[2.0, 1.0], [0.0, 3.0]])
        array([[2, 1],
               [0, 3]])
    """
    if isinstance(confusion, torch.Tensor):
        confusion = confusion.detach().cpu().numpy()
    matrix = np.array(confusion)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] == 0:
        raise ReportError(CONFUSION_NOT_SQUARE.format(shape=matrix.shape))
    if matrix.dtype == object or not np.issubdtype(matrix.dtype, np.number):
        raise ReportError(CONFUSION_NOT_COUNTS.format(problem=f"dtype {matrix.dtype}"))
    if np.issubdtype(matrix.dtype, np.floating):
        if not np.all(np.isfinite(matrix)):
            raise ReportError(CONFUSION_NOT_COUNTS.format(problem="non-finite entries"))
        if not np.all(matrix == np.round(matrix)):
            raise ReportError(CONFUSION_NOT_COUNTS.format(problem="fractional entries"))
    if matrix.size and matrix.min() < 0:  # no K x K boolean temporary
        raise ReportError(CONFUSION_NOT_COUNTS.format(problem="negative entries"))
    return matrix.astype(np.int64, copy=False)  # np.array made the copy: no second one
