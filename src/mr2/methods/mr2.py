"""MR2 as a training method of the engine (``method: mr2``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from mr2.losses.mr2 import DEFAULT_VARIANT, MR2Loss, keyword_options
from mr2.losses.released import ReleasedMR2Loss, uses_released_knobs
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import register_method

__all__ = ["MR2Method"]

#: Loss options the engine sets itself (from the :class:`~mr2.methods.base.MethodContext`).
WIRED_BY_THE_ENGINE = ("feature_dim", "process_group")


@register_method("mr2")
class MR2Method(TrainingMethod):
    """MR2 (:class:`mr2.MR2Loss`) behind the engine's seam.

    ``loss_options`` are the loss's own options, passed through and validated by the loss: every
    keyword option of :class:`~mr2.losses.mr2.MR2Loss` and of
    :class:`~mr2.losses.released.ReleasedMR2Loss` except ``feature_dim`` and ``process_group`` (the
    engine's). Options not given take the value of the chosen ``variant`` (see :data:`mr2.VARIANTS`;
    the default is :data:`~mr2.losses.mr2.DEFAULT_VARIANT`, ``"distance_1d"``, the configuration of
    ``MR2Loss(K)``: the paper's form with distance temperature ``T = d``; ``"paper"`` is the paper's
    formula, ``T = 1``; ``"additive_margin"`` uses the allocation as an additive logit margin of scale
    ``margin_scale``, not the paper's form). When the variant or the
    options use a knob of the released code (``estimator``, ``rep_reduction``,
    ``distance_margin_norm``, a ``"<c>d"`` string ``distance_temperature``), the loss is a
    :class:`~mr2.losses.released.ReleasedMR2Loss`. ``margin_warmup_epochs``, the method's own option,
    trains the first epochs with logit temperatures 1 (the statistics are still accumulated).
    """

    reads_features = True
    engine_options: ClassVar[Mapping[str, Any]] = {"margin_warmup_epochs": 0}  # an epoch hook

    def __init__(
        self,
        num_classes: int,
        *,
        variant: str = DEFAULT_VARIANT,
        margin_warmup_epochs: int = 0,
        **loss_options: Any,
    ) -> None:
        super().__init__()
        self.variant = variant
        loss_class = MR2Loss
        if uses_released_knobs({**MR2Loss.variant_options(variant), **loss_options}):
            loss_class = ReleasedMR2Loss
        self.loss = loss_class.from_variant(variant, num_classes, **loss_options)
        self.margin_warmup_epochs = int(margin_warmup_epochs)

    @classmethod
    def passed_options(cls) -> dict[str, Any]:
        """The loss options this method passes through, with the loss's defaults (for the registry)."""
        options = keyword_options(ReleasedMR2Loss)
        return {name: default for name, default in options.items() if name not in WIRED_BY_THE_ENGINE}

    def setup(self, context: MethodContext) -> None:
        self.loss.setup(context.feature_dim, context.process_group)

    def on_epoch_start(self, epoch: int) -> None:
        self.loss.gammas_enabled = epoch >= self.margin_warmup_epochs

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        return self.loss(logits, features, target)

    def log_values(self) -> dict[str, torch.Tensor]:
        parts = self.loss.parts
        if parts is None:
            return {}
        if self.loss.representation_skipped:  # a linear probe: the term is not computed (NaN)
            return {"loss_logit": parts.logit}
        return {"loss_logit": parts.logit, "loss_rep": parts.representation}

    def class_statistics(self) -> dict[str, torch.Tensor]:
        """Per-class ``mean_sq_norm``, ``spread``, ``second_moment`` and ``temperatures`` (the logit
        temperatures gamma_k; [K] each)."""
        stats = self.loss.statistics
        return {
            "mean_sq_norm": stats.mean_sq_norm(),
            "spread": stats.spread(),
            "second_moment": stats.second_moment(),
            "temperatures": self.loss.logit_temperatures(),
        }
