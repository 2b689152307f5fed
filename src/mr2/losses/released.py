"""MR2 with the knobs that only reproduce the released research code (BeierZhu/MR2).

NOT the paper's form: :class:`ReleasedMR2Loss` is :class:`~mr2.losses.mr2.MR2Loss` plus the
released code's choices, each defaulting to :class:`~mr2.losses.mr2.MR2Loss`'s (so ``ReleasedMR2Loss(K)``
computes what ``MR2Loss(K)`` does); ``ReleasedMR2Loss.from_variant("released", K)`` sets them all as the
released code does. Its arithmetic is in :mod:`mr2.functional.released`.

- ``estimator="batch"``: moving averages of per-batch scalars instead of pooled sufficient statistics;
- ``rep_reduction="released"``: the representation term averaged within each class, summed over the
  classes present, divided by K and multiplied by ``d / 10``;
- ``distance_margin_norm="statistics"``: the distance margin ``2 s_bar`` from the statistics' Lp norm
  (an L5 spread against L2 distances) instead of the L2 norm of the distances;
- ``distance_temperature="<c>d"``: the string spelling of ``T = c d`` (``"10d"`` in the released code;
  :class:`MR2Loss` spells it ``distance_temperature=c, distance_temperature_per_dim=True``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch

from mr2.checks import MR2InputError, is_number
from mr2.functional.released import released_class_normalised_mean
from mr2.losses.mr2 import MR2Loss, keyword_options
from mr2.statistics.class_features import ClassFeatureStatistics, Estimator

__all__ = ["ReleasedMR2Loss", "uses_released_knobs"]

MarginNorm = Literal["l2", "statistics"]
RepReduction = Literal["mean", "released"]

_BAD_REP_REDUCTION = "rep_reduction must be 'mean' (paper) or 'released'; got {value!r}."
_BAD_DISTANCE_TEMPERATURE = (
    "distance_temperature must be a positive number (1 = the paper) or a string '<c>d' meaning c "
    "times the feature dimension (e.g. '10d', the released code; left out: MR2Loss's default T = d); "
    "got {value!r}."
)
_BAD_MARGIN_NORM = (
    "distance_margin_norm must be 'l2' (the norm of the pair distances) or 'statistics' (the "
    "statistics' Lp norm, the released code); got {value!r}."
)


def _parse_distance_temperature(value: float | str) -> tuple[float, bool]:
    """Return (factor, per_dimension) for ``1.0`` -> (1, False) and ``'10d'`` -> (10, True)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            factor = float(text[:-1]) if text.endswith("d") else float("nan")
        except ValueError:
            factor = float("nan")
        if not factor > 0:
            raise MR2InputError(_BAD_DISTANCE_TEMPERATURE.format(value=value))
        return factor, True
    if not is_number(value) or not value > 0:
        raise MR2InputError(_BAD_DISTANCE_TEMPERATURE.format(value=value))
    return float(value), False


class ReleasedMR2Loss(MR2Loss):
    """:class:`~mr2.losses.mr2.MR2Loss` with the released code's knobs (module docstring).

    Args:
        num_classes: K >= 2.
        estimator: ``"pooled"`` moving sufficient statistics (default) or ``"batch"`` (released).
        rep_reduction: ``"mean"`` over the batch (paper) or ``"released"`` (per-class means / K,
            times d/10).
        distance_margin_norm: the norm of the ``s_k`` in the distance margin ``2 s_bar``: ``"l2"``
            (default; the norm of the pair distances, whatever ``norm_p`` the allocation uses) or
            ``"statistics"`` (the statistics' Lp norm: the released code's mismatch of an L5 spread
            against L2 distances).
        distance_temperature: ``T`` (1 = paper) or ``"<c>d"`` for c times the feature dimension; None
            (default): :class:`~mr2.losses.mr2.MR2Loss`'s default, ``T = d``.
        **options: every other option of :class:`~mr2.losses.mr2.MR2Loss`.

    Example:
        >>> loss_fn = ReleasedMR2Loss.from_variant("released", 10)
        >>> loss_fn.statistics.norm_p, loss_fn.statistics.estimator, loss_fn.distance_temperature_value(64)
        (5.0, 'batch', 640.0)
    """

    def __init__(
        self,
        num_classes: int,
        *,
        estimator: Estimator = "pooled",
        rep_reduction: RepReduction = "mean",
        distance_margin_norm: MarginNorm = "l2",
        distance_temperature: float | str | None = None,
        **options: Any,
    ) -> None:
        factor: float | None = None
        if distance_temperature is not None:
            factor, per_dim = _parse_distance_temperature(distance_temperature)
            if per_dim:
                options["distance_temperature_per_dim"] = True
        super().__init__(num_classes, distance_temperature=factor, **options)
        if rep_reduction not in ("mean", "released"):
            raise MR2InputError(_BAD_REP_REDUCTION.format(value=rep_reduction))
        if distance_margin_norm not in ("l2", "statistics"):
            raise MR2InputError(_BAD_MARGIN_NORM.format(value=distance_margin_norm))
        if estimator != "pooled":
            stats = self.statistics
            self.statistics = ClassFeatureStatistics(
                self.num_classes,
                stats.feature_dim,
                momentum=stats.momentum,
                norm_p=stats.norm_p,
                center=stats.center,
                estimator=estimator,
                process_group=stats.process_group,
                check_values=stats.check_values,
            )
        if distance_temperature is not None:
            self.distance_temperature = distance_temperature
        self.rep_reduction: RepReduction = rep_reduction
        self.distance_margin_norm: MarginNorm = distance_margin_norm

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, estimator={self.statistics.estimator!r}, "
            f"rep_reduction={self.rep_reduction!r}, distance_margin_norm={self.distance_margin_norm!r}"
        )

    def _margin_spread(self, spread: torch.Tensor | None) -> torch.Tensor | None:
        if self.distance_margin_norm == "statistics":
            return spread
        return super()._margin_spread(spread)

    def _reduce_pairs(self, per_sample: torch.Tensor, target: torch.Tensor, feature_dim: int) -> torch.Tensor:
        if self.rep_reduction != "released":
            return super()._reduce_pairs(per_sample, target, feature_dim)
        scale = feature_dim / 10.0
        return scale * released_class_normalised_mean(per_sample, target, self.num_classes)


#: The options only :class:`ReleasedMR2Loss` takes.
RELEASED_OPTIONS = tuple(sorted(set(keyword_options(ReleasedMR2Loss)) - set(keyword_options(MR2Loss))))


def uses_released_knobs(options: Mapping[str, Any]) -> bool:
    """Whether loss ``options`` need :class:`ReleasedMR2Loss`: one of its own options, or a
    ``"<c>d"`` string distance temperature."""
    return any(name in options for name in RELEASED_OPTIONS) or isinstance(
        options.get("distance_temperature"), str
    )
