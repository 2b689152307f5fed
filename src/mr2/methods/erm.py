"""ERM: empirical risk minimisation with (optionally label-smoothed) cross-entropy."""

from __future__ import annotations

import torch

from mr2.checks import MR2InputError, check_num_classes
from mr2.methods.base import TrainingMethod, checked_cross_entropy
from mr2.methods.registry import register_method

__all__ = ["ERM"]

_BAD_SMOOTHING = "label_smoothing must be in [0, 1); got {value!r}."


@register_method("erm")
class ERM(TrainingMethod):
    r"""Plain cross-entropy, the reference every other method is measured against.

    .. math::
        \ell(z, y) = -\sum_k \tilde y_k \log \mathrm{softmax}(z)_k, \qquad
        \tilde y = (1 - \varepsilon)\, e_y + \varepsilon / K

    ``label_smoothing = 0`` (default) is standard cross-entropy (``torch.nn.functional.cross_entropy``
    with the same ``label_smoothing`` convention).

    Args:
        num_classes: K.
        label_smoothing: ``epsilon`` in [0, 1).

    Example:
        >>> import torch.nn.functional as F
        >>> erm = ERM(3)
        >>> z, y = torch.tensor([[1.0, 2.0, 0.5]]), torch.tensor([1])
        >>> bool(torch.isclose(erm(z, None, y), F.cross_entropy(z, y)))
        True
    """

    def __init__(self, num_classes: int, *, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        if not 0.0 <= float(label_smoothing) < 1.0:
            raise MR2InputError(_BAD_SMOOTHING.format(value=label_smoothing))
        self.label_smoothing = float(label_smoothing)

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        loss = checked_cross_entropy(logits, target, self.num_classes, label_smoothing=self.label_smoothing)
        self.record(loss=loss)
        return loss

