"""ResNets for 32x32 inputs: ResNet-32 (He et al., 2016) and WRN-28-10 (Zagoruyko & Komodakis, 2016)."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from mr2.errors import choices, either
from mr2.models.classifier import BackboneClassifier

__all__ = ["ResNetCifar", "WideResNet", "resnet32", "wrn28_10"]

#: The residual shortcut where the shape changes: zero-padded identity (A) or 1x1 projection (B).
Shortcut = Literal["A", "B"]
_SHORTCUT_NOTES = {"A": "zero-padded identity", "B": "1x1 projection"}

_BAD_RESNET_DEPTH = "a CIFAR ResNet has depth 6n+2 (20, 32, 44, 56, 110, ...), got {depth}"
_BAD_WRN_DEPTH = "a wide ResNet has depth 6n+4 (16, 22, 28, 40, ...), got {depth}"
BAD_SHORTCUT = f"shortcut must be {either(Shortcut, _SHORTCUT_NOTES)}, got {{shortcut!r}}"


def _init_weights(module: nn.Module) -> None:
    for layer in module.modules():
        if isinstance(layer, nn.Conv2d):
            nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(layer, nn.BatchNorm2d):
            nn.init.ones_(layer.weight)
            nn.init.zeros_(layer.bias)


class ZeroPadShortcut(nn.Module):
    """Option-A shortcut: subsample by ``stride`` and append zero channels (no parameters)."""

    def __init__(self, extra_channels: int, stride: int) -> None:
        super().__init__()
        self.extra_channels = extra_channels
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra_channels))


class BasicBlock(nn.Module):
    """``relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))`` with 3x3 convolutions (post-activation)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, shortcut: Shortcut) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            if shortcut == "A":
                self.shortcut = ZeroPadShortcut(out_channels - in_channels, stride)
            else:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(out_channels),
                )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x), inplace=True)


class ResNetCifar(BackboneClassifier):
    """The CIFAR ResNet of He et al. (2016, sec. 4.2): depth ``6n + 2``.

    A 3x3 conv with 16 channels, three stages of ``n`` basic blocks with 16, 32 and 64 channels
    (the second and third stages start with stride 2: 32 -> 16 -> 8 pixels), global average pooling
    to 64-d features, then the linear classifier. ``depth=32`` (n = 5) is ResNet-32 (0.46M
    parameters). Shortcuts that change the shape are option A by default, as in the paper for
    CIFAR: the identity, subsampled, with zero-padded extra channels (no parameters); option B uses
    a 1x1 convolution and batch norm instead.

    Args:
        num_classes: K.
        depth: 6n + 2 (20, 32, 44, 56, 110).
        in_channels: input channels.
        shortcut: ``"A"`` (zero padding) or ``"B"`` (projection).
        base_width: channels of the first stage (doubled at each later stage).

    Example:
        >>> model = ResNetCifar(num_classes=100, depth=32)
        >>> logits, features = model(torch.randn(2, 3, 32, 32))
        >>> logits.shape, features.shape
        (torch.Size([2, 100]), torch.Size([2, 64]))
    """

    def __init__(
        self,
        num_classes: int,
        depth: int = 32,
        in_channels: int = 3,
        shortcut: Shortcut = "A",
        base_width: int = 16,
    ) -> None:
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(_BAD_RESNET_DEPTH.format(depth=depth))
        if shortcut not in choices(Shortcut):
            raise ValueError(BAD_SHORTCUT.format(shortcut=shortcut))
        blocks_per_stage = (depth - 2) // 6
        widths = (base_width, 2 * base_width, 4 * base_width)
        layers: list[nn.Module] = [
            nn.Conv2d(in_channels, base_width, 3, padding=1, bias=False),
            nn.BatchNorm2d(base_width),
            nn.ReLU(inplace=True),
        ]
        previous = base_width
        for stage, width in enumerate(widths):
            for block in range(blocks_per_stage):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(previous, width, stride, shortcut))
                previous = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        super().__init__(nn.Sequential(*layers), previous, num_classes)
        _init_weights(self.backbone)


class WideBasicBlock(nn.Module):
    """Pre-activation wide block: ``conv(drop(relu(bn(conv(relu(bn(x))))))) + shortcut``.

    When the shape changes, the 1x1 projection shortcut reads the pre-activated input
    ``relu(bn(x))``, as in the authors' code.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.projection: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.projection = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = F.relu(self.bn1(x))
        out = self.conv1(activated)
        out = self.conv2(self.dropout(F.relu(self.bn2(out), inplace=True)))
        shortcut = x if self.projection is None else self.projection(activated)
        return out + shortcut


class WideResNet(BackboneClassifier):
    """Wide ResNet WRN-``depth``-``widen`` (Zagoruyko & Komodakis, 2016) for 32x32 inputs.

    A 3x3 conv with 16 channels, three groups of ``(depth - 4) / 6`` pre-activation wide blocks with
    ``16k``, ``32k`` and ``64k`` channels (strides 1, 2, 2), then batch norm, ReLU and global
    average pooling: the features are ``64k``-d (640 for WRN-28-10, 36.5M parameters).

    Args:
        num_classes: K.
        depth: 6n + 4 (28 for WRN-28-10).
        widen_factor: k (10 for WRN-28-10).
        dropout: dropout between the two convolutions of each block (0 by default).
        in_channels: input channels.

    Example:
        >>> model = WideResNet(num_classes=10, depth=10, widen_factor=2)
        >>> logits, features = model(torch.randn(2, 3, 32, 32))
        >>> logits.shape, features.shape
        (torch.Size([2, 10]), torch.Size([2, 128]))
    """

    def __init__(
        self,
        num_classes: int,
        depth: int = 28,
        widen_factor: int = 10,
        dropout: float = 0.0,
        in_channels: int = 3,
    ) -> None:
        if depth < 10 or (depth - 4) % 6:
            raise ValueError(_BAD_WRN_DEPTH.format(depth=depth))
        blocks_per_group = (depth - 4) // 6
        widths = (16 * widen_factor, 32 * widen_factor, 64 * widen_factor)
        layers: list[nn.Module] = [nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)]
        previous = 16
        for group, width in enumerate(widths):
            for block in range(blocks_per_group):
                stride = 2 if group > 0 and block == 0 else 1
                layers.append(WideBasicBlock(previous, width, stride, dropout))
                previous = width
        layers += [
            nn.BatchNorm2d(previous),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        ]
        super().__init__(nn.Sequential(*layers), previous, num_classes)
        _init_weights(self.backbone)


def resnet32(num_classes: int, **kwargs: Any) -> ResNetCifar:
    """ResNet-32 for 32x32 inputs (64-d features); ``kwargs`` go to :class:`ResNetCifar`.

    Example:
        >>> sum(p.numel() for p in resnet32(num_classes=10).parameters())
        464154
    """
    return ResNetCifar(num_classes, depth=32, **kwargs)


def wrn28_10(num_classes: int, **kwargs: Any) -> WideResNet:
    """WRN-28-10 for 32x32 inputs (640-d features); ``kwargs`` go to :class:`WideResNet`."""
    return WideResNet(num_classes, depth=28, widen_factor=10, **kwargs)
