"""A small CNN for 28x28 grey images (Fashion-MNIST), fast enough to train on a laptop CPU."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mr2.models.classifier import BackboneClassifier

__all__ = ["SmallCNN"]

_INPUT_TOO_SMALL = "SmallCNN needs inputs of at least {minimum}x{minimum} pixels, got {size}"


class ToChannelsLast(nn.Module):
    """Lay a 4-d batch out channels-last (NHWC): the CPU convolutions are ~20% faster that way."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last)


class SmallCNN(BackboneClassifier):
    """Three conv blocks and one hidden fully-connected layer.

    Each block is ``conv3x3 -> maxpool2x2 -> BatchNorm -> ReLU`` (28 -> 14 -> 7 -> 3 for
    Fashion-MNIST), then ``flatten -> Linear(channels[-1]*3*3, hidden_dim) -> ReLU``, whose output
    is the feature vector. Pooling before normalising is close to the usual conv-BN-ReLU-pool order
    (max-pooling commutes with ReLU and with batch norm's per-channel affine map when its scale is
    positive; only the batch statistics are taken after pooling) and runs batch norm on a quarter of
    the activations; its speed on CPU is measured in docs/models.md and BENCHMARKS.md.

    Args:
        num_classes: K.
        in_channels: input channels (1 for Fashion-MNIST).
        image_size: input height and width, ``(28, 28)`` for Fashion-MNIST.
        channels: output channels of the three conv blocks.
        hidden_dim: width of the hidden layer, which is the feature dimension.
        dropout: dropout probability before the classifier (0 disables it).

    Example:
        >>> model = SmallCNN(num_classes=10)
        >>> logits, features = model(torch.randn(2, 1, 28, 28))
        >>> logits.shape, features.shape, model.feature_dim
        (torch.Size([2, 10]), torch.Size([2, 256]), 256)
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: int = 1,
        image_size: tuple[int, int] = (28, 28),
        channels: Sequence[int] = (32, 64, 128),
        hidden_dim: int = 256,
        dropout: float = 0.0,
    ) -> None:
        height, width = image_size
        shrink = 2 ** len(channels)
        if height < shrink or width < shrink:
            raise ValueError(_INPUT_TOO_SMALL.format(minimum=shrink, size=f"{height}x{width}"))
        layers: list[nn.Module] = [ToChannelsLast()]
        previous = in_channels
        for width_out in channels:
            layers += [
                nn.Conv2d(previous, width_out, kernel_size=3, padding=1, bias=False),
                nn.MaxPool2d(2),
                nn.BatchNorm2d(width_out),
                nn.ReLU(inplace=True),
            ]
            previous = width_out
        flat = previous * (height // shrink) * (width // shrink)
        layers += [nn.Flatten(), nn.Linear(flat, hidden_dim), nn.ReLU(inplace=True)]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        super().__init__(nn.Sequential(*layers), hidden_dim, num_classes)
        for module in self.backbone.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        self.backbone.to(memory_format=torch.channels_last)
