"""The loss specification as ``mr2 tune`` uses it: :mod:`mr2.methods.spec` (it lives beside the
methods), with its errors raised as :class:`mr2.tune.TuneInputError`, so ``from mr2.tune import
loss_from_spec`` keeps working as before."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mr2.methods import spec as _spec
from mr2.methods.spec import (
    ENGINE_ONLY,
    MAX_FEATURE_DIM,
    MAX_SPEC_CLASSES,
    NEEDS_FEATURE_DIM,
    NEEDS_FEATURES,
    NUM_CLASSES_DIFFER,
    UNKNOWN_LOSS,
    LossSpecError,
    SpecLoss,
    engine_only_methods,
    loss_methods,
)
from mr2.tune.errors import TuneInputError

__all__ = [
    "ENGINE_ONLY",
    "MAX_FEATURE_DIM",
    "MAX_SPEC_CLASSES",
    "NEEDS_FEATURES",
    "NEEDS_FEATURE_DIM",
    "NUM_CLASSES_DIFFER",
    "UNKNOWN_LOSS",
    "LossSpecError",
    "SpecLoss",
    "engine_only_methods",
    "loss_from_spec",
    "loss_methods",
    "parse_loss_spec",
]


def parse_loss_spec(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """:func:`mr2.methods.spec.parse_loss_spec`, raising :class:`mr2.tune.TuneInputError`."""
    try:
        return _spec.parse_loss_spec(spec)
    except LossSpecError as error:
        raise TuneInputError(str(error)) from None


def loss_from_spec(spec: str | Mapping[str, Any], num_classes: int | None = None, *,
                   feature_dim: int | None = None, class_counts: Any = None) -> SpecLoss:
    """:func:`mr2.methods.spec.loss_from_spec`, raising :class:`mr2.tune.TuneInputError`.

    Example:
        >>> loss_from_spec({"method": "erm", "options": {}, "num_classes": 3}).num_classes
        3
    """
    try:
        return _spec.loss_from_spec(spec, num_classes, feature_dim=feature_dim, class_counts=class_counts)
    except LossSpecError as error:
        raise TuneInputError(str(error)) from None
