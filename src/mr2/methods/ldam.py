"""LDAM with deferred re-weighting (Cao et al., NeurIPS 2019) and its cosine classifier head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mr2.checks import MR2InputError, check_classification_inputs, check_num_classes
from mr2.functional.baselines import drw_class_weights, ldam_logits, ldam_margins
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import register_method

__all__ = ["LDAM", "NormedLinear"]

_NO_CLASSIFIER = (
    "LDAM replaces the model's head with a cosine classifier and needs `model.classifier` to be an "
    "nn.Linear; got {got}."
)
_BAD_FRACTION = "drw_start_fraction must be in [0, 1]; got {value!r}."
_BAD_SCALE = "scale must be > 0; got {value!r}."
_BAD_MARGIN = "max_margin must be >= 0; got {value!r}."


class NormedLinear(nn.Module):
    r"""Cosine classifier: ``z_k = <x / ||x||, w_k / ||w_k||>`` (no bias), as LDAM-DRW's head.

    The weight is stored as ``[out_features, in_features]`` like ``nn.Linear`` (the reference stores
    the transpose) and initialised as the reference does: uniform in [-1, 1], each class vector then
    rescaled to unit norm.

    Example:
        >>> head = NormedLinear(4, 3)
        >>> out = head(torch.randn(5, 4))
        >>> out.shape, bool((out.abs() <= 1 + 1e-6).all())
        (torch.Size([5, 3]), True)
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        weight = torch.empty(out_features, in_features).uniform_(-1.0, 1.0)
        self.weight = nn.Parameter(F.normalize(weight, dim=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=1) @ F.normalize(self.weight, dim=1).T

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


@register_method("ldam")
class LDAM(TrainingMethod):
    r"""Label-distribution-aware margin loss on a cosine classifier, with deferred re-weighting.

    .. math::
        m_k = m_{max}\, \frac{n_k^{-1/4}}{\max_j n_j^{-1/4}}, \qquad
        L = \frac{\sum_i w_{y_i}\, \mathrm{CE}\big(s(\cos\theta_i - m_{y_i} e_{y_i}),\ y_i\big)}
                 {\sum_i w_{y_i}}

    ``cos theta`` are the outputs of the :class:`NormedLinear` head that :meth:`adapt_model` puts in
    place of ``model.classifier``; ``s = 30``, ``m_max = 0.5``. DRW: ``w = 1`` until epoch
    ``round(drw_start_fraction * epochs)`` (160 of 200 in kaidic/LDAM-DRW), then the class-balanced
    weights ``(1 - beta) / (1 - beta^{n_k})`` (beta 0.9999) normalised to sum K.

    On class-balanced data every ``m_k = m_max`` and every ``w_k = 1``: LDAM-DRW is a class-agnostic
    cosine-margin loss (CosFace-like) and DRW does nothing.

    Args:
        num_classes: K.
        max_margin: ``m_max`` (0.5).
        scale: ``s`` (30).
        drw: apply deferred re-weighting (True).
        drw_start_fraction: fraction of the epochs after which DRW starts (0.8).
        drw_beta: ``beta`` of the effective number (0.9999).
    """

    plain_loss = False  # changes the model (a normalised head) and reweights by epoch

    margins: torch.Tensor
    drw_weights: torch.Tensor
    class_weights: torch.Tensor

    def __init__(
        self,
        num_classes: int,
        *,
        max_margin: float = 0.5,
        scale: float = 30.0,
        drw: bool = True,
        drw_start_fraction: float = 0.8,
        drw_beta: float = 0.9999,
    ) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        if float(max_margin) < 0:
            raise MR2InputError(_BAD_MARGIN.format(value=max_margin))
        if float(scale) <= 0:
            raise MR2InputError(_BAD_SCALE.format(value=scale))
        if not 0.0 <= float(drw_start_fraction) <= 1.0:
            raise MR2InputError(_BAD_FRACTION.format(value=drw_start_fraction))
        self.max_margin = float(max_margin)
        self.scale = float(scale)
        self.drw = bool(drw)
        self.drw_start_fraction = float(drw_start_fraction)
        self.drw_beta = float(drw_beta)
        self.drw_start_epoch = 0
        self.register_buffer("margins", torch.full((num_classes,), self.max_margin))
        self.register_buffer("drw_weights", torch.ones(num_classes))
        self.register_buffer("class_weights", torch.ones(num_classes))

    def setup(self, context: MethodContext) -> None:
        counts = context.class_counts
        self.margins = ldam_margins(counts, self.max_margin).to(context.device)
        self.drw_weights = drw_class_weights(counts, self.drw_beta).to(context.device)
        self.class_weights = torch.ones(self.num_classes, device=context.device)
        self.drw_start_epoch = round(self.drw_start_fraction * context.epochs)

    def adapt_model(self, model: nn.Module) -> nn.Module:
        head = getattr(model, "classifier", None)
        if not isinstance(head, nn.Linear):
            raise MR2InputError(_NO_CLASSIFIER.format(got=type(head).__name__))
        cosine = NormedLinear(head.in_features, head.out_features)
        model.classifier = cosine.to(device=head.weight.device, dtype=head.weight.dtype)
        return model

    def on_epoch_start(self, epoch: int) -> None:
        deferred = self.drw and epoch >= self.drw_start_epoch
        self.class_weights.copy_(self.drw_weights if deferred else torch.ones_like(self.drw_weights))

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        check_classification_inputs(logits, None, target, self.num_classes)
        margin_logits = ldam_logits(logits, target, self.margins, self.scale)
        weight = self.class_weights.to(margin_logits.dtype)
        loss = F.cross_entropy(margin_logits, target, weight=weight)
        self.record(loss=loss)
        return loss

