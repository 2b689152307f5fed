"""Any timm backbone by name (MAE, CLIP, MoCo v2, DINO, ConvNeXt, ...) as a ``(logits, features)`` model."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from mr2.models.classifier import BackboneClassifier, split_own_format
from mr2.models.weights import (
    WEIGHTS_AND_PRETRAINED,
    WeightsMismatchError,
    check_state_dict,
    load_state_dict_file,
)

__all__ = ["TimmClassifier", "build_timm_model", "split_timm_weights"]

_UNKNOWN_TIMM_MODEL = "timm has no model named {name!r}; similar names: {similar}"
_TIMM_LOAD_FAILED = "timm could not load {source} into {name}: {error}"
_TORCH_LOAD_ERROR = "Error(s) in loading state_dict"


def _classifier_names(name: str) -> tuple[str, ...]:
    """Module names of the classification head(s) in timm's pretrained config of ``name``."""
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    classifier = getattr(cfg, "classifier", None) if cfg is not None else None
    if not classifier:
        return ()
    return (classifier,) if isinstance(classifier, str) else tuple(classifier)


def _feature_dim(model: nn.Module) -> int:
    # With num_classes=0 timm returns the pre-logits features: head_hidden_size when a pre-logits
    # layer exists (timm >= 1.0), num_features otherwise.
    timm_model: Any = model
    return int(getattr(timm_model, "head_hidden_size", None) or timm_model.num_features)


def split_timm_weights(
    state_dict: Mapping[str, torch.Tensor], classifier_names: Sequence[str]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Split a timm state_dict into backbone and head parts.

    The first classifier's ``weight``/``bias`` form the head part (other classifier keys, e.g. a
    distillation head or an MLP head, are kept there under their full names, so loading the head
    reports them); everything else is the backbone.

    Example:
        >>> backbone, head = split_timm_weights(
        ...     {"blocks.0.w": torch.ones(1), "head.weight": torch.ones(1), "head.bias": torch.ones(1)},
        ...     ["head"],
        ... )
        >>> sorted(backbone), sorted(head)
        (['blocks.0.w'], ['bias', 'weight'])
    """
    backbone: dict[str, torch.Tensor] = {}
    head: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        owner = next((c for c in classifier_names if key.startswith(c + ".")), None)
        if owner is None:
            backbone[key] = value
        elif owner == classifier_names[0] and key[len(owner) + 1 :] in ("weight", "bias"):
            head[key[len(owner) + 1 :]] = value
        else:
            head[key] = value
    return backbone, head


class TimmClassifier(BackboneClassifier):
    """A timm model built with ``num_classes=0`` (its pooled features) and our own linear head.

    Native weights are timm state_dicts: keys of the model's classifier (``head.*`` for ViTs,
    ``fc.*`` for ResNets, ``head.fc.*`` for ConvNeXts, as named by its pretrained config) go to the
    head, the rest to the backbone.

    Args:
        name: timm model name (with an optional ``.tag``).
        model: the timm model, created with ``num_classes=0``.
        num_classes: K.
    """

    def __init__(self, name: str, model: nn.Module, num_classes: int) -> None:
        super().__init__(model, _feature_dim(model), num_classes)
        self.name = name
        self.classifier_names = _classifier_names(name)

    def split_native_weights(
        self, state_dict: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Split a timm state_dict (see :func:`split_timm_weights`)."""
        return split_timm_weights(state_dict, self.classifier_names)


def _check_name(name: str) -> None:
    import timm

    if not timm.is_model(name):
        stem = name.split(".", 1)[0]
        similar = timm.list_models(f"*{stem[: max(3, len(stem) // 2)]}*")[:10]
        raise ValueError(_UNKNOWN_TIMM_MODEL.format(name=name, similar=", ".join(similar) or "none"))


