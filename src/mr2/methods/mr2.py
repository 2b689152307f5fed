"""MR2 as a training method of the engine (``method: mr2``)."""

from __future__ import annotations

from typing import Any

import torch

from mr2.losses.mr2 import MR2Loss
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import register_method

__all__ = ["MR2Method"]


@register_method("mr2")
class MR2Method(TrainingMethod):
    """MR2 (:class:`mr2.MR2Loss`) behind the engine's seam.

    Options left at None take the value of the chosen ``variant`` (see :data:`mr2.VARIANTS`; the
    default ``"paper"`` is the paper's form; ``"additive_margin"`` uses the allocation as an additive
    logit margin of scale ``margin_scale``, not the paper's form). ``margin_warmup_epochs`` trains
    the first epochs with temperatures 1 (the statistics are still accumulated).
    """

    def __init__(
        self,
        num_classes: int,
        *,
        variant: str = "paper",
        c_bar: float | None = None,
        lambda_rep: float | None = None,
        momentum: float | None = None,
        distance_temperature: float | str | None = None,
        allocation: str | None = None,
        norm_p: float | None = None,
        center_features: bool | None = None,
        estimator: str | None = None,
        rep_reduction: str | None = None,
        pairs: str | None = None,
        warmup_samples_per_class: int | None = None,
        logit_margin: str | None = None,
        margin_scale: float | None = None,
        distance_margin_norm: str | None = None,
        margin_warmup_epochs: int = 0,
    ) -> None:
        super().__init__()
        given = {
            "c_bar": c_bar,
            "lambda_rep": lambda_rep,
            "momentum": momentum,
            "distance_temperature": distance_temperature,
            "allocation": allocation,
            "norm_p": norm_p,
            "center_features": center_features,
            "estimator": estimator,
            "rep_reduction": rep_reduction,
            "pairs": pairs,
            "warmup_samples_per_class": warmup_samples_per_class,
            "logit_margin": logit_margin,
            "margin_scale": margin_scale,
            "distance_margin_norm": distance_margin_norm,
        }
        overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        self.variant = variant
        self.loss = MR2Loss.from_variant(variant, num_classes, **overrides)
        self.margin_warmup_epochs = int(margin_warmup_epochs)

    def setup(self, context: MethodContext) -> None:
        self.loss.process_group = context.process_group
        self.loss.statistics.process_group = context.process_group
        if self.loss.statistics.feature_dim is None:
            self.loss.statistics._materialise(context.feature_dim)

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
        return {"loss_logit": parts.logit, "loss_rep": parts.representation}

    def class_statistics(self) -> dict[str, torch.Tensor]:
        """Per-class ``mean_sq_norm``, ``spread``, ``second_moment`` and ``temperatures`` ([K] each)."""
        stats = self.loss.statistics
        return {
            "mean_sq_norm": stats.mean_sq_norm(),
            "spread": stats.spread(),
            "second_moment": stats.second_moment(),
            "temperatures": self.loss.temperatures(),
        }

