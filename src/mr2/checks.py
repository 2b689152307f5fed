"""Input validation shared by the losses and statistics, with the error messages as constants.

Shape checks cost nothing and always run. Value checks (class ids in range, finite values) need the
values on the host: they run for CPU tensors, and for accelerator tensors only when asked
(``check_values=True``), so that a GPU training step never waits on the host by default; inside
``torch.compile`` they never run.
"""

from __future__ import annotations

from typing import Literal

import torch

from mr2.errors import MR2Error
from mr2.value_types import is_int, is_number

__all__ = [
    "CheckValues",
    "MR2InputError",
    "StatisticsOverflowError",
    "check_classification_inputs",
    "check_num_classes",
    "check_statistics_finite",
    "is_int",
    "is_number",
    "wants_values",
]

CheckValues = bool | Literal["auto"]

_NUM_CLASSES_TOO_SMALL = "num_classes must be an integer >= 2, got {value!r}."
_LOGITS_NOT_2D = (
    "logits must have shape [batch, num_classes]; got shape {shape}. Pass the classifier's raw "
    "output (before softmax), one row per sample."
)
_LOGITS_WIDTH = (
    "logits have {width} columns but the loss was built for num_classes={num_classes}. Build the "
    "loss with the classifier's number of outputs."
)
_FEATURES_NOT_2D = (
    "features must have shape [batch, feature_dim]; got shape {shape}. Pass the penultimate "
    "features (the input of the final linear layer), pooled and flattened."
)
FEATURE_DIM_MISMATCH = (
    "features have {got} dimensions but these statistics hold {expected}-dimensional class means. "
    "Use one feature extractor per loss, or build a new loss for the new features."
)
_TARGET_NOT_1D = (
    "target must be a 1-D tensor of class ids with one entry per sample; got shape {shape}. "
    "(One-hot or soft targets are not supported: pass target.argmax(dim=1).)"
)
_TARGET_NOT_INTEGER = "target must hold integer class ids (torch.long); got dtype {dtype}."
_BATCH_MISMATCH = "{name} has {rows} rows but target has {batch} entries; they must match."
_TARGET_OUT_OF_RANGE = (
    "target holds class ids outside [0, {num_classes}): smallest {low}, largest {high}. Check the "
    "label mapping of the data set and num_classes."
)
_NON_FINITE = (
    "{name} contain {count} non-finite value(s) (NaN or Inf). The model has diverged or the input "
    "data hold NaN/Inf: lower the learning rate, enable gradient clipping, or check the data."
)

STATISTICS_OVERFLOW = (
    "this batch would make the MR2 class statistics non-finite (its features are finite, but their "
    "squared norms overflow float32); the update was refused and the statistics keep their old "
    "values. Normalise or rescale the features (or the input data) so that squared feature norms "
    "stay far below 3.4e38."
)


class MR2InputError(MR2Error, ValueError):
    """Raised for inputs the losses and statistics cannot use; the message says how to fix it."""


class StatisticsOverflowError(MR2InputError):
    """A batch would make the moving class statistics non-finite; they were left unchanged."""


def check_num_classes(num_classes: object) -> int:
    """Return ``num_classes`` as an int, or raise if it is not an integer >= 2."""
    if not is_int(num_classes) or num_classes < 2:
        raise MR2InputError(_NUM_CLASSES_TOO_SMALL.format(value=num_classes))
    return num_classes


def wants_values(tensor: torch.Tensor, check_values: CheckValues) -> bool:
    """Whether value checks (which read values on the host) run for ``tensor``.

    Never inside ``torch.compile`` (a host read would break the graph): compiled code behaves like
    accelerator code with ``check_values="auto"``.
    """
    if torch.compiler.is_compiling():
        return False
    if check_values == "auto":
        return tensor.device.type == "cpu"
    return bool(check_values)


def check_finite(name: str, tensor: torch.Tensor, check_values: CheckValues = "auto") -> None:
    """Raise :class:`MR2InputError` naming ``name`` if ``tensor`` holds NaN or Inf."""
    if not (wants_values(tensor, check_values) and tensor.is_floating_point()):
        return
    # Fast path: any NaN or Inf makes the sum non-finite (one cheap pass, no [B, d] temporaries).
    # Only when the sum is not finite (a bad value, or finite values whose sum overflows) are the
    # bad entries counted exactly.
    if bool(torch.isfinite(_sum_of(tensor))):
        return
    _raise_for_non_finite(name, tensor)


