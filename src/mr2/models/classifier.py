"""The shape every model of mr2 shares: a backbone giving features, one linear layer giving logits."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from mr2.models.weights import check_state_dict

__all__ = ["BackboneClassifier", "split_own_format"]

#: Key prefixes of a :class:`BackboneClassifier`'s own ``state_dict``.
BACKBONE_PREFIX = "backbone."
CLASSIFIER_PREFIX = "classifier."


def split_own_format(
    state_dict: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] | None:
    """Split a :class:`BackboneClassifier` state_dict (keys ``backbone.*`` and ``classifier.*``)
    into its backbone and head parts, prefixes removed; ``None`` for any other layout.

    Example:
        >>> split_own_format({"backbone.0.weight": torch.ones(1), "classifier.bias": torch.ones(1)})
        ({'0.weight': tensor([1.])}, {'bias': tensor([1.])})
        >>> split_own_format({"fc.weight": torch.ones(1)}) is None
        True
    """
    if not state_dict or not all(k.startswith((BACKBONE_PREFIX, CLASSIFIER_PREFIX)) for k in state_dict):
        return None
    backbone = {
        key[len(BACKBONE_PREFIX) :]: value
        for key, value in state_dict.items()
        if key.startswith(BACKBONE_PREFIX)
    }
    head = {
        key[len(CLASSIFIER_PREFIX) :]: value
        for key, value in state_dict.items()
        if key.startswith(CLASSIFIER_PREFIX)
    }
    return backbone, head


class BackboneClassifier(nn.Module):
    """A backbone ``phi`` followed by one linear layer: ``forward(x)`` returns ``(logits, features)``.

    ``features = phi(x)`` is the input of the final linear layer (the penultimate representation,
    after pooling and flattening) and ``logits = W features + b``. Every model built by
    :func:`mr2.models.registry.build_model` is one of these, so the engine, the losses and the class
    statistics see the same interface whatever the architecture.

    Args:
        backbone: maps an input batch to features ``[B, feature_dim]``.
        feature_dim: d, the width of the features.
        num_classes: K, the number of logits.

    Attributes:
        backbone: the feature extractor.
        classifier: the final ``nn.Linear(feature_dim, num_classes)``.
        feature_dim: d.
        num_classes: K.
        backbone_frozen: whether :meth:`freeze_backbone` is in effect.

    Example:
        >>> model = BackboneClassifier(nn.Sequential(nn.Flatten(), nn.Linear(12, 4)), 4, 3)
        >>> logits, features = model(torch.randn(2, 3, 4))
        >>> logits.shape, features.shape
        (torch.Size([2, 3]), torch.Size([2, 4]))
    """

    def __init__(self, backbone: nn.Module, feature_dim: int, num_classes: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.classifier = nn.Linear(feature_dim, num_classes)
        self.feature_dim = int(feature_dim)
        self.num_classes = int(num_classes)
        self.backbone_frozen = False

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The features ``phi(x)``, ``[B, feature_dim]`` (computed without autograd when frozen)."""
        if self.backbone_frozen:
            with torch.no_grad():
                return self.backbone(x)
        return self.backbone(x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(logits [B, num_classes], features [B, feature_dim])``."""
        features = self.forward_features(x)
        return self.classifier(features), features

    def freeze_backbone(self, frozen: bool = True) -> None:
        """Train only the head (linear probing on the full model), or undo it.

        A frozen backbone has ``requires_grad=False`` parameters, stays in eval mode (its
        batch-norm statistics and dropout do not change) whatever ``train()`` is called with, and
        runs without autograd, so the features carry no gradient.
        """
        self.backbone_frozen = frozen
        self.backbone.requires_grad_(not frozen)
        self.backbone.train(self.training and not frozen)

    def train(self, mode: bool = True) -> BackboneClassifier:
        """Set training mode; a frozen backbone stays in eval mode."""
        super().train(mode)
        if self.backbone_frozen:
            self.backbone.eval()
        return self

    def split_weights(
        self, state_dict: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Split a state_dict into the backbone's part and the head's part.

        A state_dict of this class (keys ``backbone.*`` and ``classifier.*``) is split by prefix;
        any other layout is read as the architecture's native format (:meth:`split_native_weights`).
        """
        own = split_own_format(state_dict)
        return own if own is not None else self.split_native_weights(state_dict)

    def split_native_weights(
        self, state_dict: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Split a state_dict in the architecture's own format (subclasses wrapping a library model
        override this). By default every key is taken as a backbone key, so a foreign layout is
        reported key by key."""
        return dict(state_dict), {}

    def load_weights(
        self,
        state_dict: Mapping[str, torch.Tensor],
        *,
        load_head: bool = False,
        source: str = "the state_dict",
    ) -> None:
        """Load the backbone (and, with ``load_head``, the classifier) from a state_dict.

        Keys and shapes are checked before anything is copied, so a mismatch leaves the model
        unchanged. Without ``load_head`` the file's head (if any) is ignored and the classifier
        keeps its fresh initialisation (the usual case: a new task with a new number of classes).

        Raises:
            mr2.models.weights.WeightsMismatchError: naming missing, unexpected and wrongly-shaped
                keys.
        """
        backbone, head = self.split_weights(state_dict)
        name = type(self).__name__
        check_state_dict(self.backbone, backbone, source, f"{name}.backbone")
        if load_head:
            check_state_dict(self.classifier, head, source, f"{name}.classifier")
        self.backbone.load_state_dict(backbone)
        if load_head:
            self.classifier.load_state_dict(head)
