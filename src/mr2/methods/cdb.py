"""CDB-CE: class-wise difficulty-balanced cross-entropy (Sinha et al., ACCV 2020)."""

from __future__ import annotations

from typing import Literal

import torch

from mr2.checks import MR2InputError, check_num_classes
from mr2.errors import check_choice, either
from mr2.functional.baselines import cdb_class_weights, cdb_dynamic_tau
from mr2.methods.base import MethodContext, TrainingMethod, checked_cross_entropy
from mr2.methods.registry import register_method

__all__ = ["CDB"]

#: When the class weights are computed: after every validation, or once from the first.
Update = Literal["every_validation", "fixed"]

_BAD_TAU = "tau must be a number > 0 or 'dynamic'; got {value!r}."
_BAD_UPDATE = f"update must be {either(Update)}; got {{value!r}}."
_BAD_ACCURACY = "class_accuracy must have shape [num_classes]={expected}; got {shape}."


@register_method("cdb")
class CDB(TrainingMethod):
    r"""Cross-entropy weighted per class by the class's difficulty on a held-out split.

    .. math::
        d_k = 1 - A_k^{val}, \qquad w_k = \frac{K\, d_k^{\tau}}{\sum_j d_j^{\tau}}, \qquad
        L = \frac{1}{B} \sum_i w_{y_i}\, \mathrm{CE}(z_i, y_i)

    ``A^val`` is the per-class accuracy on the validation split (never the test split). The
    weights are normalised to mean 1 over the classes and the loss is the plain batch mean of the
    weighted per-sample losses (hitachi-rd-cv/CDB-loss, CIFAR-LT code). They start at 1 (the
    reference's initial difficulty of 1 for every class) or, when the engine provides
    ``context.validation_class_accuracy`` (a reference model's), from that; with
    ``update="every_validation"`` (default, as the reference) they are recomputed from the model's
    own validation accuracy after every validation pass (:meth:`on_validation`); with
    ``update="fixed"`` they stay at their initial value. A class without validation samples (NaN)
    keeps its last accuracy. A class at 100% validation accuracy gets weight 0, as in the
    reference; if every class is at 100% the weights fall back to 1.

    Args:
        num_classes: K.
        tau: exponent, a number (1.5) or ``"dynamic"``: ``2 sigmoid(max_k A_k / (min_k A_k + 0.01) - 1)``.
        update: ``"every_validation"`` or ``"fixed"``.
    """

    plain_loss = False  # class weights from the engine's validation passes

    class_accuracy: torch.Tensor
    class_weights: torch.Tensor

    def __init__(
        self,
        num_classes: int,
        *,
        tau: float | Literal["dynamic"] = 1.5,
        update: Update = "every_validation",
    ) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        if tau != "dynamic" and (isinstance(tau, str) or float(tau) <= 0):
            raise MR2InputError(_BAD_TAU.format(value=tau))
        check_choice(update, Update, _BAD_UPDATE, MR2InputError)
        self.tau: float | Literal["dynamic"] = tau if tau == "dynamic" else float(tau)
        self.update = update
        # Validation accuracy the weights were computed from (0 = difficulty 1 = weight 1).
        self.register_buffer("class_accuracy", torch.zeros(num_classes, dtype=torch.float64))
        self.register_buffer("class_weights", torch.ones(num_classes))

    def setup(self, context: MethodContext) -> None:
        self.class_accuracy = self.class_accuracy.to(context.device)
        self.class_weights = self.class_weights.to(context.device)
        if context.validation_class_accuracy is not None:
            self.set_class_accuracy(context.validation_class_accuracy)

    def on_validation(self, epoch: int, class_accuracy: torch.Tensor) -> None:
        if self.update == "every_validation":
            self.set_class_accuracy(class_accuracy)

    @torch.no_grad()
    def set_class_accuracy(self, class_accuracy: torch.Tensor) -> None:
        """Recompute the class weights from per-class accuracies in [0, 1] (NaN: keep the last)."""
        if class_accuracy.shape != (self.num_classes,):
            raise MR2InputError(
                _BAD_ACCURACY.format(expected=self.num_classes, shape=tuple(class_accuracy.shape))
            )
        accuracy = class_accuracy.to(self.class_accuracy)
        self.class_accuracy.copy_(torch.where(accuracy.isnan(), self.class_accuracy, accuracy))
        tau = cdb_dynamic_tau(self.class_accuracy) if self.tau == "dynamic" else self.tau
        self.class_weights.copy_(cdb_class_weights(self.class_accuracy, tau))

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        per_sample = checked_cross_entropy(logits, target, self.num_classes, reduction="none")
        loss = (self.class_weights.to(per_sample.dtype)[target] * per_sample).mean()
        self.record(
            loss=loss,
            class_weight_min=self.class_weights.min(),
            class_weight_max=self.class_weights.max(),
        )
        return loss