def _sum_of(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.sum(dtype=torch.float64 if tensor.dtype == torch.float64 else torch.float32)


def _raise_for_non_finite(name: str, tensor: torch.Tensor) -> None:
    bad = int((~torch.isfinite(tensor)).sum())
    if bad:
        raise MR2InputError(_NON_FINITE.format(name=name, count=bad))


def check_statistics_finite(
    inputs: dict[str, torch.Tensor],
    guard: torch.Tensor | None = None,
    *,
    also_count: dict[str, torch.Tensor] | None = None,
) -> None:
    """Finiteness of ``inputs`` and of a statistics update's ``guard`` in ONE host sync.

    Like :func:`check_finite`, finite values whose sum overflows pass (the bad entries are counted
    exactly only when the fast check fails). ``also_count``: inputs whose NaN/Inf already make
    ``guard`` non-finite (the features the guard was computed from): not summed in the fast check,
    but counted and named in the slow path, before the overflow error.

    Raises:
        MR2InputError: an input holds NaN/Inf (counted exactly, naming the input).
        StatisticsOverflowError: the inputs are finite but the update would overflow.
    """
    sums = [_sum_of(t).double() for t in inputs.values() if t.is_floating_point()]
    if guard is not None:
        sums.append(guard.double())
    if not sums or bool(torch.isfinite(torch.stack(sums)).all()):
        return
    for name, tensor in {**inputs, **(also_count or {})}.items():
        if tensor.is_floating_point():
            _raise_for_non_finite(name, tensor)
    if guard is not None and not bool(torch.isfinite(guard)):
        raise StatisticsOverflowError(STATISTICS_OVERFLOW)


def check_target(
    target: torch.Tensor, num_classes: int, batch: int | None, check_values: CheckValues = "auto"
) -> None:
    """Check that ``target`` is a 1-D integer tensor of ``batch`` class ids in ``[0, num_classes)``."""
    if target.dim() != 1:
        raise MR2InputError(_TARGET_NOT_1D.format(shape=tuple(target.shape)))
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise MR2InputError(_TARGET_NOT_INTEGER.format(dtype=target.dtype))
    if batch is not None and target.shape[0] != batch:
        raise MR2InputError(_BATCH_MISMATCH.format(name="input", rows=batch, batch=target.shape[0]))
    if wants_values(target, check_values) and target.numel():
        low, high = (int(v) for v in torch.aminmax(target))  # one pass for both ends
        if low < 0 or high >= num_classes:
            raise MR2InputError(
                _TARGET_OUT_OF_RANGE.format(num_classes=num_classes, low=low, high=high)
            )


def check_features(features: torch.Tensor, target: torch.Tensor) -> None:
    """Shape checks of ``features`` [B, d] against ``target`` [B]."""
    if features.dim() != 2:
        raise MR2InputError(_FEATURES_NOT_2D.format(shape=tuple(features.shape)))
    if features.shape[0] != target.shape[0]:
        raise MR2InputError(
            _BATCH_MISMATCH.format(name="features", rows=features.shape[0], batch=target.shape[0])
        )


def check_logits(logits: torch.Tensor, target: torch.Tensor, num_classes: int | None) -> None:
    """Shape checks of ``logits`` [B, K] against ``target`` [B] and ``num_classes``."""
    if logits.dim() != 2:
        raise MR2InputError(_LOGITS_NOT_2D.format(shape=tuple(logits.shape)))
    if num_classes is not None and logits.shape[1] != num_classes:
        raise MR2InputError(_LOGITS_WIDTH.format(width=logits.shape[1], num_classes=num_classes))
    if logits.shape[0] != target.shape[0]:
        raise MR2InputError(
            _BATCH_MISMATCH.format(name="logits", rows=logits.shape[0], batch=target.shape[0])
        )


def check_classification_inputs(
    logits: torch.Tensor | None,
    features: torch.Tensor | None,
    target: torch.Tensor,
    num_classes: int,
    check_values: CheckValues = "auto",
    *,
    finite: bool = True,
) -> None:
    """All checks of one ``loss(logits, features, target)`` call.

    ``finite=False`` skips the finiteness checks (a caller that folds them into
    :func:`check_statistics_finite`).
    """
    check_target(target, num_classes, None, check_values)
    if logits is not None:
        check_logits(logits, target, num_classes)
        if finite:
            check_finite("logits", logits, check_values)
    if features is not None:
        check_features(features, target)
        if finite:
            check_finite("features", features, check_values)
