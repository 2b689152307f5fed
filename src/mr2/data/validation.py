"""Checks shared by every reader: label range, empty classes, matching sizes."""

from __future__ import annotations

import os

import torch

from mr2.data import errors
from mr2.data.errors import DatasetError

__all__ = ["check_labels", "check_no_empty_classes", "check_same_length", "first_label_at_or_above"]

PathLike = str | os.PathLike[str]


def check_labels(
    path: PathLike, labels: torch.Tensor, num_classes: int | None, what: str = "labels"
) -> torch.Tensor:
    """Check that ``labels`` are 1-D integer class ids in ``[0, num_classes)``.

    Args:
        path: the file the labels were read from (named in the error).
        labels: the class ids, shape [N].
        num_classes: K; ``None`` checks only the dtype and shape.
        what: what the labels are called in the message (e.g. ``"`y_train`"``).

    Returns:
        The labels as an int64 tensor.

    Raises:
        DatasetError: labels are not a 1-D integer array or lie outside ``[0, K)``.

    Example:
        >>> check_labels("y.npz", torch.tensor([0, 2, 1], dtype=torch.uint8), 3)
        tensor([0, 2, 1])
    """
    if labels.ndim != 1 or labels.dtype.is_floating_point or labels.dtype.is_complex:
        raise DatasetError(
            errors.LABELS_NOT_INTEGER.format(
                path=path, what=what, dtype=labels.dtype, shape=tuple(labels.shape)
            ),
            path=path,
        )
    labels = labels.to(torch.int64)
    if num_classes is not None and labels.numel() > 0:
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= num_classes:
            raise DatasetError(
                errors.LABELS_OUT_OF_RANGE.format(
                    path=path, what=what, num_classes=num_classes, low=low, high=high
                ),
                path=path,
            )
    return labels


def check_no_empty_classes(
    path: PathLike, labels: torch.Tensor, num_classes: int, class_names: list[str] | None = None
) -> torch.Tensor:
    """Check that every class has at least one training sample.

    Args:
        path: the file or directory the labels come from (named in the error).
        labels: int64 class ids in ``[0, K)``, shape [N].
        num_classes: K.
        class_names: names shown in the error next to the ids, if known.

    Returns:
        The per-class counts, int64 [K].

    Raises:
        DatasetError: naming the empty classes.

    Example:
        >>> check_no_empty_classes("y.npz", torch.tensor([0, 1, 1]), 2)
        tensor([1, 2])
    """
    counts = torch.bincount(labels, minlength=num_classes)
    empty = torch.nonzero(counts == 0).flatten().tolist()
    if empty:
        shown = [
            f"{k} ({class_names[k]})" if class_names is not None and k < len(class_names) else str(k)
            for k in empty[:20]
        ]
        listed = ", ".join(shown) + (f", ... ({len(empty)} in all)" if len(empty) > 20 else "")
        raise DatasetError(
            errors.EMPTY_CLASSES.format(path=path, classes=listed, num_classes=num_classes),
            path=path,
        )
    return counts


def check_same_length(
    path: PathLike, what: str, found: int, expected: int, detail: str
) -> None:
    """Raise a :class:`DatasetError` when two arrays that belong together differ in length.

    Args:
        path: the file at fault.
        what: which array (e.g. ``"y_train"``).
        found: its length.
        expected: the length it should have.
        detail: what ``expected`` comes from (e.g. ``"x_train has 100"``).
    """
    if found != expected:
        raise DatasetError(
            errors.SIZE_MISMATCH.format(
                path=path, what=what, found=found, expected=expected, detail=detail
            ),
            path=path,
        )


def first_label_at_or_above(labels: torch.Tensor, threshold: int) -> tuple[int, int, int] | None:
    """The first label ``>= threshold``: ``(label, index, how many labels are >= threshold)``.

    Args:
        labels: int64 class ids, shape [N].
        threshold: e.g. K (a label past the last class).

    Returns:
        ``None`` if every label is below ``threshold``.

    Example:
        >>> first_label_at_or_above(torch.tensor([0, 2, 7, 1, 9]), 3)
        (7, 2, 2)
        >>> first_label_at_or_above(torch.tensor([0, 2]), 3) is None
        True
    """
    above = labels >= threshold
    count = int(above.sum())
    if count == 0:
        return None
    index = int(torch.nonzero(above)[0, 0])
    return int(labels[index]), index, count
