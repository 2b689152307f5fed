"""The seam between the training engine and a training method (ERM, MR2, LfF, JTT, ...).

Every training objective is called as ``method(logits, features, target)`` and returns a 0-dim loss.
What some baselines need beyond that (sample indices, the raw inputs for a second model, the epoch,
a resampled epoch) reaches them through the hooks below, which the engine calls in this order::

    method.setup(context)                       # once, before training (and before resuming)
    model = method.adapt_model(model_factory())  # every model built for training (LDAM: cosine head)
    for epoch in range(start_epoch, epochs):
        method.on_epoch_start(epoch)
        indices = method.epoch_indices(epoch, generator)   # None: the plain data set
        for inputs, target, index in loader:
            method.on_batch(inputs, target, index)         # LfF, JTT: inputs and sample indices
            logits, features = model(inputs)
            loss = method(logits, features, target)
            ...backward / step...
        method.on_epoch_end(epoch)
        method.on_validation(epoch, class_accuracy)        # after each validation pass (CDB-CE)
        if method.wants_model_reset() and not reset_done:  # JTT: end of stage 1, once
            ...fresh model (model_factory + adapt_model), optimizer, scheduler...
        ...checkpoint...

A method is an ``nn.Module``: its state (buffers, a second model) goes into ``state_dict()`` and so into
checkpoints; its parameters (if any) are optimised together with the model's, and under data
parallelism the engine averages their gradients over ranks (the model's are averaged by DDP). The
engine calls ``method.train()`` while training and ``method.eval()`` while evaluating: methods update
their state only in training mode (never from evaluation data).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from mr2.checks import check_classification_inputs
from mr2.functional.reduction import working_dtype


def checked_cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    num_classes: int,
    *,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Cross-entropy of a method's batch, in at least float32 (:func:`working_dtype`), after the
    checks of every ``method(logits, features, target)`` call (the features are not checked)."""
    check_classification_inputs(logits, None, target, num_classes)
    return F.cross_entropy(
        logits.to(working_dtype(logits)), target, reduction=reduction, label_smoothing=label_smoothing
    )


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
        predict_train_set: where a method needs it (JTT with ``error_source="eval_pass"``): returns
            ``(predicted, target)``, two int64 tensors [num_train_samples] in data-set index order:
            the CURRENT model's argmax predictions in eval mode (eval transforms) on the whole
            training set, gathered over all ranks (identical on every rank). None otherwise.
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
    predict_train_set: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None


class TrainingMethod(nn.Module):
    """Base class of every training method. Subclasses implement :meth:`forward`.

    The default hooks do nothing, so plain losses (ERM, focal, logit adjustment) only implement
    ``forward(logits, features, target)``.
    """

    #: Registry name used in configs (``method: <name>``).
    name: str = "base"
    #: What the method is, read by its clients (:mod:`mr2.methods.spec`, ``mr2 tune``) instead of name
    #: lists kept elsewhere. ``plain_loss``: a loss and nothing more, so plain training code can run it
    #: (no second stage, resampling, model change or validation hook of the engine).
    plain_loss: ClassVar[bool] = True
    #: Its loss reads the features (the penultimate layer) as well as the logits.
    reads_features: ClassVar[bool] = False
    #: It creates trainable parameters from the feature width at construction (``feature_dim`` needed).
    needs_feature_dim: ClassVar[bool] = False
    #: It needs the training set's class counts (``class_counts``) to be the loss its options describe.
    needs_class_counts: ClassVar[bool] = False
    #: Options that act through an engine hook plain code does not call: a loss specification must keep
    #: these values.
    engine_options: ClassVar[Mapping[str, Any]] = {}
    #: Its :meth:`on_batch` or :meth:`forward` draws random numbers (LfF: dropout in its biased model):
    #: the engine then runs them on the method's own random stream, so they leave the model's dropout
    #: draws as ERM's on the same seed (:mod:`mr2.engine.streams`). Construction, :meth:`setup` and
    #: :meth:`adapt_model` always run on that stream.
    draws_in_step: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self._logged: dict[str, torch.Tensor] = {}

    def record(self, **values: torch.Tensor) -> None:
        """Keep this step's values (detached, on the device) for :meth:`log_values`."""
        self._logged = {key: value.detach() for key, value in values.items()}

    def setup(self, context: MethodContext) -> None:
        """Allocate state that depends on the data (per-sample buffers, a second model)."""

    def adapt_model(self, model: nn.Module) -> nn.Module:
        """Adapt a freshly built model; the default returns it unchanged.

        The engine calls it on EVERY model it builds for training or for loading this method's
        checkpoints: at the start and after a reset (:meth:`wants_model_reset`), before loading
        weights, moving to the device, wrapping for data parallelism and building the optimizer.
        LDAM replaces ``model.classifier`` (an ``nn.Linear``) with a cosine ``NormedLinear`` head,
        which is trainable in every regime (linear probe included). Called after :meth:`setup`.
        """
        return model

    def on_epoch_start(self, epoch: int) -> None:
        """Called at the start of every training epoch (0-based)."""

    def epoch_indices(self, epoch: int, generator: torch.Generator) -> torch.Tensor | None:
        """Training-set indices to use this epoch (upsampling), or None for the plain data set."""
        return None

    def on_batch(self, inputs: torch.Tensor, target: torch.Tensor, index: torch.Tensor) -> None:
        """Called before the model's forward with the batch's inputs and data-set indices."""

    def on_epoch_end(self, epoch: int) -> None:
        """Called at the end of every training epoch."""

    def on_validation(self, epoch: int, class_accuracy: torch.Tensor) -> None:
        """Called after each validation pass during training with the per-class accuracy [K].

        ``class_accuracy`` is measured on the held-out validation split (never the test split),
        summed over ranks (identical on every rank); NaN for a class without validation samples.
        CDB-CE recomputes its class weights from it.
        """

    def wants_model_reset(self) -> bool:
        """Whether the method needs training to restart from a fresh model (default: False).

        Checked after :meth:`on_epoch_end` (and :meth:`on_validation`) of every epoch. The first time
        it is True, the engine builds a fresh model (``model_factory()`` then :meth:`adapt_model`:
        re-initialised, or pre-trained weights reloaded, as at the start of the run), a fresh
        optimizer over it and the method's parameters, and a fresh scheduler spanning the REMAINING
        epochs (with the next epochs' loader length, :meth:`epoch_indices` may change it), before
        writing that epoch's checkpoint; it records the reset in the checkpoint and never resets
        twice. JTT returns True from the end of its first stage on.
        """
        return False

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        raise NotImplementedError

    def log_values(self) -> dict[str, torch.Tensor]:
        """The last step's detached 0-dim tensors (what :meth:`record` kept). The engine reads them
        on the host only every ``log_every`` steps, and averages them over the epoch on the device."""
        return dict(self._logged)

    def class_statistics(self) -> dict[str, torch.Tensor] | None:
        """Per-class [K] tensors to record each epoch and in final.json (MR2: ``mean_sq_norm``,
        ``spread``, ``second_moment``, ``temperatures``); None for methods without them."""
        return None