def build_timm_model(
    name: str,
    num_classes: int,
    input_shape: Sequence[int] | None = None,
    *,
    weights: str | os.PathLike[str] | None = None,
    pretrained: bool = False,
    load_head: bool = False,
    weights_key_prefix: str | None = None,
    **options: Any,
) -> TimmClassifier:
    """Build a timm backbone with a new linear head, optionally from a local weights file.

    Local weights go through timm's own loading pipeline (``pretrained_cfg_overlay`` with the
    state_dict), so the model's checkpoint filter still runs: position embeddings are resized to
    ``img_size``, original-format checkpoints (e.g. OpenAI CLIP, MAE) are converted where timm
    knows how, and a first convolution is adapted to ``in_chans``. The file is read here with
    ``weights_only=True``; the hub is never contacted unless ``pretrained=True``.

    Args:
        name: timm model name, optionally with a weights tag (``vit_base_patch16_224.mae``,
            ``vit_base_patch16_clip_224.openai``, ``resnet50``).
        num_classes: K.
        input_shape: ``(C, H, W)``: ``in_chans`` defaults to ``C``. The image size is NOT passed
            on (CNNs do not take it); give ``img_size`` in ``options`` for ViTs.
        weights: local weights file (timm state_dict, this wrapper's state_dict, or a checkpoint
            holding one under ``state_dict``/``model``; ``.safetensors`` works too).
        pretrained: download timm's weights for ``name`` from the hub (never implicit).
        load_head: also load the head from the weights (shapes must match ``num_classes``).
        weights_key_prefix: select the keys under this prefix of the file (``"encoder_q."`` for
            MoCo, ``"backbone."``, ...).
        **options: keyword arguments of ``timm.create_model`` (``img_size``, ``global_pool``,
            ``drop_path_rate``, ...).

    Raises:
        ValueError: unknown model name, or both ``weights`` and ``pretrained``.
        mr2.models.weights.WeightsMismatchError: if the weights do not fit, naming the keys.

    Example:
        >>> model = build_timm_model("test_vit", num_classes=3, input_shape=(3, 32, 32), img_size=32)
        >>> logits, features = model(torch.randn(2, 3, 32, 32))
        >>> logits.shape, features.shape
        (torch.Size([2, 3]), torch.Size([2, 64]))
    """
    import timm

    _check_name(name)
    if weights is not None and pretrained:
        raise ValueError(WEIGHTS_AND_PRETRAINED)
    if input_shape is not None and len(input_shape) == 3:
        options.setdefault("in_chans", int(input_shape[0]))

    if pretrained:
        # The hub model keeps its head until we have copied it (when asked to).
        hub_model: Any = timm.create_model(name, pretrained=True, **options)
        library_head = hub_model.get_classifier()
        hub_model.reset_classifier(0)
        classifier = TimmClassifier(name, hub_model, num_classes)
        if load_head:
            head_weights = library_head.state_dict()
            check_state_dict(classifier.classifier, head_weights, f"timm's pretrained {name}")
            classifier.classifier.load_state_dict(head_weights)
        return classifier

    if weights is None:
        return TimmClassifier(name, timm.create_model(name, num_classes=0, **options), num_classes)

    source = str(weights)
    state_dict = load_state_dict_file(weights, key_prefix=weights_key_prefix)
    parts = split_own_format(state_dict)
    if parts is None:
        parts = split_timm_weights(state_dict, _classifier_names(name))
    backbone_weights, head_weights = parts
    # num_classes=0 in the config too: timm then loads strictly (it relaxes when they differ).
    overlay = {
        "state_dict": backbone_weights,
        "source": "",
        "file": None,
        "url": None,
        "num_classes": 0,
        "label_offset": 0,
    }
    try:
        model = timm.create_model(
            name, pretrained=True, num_classes=0, pretrained_cfg_overlay=overlay, **options
        )
    except RuntimeError as error:
        if _TORCH_LOAD_ERROR not in str(error):
            raise
        raise WeightsMismatchError(_TIMM_LOAD_FAILED.format(source=source, name=name, error=error)) from error
    for cfg_name in ("pretrained_cfg", "default_cfg"):
        cfg = getattr(model, cfg_name, None)
        if isinstance(cfg, dict):
            cfg.pop("state_dict", None)  # do not keep a second copy of the weights alive
    classifier = TimmClassifier(name, model, num_classes)
    if load_head:
        check_state_dict(classifier.classifier, head_weights, source, "TimmClassifier.classifier")
        classifier.classifier.load_state_dict(head_weights)
    return classifier
