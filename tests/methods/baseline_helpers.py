"""Tiny models, data and a miniature training engine that drives methods through the seam."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import build_method

NUM_CLASSES, IN_DIM, FEATURE_DIM = 4, 6, 5
REGIMES = ("scratch", "finetune", "linear_probe")


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


def balanced_data(per_class: int = 12, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    target = torch.arange(NUM_CLASSES).repeat_interleave(per_class)
    centres = torch.randn(NUM_CLASSES, IN_DIM, generator=g)
    x = centres[target] + 1.5 * torch.randn(target.numel(), IN_DIM, generator=g)
    return x, target


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


def _roundtrip(obj: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


class MiniEngine:
    """The engine's side of the seam, in the documented order, small enough to read in one go."""

    def __init__(self, name: str, options: dict[str, Any], regime: str, epochs: int = 4) -> None:
        self.x, self.target = balanced_data()
        self.val_x, self.val_target = balanced_data(per_class=5, seed=11)
        self.n = self.target.numel()
        self.factory = model_factory(regime)
        self.epochs = epochs
        self.method: TrainingMethod = build_method(name, NUM_CLASSES, **options)
        context = make_context(
            self.n,
            torch.bincount(self.target, minlength=NUM_CLASSES),
            epochs=epochs,
            factory=self.factory,
            predict_train_set=self.predict_train_set,
        )
        self.method.setup(context)
        self._fresh_model()
        self.losses: list[float] = []
        self.resets: list[int] = []
        self.reset_done = False
        self.kept: dict[int, tuple[int, dict[str, Any]]] = {}

    def _fresh_model(self) -> None:
        with torch.random.fork_rng():  # LDAM's new head draws from the global RNG: make it repeatable
            torch.manual_seed(11)
            self.model = self.method.adapt_model(self.factory())
        params = [p for p in [*self.model.parameters(), *self.method.parameters()] if p.requires_grad]
        self.optimizer = torch.optim.SGD(params, lr=0.2, momentum=0.9)

    @torch.no_grad()
    def predict_train_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.model.eval()
        predicted = self.model(self.x)[0].argmax(1)
        self.model.train()
        return predicted, self.target

    @torch.no_grad()
    def class_accuracy(self) -> torch.Tensor:
        self.model.eval()
        correct = (self.model(self.val_x)[0].argmax(1) == self.val_target).double()
        self.model.train()
        hits = torch.zeros(NUM_CLASSES, dtype=torch.float64).index_add_(0, self.val_target, correct)
        return hits / torch.bincount(self.val_target, minlength=NUM_CLASSES)

    def run_epochs(self, start: int, stop: int, keep_checkpoints_after: tuple[int, ...] = ()) -> None:
        """Train epochs ``start .. stop-1``; keep (losses so far, checkpoint) after the listed epochs."""
        for epoch in range(start, stop):
            self.method.train()
            self.model.train()
            self.method.on_epoch_start(epoch)
            generator = torch.Generator().manual_seed(1000 + epoch)
            indices = self.method.epoch_indices(epoch, generator)
            if indices is None:
                indices = torch.randperm(self.n, generator=generator)
            for batch in indices.split(12):
                inputs, target = self.x[batch], self.target[batch]
                self.method.on_batch(inputs, target, batch)
                logits, features = self.model(inputs)
                loss = self.method(logits, features, target)
                assert loss.dim() == 0 and torch.isfinite(loss)
                for value in self.method.log_values().values():
                    assert not value.requires_grad
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                self.losses.append(loss.item())
            self.method.on_epoch_end(epoch)
            self.method.eval()
            self.method.on_validation(epoch, self.class_accuracy())
            if self.method.wants_model_reset() and not self.reset_done:
                self.resets.append(epoch)
                self.reset_done = True
                self._fresh_model()
            if epoch in keep_checkpoints_after:
                self.kept[epoch] = (len(self.losses), self.checkpoint())

    def checkpoint(self) -> dict[str, Any]:
        return _roundtrip(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "method": self.method.state_dict(),
                "reset_done": self.reset_done,
            }
        )

    def resume(self, checkpoint: dict[str, Any]) -> None:
        self.reset_done = checkpoint["reset_done"]  # (the fresh model has the same architecture)
        self.model.load_state_dict(checkpoint["model"])
        self.method.load_state_dict(checkpoint["method"])
        self._fresh_optimizer_from(checkpoint["optimizer"])

    def _fresh_optimizer_from(self, state: dict[str, Any]) -> None:
        params = [p for p in [*self.model.parameters(), *self.method.parameters()] if p.requires_grad]
        self.optimizer = torch.optim.SGD(params, lr=0.2, momentum=0.9)
        self.optimizer.load_state_dict(state)
