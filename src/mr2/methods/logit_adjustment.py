"""Logit-adjusted cross-entropy (Menon et al., ICLR 2021)."""

from __future__ import annotations

import math

import torch

from mr2.checks import MR2InputError, check_classification_inputs, check_num_classes
from mr2.functional.baselines import logit_adjusted_cross_entropy
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import register_method

__all__ = ["LogitAdjustment"]

_EMPTY_CLASS = (
    "logit adjustment needs every class in the training set (log prior of an empty class is -inf); "
    "class_counts has zeros at {classes}."
)


@register_method("logit_adjustment")
class LogitAdjustment(TrainingMethod):
    r"""Cross-entropy of the logits shifted by ``tau`` times the log label prior.

    .. math::
        \ell(z, y) = -\log \mathrm{softmax}(z + \tau \log \pi)_y, \qquad \pi_k = n_k / N

    ``pi`` comes from ``context.class_counts``; ``tau = 1`` (the paper's default). Only the training
    loss is adjusted; predictions use the raw logits. On class-balanced data ``log pi`` is a constant
    and the loss is exactly cross-entropy.

    Args:
        num_classes: K.
        tau: scale of the adjustment (1.0).
    """

    needs_class_counts = True  # the class priors

    log_prior: torch.Tensor

    def __init__(self, num_classes: int, *, tau: float = 1.0) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        self.tau = float(tau)
        self.register_buffer("log_prior", torch.full((num_classes,), -math.log(num_classes)))

    def setup(self, context: MethodContext) -> None:
        counts = context.class_counts.to(torch.float64)
        empty = (counts <= 0).nonzero().squeeze(1).tolist()
        if empty:
            raise MR2InputError(_EMPTY_CLASS.format(classes=empty))
        self.log_prior = (counts / counts.sum()).log().to(torch.float32).to(context.device)

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        check_classification_inputs(logits, None, target, self.num_classes)
        loss = logit_adjusted_cross_entropy(logits, target, self.log_prior, self.tau)
        self.record(loss=loss)
        return loss

