"""Focal loss (Lin et al., ICCV 2017) as a training method."""

from __future__ import annotations

import torch

from mr2.checks import MR2InputError, check_classification_inputs, check_num_classes
from mr2.functional.baselines import focal_loss
from mr2.methods.base import TrainingMethod
from mr2.methods.registry import register_method

__all__ = ["Focal"]

_BAD_GAMMA = "gamma must be >= 0; got {value!r}."


@register_method("focal")
class Focal(TrainingMethod):
    r"""Focal loss: cross-entropy down-weighted on confidently-correct samples.

    .. math::
        \ell(z, y) = -(1 - p_y)^\gamma \log p_y, \qquad p = \mathrm{softmax}(z)

    ``gamma = 1`` as in kaidic/LDAM-DRW's focal baseline (Lin et al. use 2 with an ``alpha``
    balance factor for detection); ``gamma = 0`` is cross-entropy.

    Args:
        num_classes: K.
        gamma: focusing parameter (1.0).

    Example:
        >>> import torch.nn.functional as F
        >>> z, y = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
        >>> bool(torch.isclose(Focal(2, gamma=0.0)(z, None, y), F.cross_entropy(z, y)))
        True
    """

    def __init__(self, num_classes: int, *, gamma: float = 1.0) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        if float(gamma) < 0:
            raise MR2InputError(_BAD_GAMMA.format(value=gamma))
        self.gamma = float(gamma)

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        check_classification_inputs(logits, None, target, self.num_classes)
        loss = focal_loss(logits, target, self.gamma)
        self.record(loss=loss)
        return loss

