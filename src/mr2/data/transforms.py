"""Per-regime transform presets (torchvision ``transforms.v2``).

* ``mnist``: training adds RandomCrop(28, padding=2) when ``mnist_crop``; then to float and
  Normalize (evaluation: to float, Normalize).
* ``cifar``: training RandomCrop(32, padding=4) + RandomHorizontalFlip; then to float and
  Normalize (evaluation: to float, Normalize).
* ``imagenet``: training RandomResizedCrop(S) + RandomHorizontalFlip; evaluation
  Resize(S * 256 / 224) + CenterCrop(S); then to float and Normalize (S = 224 by default).
* ``none``: nothing; feature arrays are used as they are.

``mnist`` and ``cifar`` take uint8 image tensors [C, H, W] (no PIL round trip); ``imagenet`` takes
PIL images or tensors. No AutoAugment / RandAugment by default. With ``augment=False`` training
uses the evaluation transform. An ``image_size`` other than the native size of ``mnist`` / ``cifar``
images resizes them after augmentation (e.g. 224 for a pre-trained ViT).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torchvision.transforms import v2

__all__ = ["NORMALIZATION", "REGIMES", "build_transform"]

REGIMES = ("mnist", "cifar", "imagenet", "none")

#: Per-channel (mean, std) of common data sets' training images, in [0, 1] units.
NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}

_NATIVE_SIZE = {"mnist": 28, "cifar": 32}
_DEFAULT_NORMALIZATION = {"mnist": "fashion_mnist", "cifar": "cifar10", "imagenet": "imagenet"}


def build_transform(
    regime: str,
    *,
    train: bool,
    augment: bool = True,
    image_size: int | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    mnist_crop: bool = False,
) -> Callable[[Any], Any] | None:
    """The transform for one split under a regime.

    Args:
        regime: one of :data:`REGIMES`.
        train: the training split (augmented when ``augment``) or an evaluation split.
        augment: apply the regime's augmentation to the training split.
        image_size: output side length (default: 28 for ``mnist``, 32 for ``cifar``, 224 for
            ``imagenet``).
        mean: per-channel normalisation mean (default: the regime's usual data set, see
            :data:`NORMALIZATION`).
        std: per-channel normalisation standard deviation.
        mnist_crop: for ``mnist``, also RandomCrop(28, padding=2) when augmenting.

    Returns:
        A callable on one input, or ``None`` for ``none``.

    Raises:
        ValueError: unknown regime.

    Example:
        >>> transform = build_transform("cifar", train=True)
        >>> image = torch.zeros(3, 32, 32, dtype=torch.uint8)
        >>> out = transform(image)
        >>> out.shape, out.dtype
        (torch.Size([3, 32, 32]), torch.float32)
    """
    if regime not in REGIMES:
        raise ValueError(f"unknown transform regime {regime!r}; choose one of {REGIMES}")
    if regime == "none":
        return None
    default_mean, default_std = NORMALIZATION[_DEFAULT_NORMALIZATION[regime]]
    normalize = v2.Normalize(
        mean=list(default_mean if mean is None else mean),
        std=list(default_std if std is None else std),
    )
    to_float = v2.ToDtype(torch.float32, scale=True)
    augmenting = train and augment
    steps: list[Callable[[Any], Any]] = []
    if regime == "imagenet":
        size = 224 if image_size is None else image_size
        if augmenting:
            steps += [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()]
        else:
            steps += [v2.Resize(round(size * 256 / 224), antialias=True), v2.CenterCrop(size)]
        steps.insert(0, v2.ToImage())
        return v2.Compose([*steps, to_float, normalize, v2.ToPureTensor()])
    native = _NATIVE_SIZE[regime]
    if augmenting and regime == "cifar":
        steps += [v2.RandomCrop(native, padding=4), v2.RandomHorizontalFlip()]
    if augmenting and regime == "mnist" and mnist_crop:
        steps.append(v2.RandomCrop(native, padding=2))
    if image_size is not None and image_size != native:
        steps.append(v2.Resize([image_size, image_size], antialias=True))
    return v2.Compose([*steps, to_float, normalize])
