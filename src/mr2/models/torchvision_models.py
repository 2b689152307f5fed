"""torchvision's ImageNet classifiers (ResNet-50, ViT-B/16, ...) as ``(logits, features)`` models."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from mr2.models.classifier import BackboneClassifier
from mr2.models.weights import WEIGHTS_AND_PRETRAINED, check_state_dict, load_state_dict_file

__all__ = ["TORCHVISION_FAMILIES", "TorchvisionClassifier", "build_torchvision_model"]

#: Name prefix of a supported torchvision family -> attribute holding its classification head.
TORCHVISION_FAMILIES: dict[str, str] = {
    "resnet": "fc",
    "resnext": "fc",
    "wide_resnet": "fc",
    "regnet_": "fc",
    "vit_": "heads",
    "swin_": "head",
}
#: Inside that attribute, the final nn.Linear (ViT's ``heads`` is a Sequential holding ``head``).
_FINAL_LINEAR = {"heads": "heads.head"}
_LINEAR_KEYS = ("weight", "bias")

UNSUPPORTED_TORCHVISION = (
    "torchvision model {name!r} is not supported: use one of the families {families} "
    "(e.g. resnet50, vit_b_16), or a timm model ('timm:<name>')"
)
_NEEDS_RGB = "torchvision model {name!r} takes 3-channel images, got input_shape={shape}"
_VIT_NEEDS_SQUARE = "{name} needs square images (image_size), got input_shape={shape}"


def head_attribute(name: str) -> str:
    """The attribute of torchvision model ``name`` holding its head (``fc``, ``heads``, ``head``).

    Raises:
        ValueError: if ``name`` is not in a supported family.

    Example:
        >>> head_attribute("resnet50"), head_attribute("vit_b_16")
        ('fc', 'heads')
    """
    for prefix, attribute in TORCHVISION_FAMILIES.items():
        if name.startswith(prefix):
            return attribute
    raise ValueError(
        UNSUPPORTED_TORCHVISION.format(name=name, families=", ".join(f"{p}*" for p in TORCHVISION_FAMILIES))
    )


class TorchvisionClassifier(BackboneClassifier):
    """A torchvision classifier whose head is replaced by ``nn.Linear(feature_dim, num_classes)``.

    The backbone is the torchvision model itself with its head set to ``nn.Identity()``, so its
    output is the penultimate feature: 2048-d after global pooling for ResNet-50, the 768-d class
    token after the final layer norm for ViT-B/16.

    Native weights are those of the torchvision model (``torchvision.models.resnet50().state_dict()``
    layout): the head's keys (``fc.*``, ``heads.*``, ``head.*``) go to the classifier, the rest to the
    backbone.

    Args:
        name: torchvision model name (``resnet50``, ``vit_b_16``, ...).
        model: the torchvision model, head included (it is replaced here).
        num_classes: K.
    """

    def __init__(self, name: str, model: nn.Module, num_classes: int) -> None:
        attribute = head_attribute(name)
        final = model.get_submodule(_FINAL_LINEAR.get(attribute, attribute))
        if not isinstance(final, nn.Linear):  # pragma: no cover - guards a torchvision change
            raise TypeError(f"{name}.{attribute} is a {type(final).__name__}, not nn.Linear")
        feature_dim = final.in_features
        setattr(model, attribute, nn.Identity())
        super().__init__(model, feature_dim, num_classes)
        self.name = name
        self.head_attribute = attribute
        self.final_linear = _FINAL_LINEAR.get(attribute, attribute)

    def split_native_weights(
        self, state_dict: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Split a torchvision state_dict: keys under the head attribute go to the head part
        (the final Linear's as ``weight``/``bias``, any other under its full name, e.g. a MoCo MLP
        head's ``fc.0.weight``, which is then reported if the head is loaded); the others go to the
        backbone."""
        backbone: dict[str, torch.Tensor] = {}
        head: dict[str, torch.Tensor] = {}
        final_prefix = self.final_linear + "."
        for key, value in state_dict.items():
            if key.startswith(final_prefix) and key[len(final_prefix) :] in _LINEAR_KEYS:
                head[key[len(final_prefix) :]] = value
            elif key.startswith(self.head_attribute + "."):
                head[key] = value  # e.g. a MoCo MLP head: reported as unexpected if loaded
            else:
                backbone[key] = value
        return backbone, head


def build_torchvision_model(
    name: str,
    num_classes: int,
    input_shape: Sequence[int] = (3, 224, 224),
    *,
    weights: str | os.PathLike[str] | None = None,
    pretrained: bool = False,
    load_head: bool = False,
    weights_key_prefix: str | None = None,
    **options: Any,
) -> TorchvisionClassifier:
    """Build a torchvision classifier with a new head, optionally from weights.

    Args:
        name: torchvision model name in a supported family (resnet50, vit_b_16, ...).
        num_classes: K.
        input_shape: ``(3, H, W)``; for ViTs ``image_size`` defaults to ``H`` (must equal ``W``).
        weights: local weights file (state_dict of the torchvision model, of this wrapper, or a
            checkpoint holding one under ``state_dict``/``model``), read with ``weights_only=True``.
        pretrained: download torchvision's default weights (needs internet; never implicit).
        load_head: also load the head from the weights (shapes must match ``num_classes``).
        weights_key_prefix: select the keys under this prefix of the weights file (e.g.
            ``"encoder_q."`` for a MoCo checkpoint).
        **options: keyword arguments of the torchvision constructor (``image_size``, ``dropout``,
            ``zero_init_residual``, ...).

    Raises:
        ValueError: unsupported name, non-RGB input, or both ``weights`` and ``pretrained``.
        mr2.models.weights.WeightsMismatchError: if the weights do not fit, naming the keys.

    Example:
        >>> model = build_torchvision_model("resnet18", num_classes=5, input_shape=(3, 64, 64))
        >>> logits, features = model(torch.randn(1, 3, 64, 64))
        >>> logits.shape, features.shape
        (torch.Size([1, 5]), torch.Size([1, 512]))
    """
    import torchvision

    head_attribute(name)  # validate the family before building anything
    if weights is not None and pretrained:
        raise ValueError(WEIGHTS_AND_PRETRAINED)
    shape = tuple(input_shape)
    if len(shape) != 3 or shape[0] != 3:
        raise ValueError(_NEEDS_RGB.format(name=name, shape=shape))
    if name.startswith("vit_") and "image_size" not in options:
        if shape[1] != shape[2]:
            raise ValueError(_VIT_NEEDS_SQUARE.format(name=name, shape=shape))
        options["image_size"] = shape[1]
    library_weights = "DEFAULT" if pretrained else None
    model = torchvision.models.get_model(name, weights=library_weights, **options)
    attribute = head_attribute(name)
    library_head = model.get_submodule(_FINAL_LINEAR.get(attribute, attribute))
    classifier = TorchvisionClassifier(name, model, num_classes)
    if pretrained and load_head:
        head_weights = library_head.state_dict()
        check_state_dict(classifier.classifier, head_weights, f"torchvision's pretrained {name}")
        classifier.classifier.load_state_dict(head_weights)
    if weights is not None:
        state_dict = load_state_dict_file(weights, key_prefix=weights_key_prefix)
        classifier.load_weights(state_dict, load_head=load_head, source=str(weights))
    return classifier
