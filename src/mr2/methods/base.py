"""The seam between the training engine and a training method (ERM, MR2, LfF, JTT, ...).

Every training objective is called as ``method(logits, features, target)`` and returns a 0-dim loss.
What some baselines need beyond that (sample indices, the raw inputs for a second model, the epoch,
a resampled epoch) reaches them through the hooks below, which the engine calls in this order::

    method.setup(context)                       # once, before training (and before resuming)
    for epoch in range(start_epoch, epochs):
        method.on_epoch_start(epoch)
        indices = method.epoch_indices(epoch, generator)   # None: the plain data set
        for inputs, target, index in loader:
            method.on_batch(inputs, target, index)         # LfF: biased model forward
            logits, features = model(inputs)
            loss = method(logits, features, target)
            ...backward / step...
        method.on_epoch_end(epoch)

A method is an ``nn.Module``: its state (buffers, a second model) goes into ``state_dict()`` and so into
checkpoints; its parameters (if any) are optimised together with the model's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn


@dataclass
class MethodContext:
    """What the engine tells a method before training.

    Attributes:
        num_classes: K.
        num_train_samples: size of the training set (per-sample state is sized to it).
        class_counts: training samples per class, shape [K] (int64).
        feature_dim: width of the penultimate features.
        device: where training runs.
        epochs: total number of training epochs.
        model_factory: builds a fresh model of the same architecture (LfF's biased model, JTT's
            second stage); it returns a module whose forward gives ``(logits, features)``.
        process_group: the torch.distributed group (None: not distributed, or the default group).
        validation_class_accuracy: per-class accuracy of a reference model on the validation split,
            where a method needs it (CDB-CE); None otherwise.
        extra: free-form values from the method's config section.
    """

    num_classes: int
    num_train_samples: int
    class_counts: torch.Tensor
    feature_dim: int
    device: torch.device
    epochs: int
    model_factory: Callable[[], nn.Module] | None = None
    process_group: Any = None
    validation_class_accuracy: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class TrainingMethod(nn.Module):
    """Base class of every training method. Subclasses implement :meth:`forward`.

    The default hooks do nothing, so plain losses (ERM, focal, logit adjustment) only implement
    ``forward(logits, features, target)``.
    """

    #: Registry name used in configs (``method: <name>``).
    name: str = "base"

    def setup(self, context: MethodContext) -> None:
        """Allocate state that depends on the data (per-sample buffers, a second model)."""

    def on_epoch_start(self, epoch: int) -> None:
        """Called at the start of every training epoch (0-based)."""

    def epoch_indices(self, epoch: int, generator: torch.Generator) -> torch.Tensor | None:
        """Training-set indices to use this epoch (upsampling), or None for the plain data set."""
        return None

    def on_batch(self, inputs: torch.Tensor, target: torch.Tensor, index: torch.Tensor) -> None:
        """Called before the model's forward with the batch's inputs and data-set indices."""

    def on_epoch_end(self, epoch: int) -> None:
        """Called at the end of every training epoch."""

    def forward(  # type: ignore[override]
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        raise NotImplementedError

    def log_values(self) -> dict[str, torch.Tensor]:
        """Detached tensors to log (the engine syncs them only at logging intervals)."""
        return {}
