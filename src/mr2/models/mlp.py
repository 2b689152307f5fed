"""A two-hidden-layer perceptron over flattened inputs."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from mr2.models.classifier import BackboneClassifier

__all__ = ["MLP"]

#: The widest hidden layer accepted (a 784 x 65,536 float32 layer is 0.2 GB; checked before allocating).
MAX_WIDTH = 65_536
_BAD_WIDTH = "hidden_dims must be integers from 1 to {maximum}; got {bad}"
_NEEDS_HIDDEN_LAYER = "MLP needs at least one hidden layer, got hidden_dims={hidden_dims}"


class MLP(BackboneClassifier):
    """``flatten -> (Linear -> ReLU) x len(hidden_dims)``; the last hidden layer is the feature.

    Args:
        num_classes: K.
        input_shape: shape of one input, e.g. ``(1, 28, 28)`` or ``(d,)``; it is flattened.
        hidden_dims: widths of the hidden layers (two by default); the last is the feature dim.
        dropout: dropout probability after each hidden layer (0 disables it).

    Example:
        >>> import torch
        >>> model = MLP(num_classes=10, input_shape=(1, 28, 28))
        >>> logits, features = model(torch.randn(2, 1, 28, 28))
        >>> logits.shape, features.shape
        (torch.Size([2, 10]), torch.Size([2, 256]))
    """

    def __init__(
        self,
        num_classes: int,
        input_shape: Sequence[int],
        hidden_dims: Sequence[int] = (512, 256),
        dropout: float = 0.0,
    ) -> None:
        if not hidden_dims:
            raise ValueError(_NEEDS_HIDDEN_LAYER.format(hidden_dims=hidden_dims))
        bad = [w for w in hidden_dims
               if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= MAX_WIDTH]
        if bad:
            raise ValueError(_BAD_WIDTH.format(maximum=MAX_WIDTH, bad=bad[:5]))
        layers: list[nn.Module] = [nn.Flatten()]
        previous = math.prod(input_shape)
        for width in hidden_dims:
            layers += [nn.Linear(previous, width), nn.ReLU(inplace=True)]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            previous = width
        super().__init__(nn.Sequential(*layers), previous, num_classes)
