"""A tiny model and the method context of the unit tests that drive a method by hand (the seam through the
real engine: test_seam_engine.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from mr2.methods.base import MethodContext

NUM_CLASSES, IN_DIM, FEATURE_DIM = 4, 6, 5


class TinyNet(nn.Module):
    """backbone -> features -> ``classifier`` (nn.Linear); forward returns (logits, features)."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(IN_DIM, FEATURE_DIM), nn.Tanh())
        self.classifier = nn.Linear(FEATURE_DIM, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.backbone(x)
        return self.classifier(features), features


def pretrained_backbone() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(99)
    return {"0.weight": torch.randn(FEATURE_DIM, IN_DIM, generator=g), "0.bias": torch.zeros(FEATURE_DIM)}


def model_factory(regime: str, seed: int = 7) -> Callable[[], nn.Module]:
    """Every call builds the same initial model (a fixed seed), as an engine would for one regime."""

    def build() -> nn.Module:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = TinyNet()
        if regime in ("finetune", "linear_probe"):
            model.backbone.load_state_dict(pretrained_backbone())
        if regime == "linear_probe":
            for p in model.backbone.parameters():
                p.requires_grad_(False)
        return model

    return build


def make_context(
    num_train_samples: int,
    class_counts: torch.Tensor,
    epochs: int = 4,
    factory: Callable[[], nn.Module] | None = None,
    **kwargs: Any,
) -> MethodContext:
    return MethodContext(
        num_classes=int(class_counts.numel()),
        num_train_samples=num_train_samples,
        class_counts=class_counts,
        feature_dim=FEATURE_DIM,
        device=torch.device("cpu"),
        epochs=epochs,
        model_factory=factory,
        **kwargs,
    )
