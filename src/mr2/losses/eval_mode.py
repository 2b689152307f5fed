"""A warning for a stateful loss called in training mode with gradients disabled.

The stateful losses (:class:`~mr2.MR2Loss` and :class:`~mr2.losses.released.ReleasedMR2Loss`: their
class statistics; center loss: its centres; group DRO: its class weights) update their state from every
batch they see in training mode, as ``nn.BatchNorm`` does. Evaluation code written for cross-entropy
often calls the criterion under ``torch.no_grad()`` without ``criterion.eval()``: the loss then silently
folds test or validation data into its state. A call in training mode with gradients disabled is that
pattern (a training step needs gradients), so :func:`warn_if_evaluating_in_train_mode` warns, once per
loss object, with :class:`TrainModeEvaluationWarning`.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
from torch import nn

__all__ = ["TRAIN_MODE_MESSAGE", "TrainModeEvaluationWarning", "warn_if_evaluating_in_train_mode"]

TRAIN_MODE_MESSAGE = (
    "mr2: {name} was called in training mode with gradients disabled (torch.no_grad() or "
    "torch.inference_mode()), so it updated its {state} from this batch; to evaluate, call "
    "criterion.eval() first (and criterion.train() before training again)."
)


class TrainModeEvaluationWarning(UserWarning):
    """A stateful loss was called in training mode with gradients disabled (evaluation without
    ``criterion.eval()``): its state was updated from that batch."""


def warn_if_evaluating_in_train_mode(loss: nn.Module, state: str) -> None:
    """Warn once per ``loss`` when it runs in training mode while gradients are disabled.

    Call it in ``forward`` where the state is updated. No host sync (two Python flags); nothing
    under ``torch.compile`` tracing.

    Args:
        loss: the loss module (its ``training`` flag; it remembers that it warned).
        state: what it updates, for the message (e.g. ``"class statistics"``).

    Example:
        >>> import warnings
        >>> from mr2 import MR2Loss
        >>> loss = MR2Loss(3)
        >>> with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        ...     warnings.simplefilter("always")
        ...     _ = loss(torch.randn(4, 3), torch.randn(4, 2), torch.tensor([0, 1, 2, 0]))
        >>> [type(w.message).__name__ for w in caught]
        ['TrainModeEvaluationWarning']
    """
    if not loss.training or torch.is_grad_enabled() or torch.compiler.is_compiling():
        return
    if loss.__dict__.get("_warned_train_mode_evaluation", False):
        return
    loss.__dict__["_warned_train_mode_evaluation"] = True
    warnings.warn(
        TRAIN_MODE_MESSAGE.format(name=type(loss).__name__, state=state),
        TrainModeEvaluationWarning,
        stacklevel=_caller_level(),
    )


_LIBRARY_DIRS = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__))


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside mr2 and torch (the user's call of the loss)."""
    frame = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
