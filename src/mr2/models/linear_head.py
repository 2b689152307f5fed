"""The model of a linear probe: a linear classifier whose input is the cached feature vector."""

from __future__ import annotations

import torch  # noqa: F401  (used by the doctest)
from torch import nn

from mr2.models.classifier import BackboneClassifier

__all__ = ["LinearHead"]


class LinearHead(BackboneClassifier):
    """The model trained on cached features: ``logits = W features + b``.

    Its input IS the feature vector, so ``forward(features)`` returns ``(logits, features)`` with
    the input passed through unchanged; the losses and class statistics see the same
    ``(logits, features)`` pair as with the full model.

    Args:
        feature_dim: d, the width of the cached features.
        num_classes: K.

    Example:
        >>> head = LinearHead(feature_dim=8, num_classes=3)
        >>> x = torch.randn(4, 8)
        >>> logits, features = head(x)
        >>> logits.shape, features is x
        (torch.Size([4, 3]), True)
    """

    def __init__(self, feature_dim: int, num_classes: int) -> None:
        super().__init__(nn.Identity(), feature_dim, num_classes)
