"""The first stage of two-stage methods (JTT, HBR): one rule for its length, one set of messages.

Stage 1 trains plain ERM for ``T`` epochs (default ``max(1, round(0.2 * epochs))``, JTT's); stage 2,
from a fresh model, needs at least one epoch, so ``1 <= T < epochs``.
"""

from __future__ import annotations

from typing import Any

import torch

from mr2.checks import check_num_classes, is_int

__all__ = [
    "BAD_STAGE1_VALUE",
    "NO_INDEX",
    "STAGE2_TOO_EARLY",
    "TwoStageReset",
    "check_stage1_option",
    "resolve_stage1",
]

BAD_STAGE1_VALUE = (
    "{method} option stage1_epochs must be an integer >= 1, or null for the default "
    "max(1, round(0.2 * epochs)); got {value!r}."
)
_BAD_STAGE1 = (
    "{method} option stage1_epochs must be smaller than the number of epochs ({epochs}), so that the "
    "second stage has at least one epoch; got {value!r}."
)
NO_INDEX = (
    "{method}.forward was called in training mode during {stage} without a preceding "
    "on_batch(inputs, target, index): the engine must call method.on_batch on every training batch."
)
STAGE2_TOO_EARLY = (
    "{method}.epoch_indices({epoch}) asked for a stage-2 epoch before {what} was recorded (at the end "
    "of epoch {last}); the checkpoint or the epoch order is inconsistent."
)


class TwoStageReset:
    """The engine's model reset of a two-stage method: asked for from the end of stage 1 on (the
    engine resets once), signalled by the method's 0-dim bool buffer ``frozen``."""

    frozen: torch.Tensor
    name: str
    num_classes: int
    requested_stage1_epochs: int | None
    stage1_epochs: int

    def init_stages(self, num_classes: int, stage1_epochs: int | None, error: type[Exception]) -> None:
        """What every two-stage method sets first: K (checked), the requested first-stage length
        ``stage1_epochs`` (None, or an integer >= 1: checked, resolved against the run's epochs in
        ``setup``) and the ``frozen`` flag buffer (stage 1 over)."""
        self.num_classes = check_num_classes(num_classes)
        self.requested_stage1_epochs = check_stage1_option(self.name, stage1_epochs, error)
        self.stage1_epochs = stage1_epochs if stage1_epochs is not None else 1
        self.register_buffer("frozen", torch.zeros((), dtype=torch.bool))  # type: ignore[attr-defined]

    def wants_model_reset(self) -> bool:
        """True from the end of stage 1 on (the engine resets once); reads one flag (host sync)."""
        return bool(self.frozen)


def check_stage1_option(method: str, value: Any, error: type[Exception]) -> int | None:
    """``value`` if it is None or an integer >= 1, else raise ``error`` naming ``method``.

    Example:
        >>> check_stage1_option("jtt", 2, ValueError)
        2
    """
    if value is not None and (not is_int(value) or value < 1):
        raise error(BAD_STAGE1_VALUE.format(method=method, value=value))
    return value


def resolve_stage1(method: str, requested: int | None, epochs: int, error: type[Exception]) -> int:
    """The stage-1 length for a run of ``epochs`` epochs (``requested``, or the default).

    Example:
        >>> resolve_stage1("jtt", None, 10, ValueError), resolve_stage1("jtt", 3, 10, ValueError)
        (2, 3)
    """
    stage1 = max(1, round(0.2 * epochs)) if requested is None else requested
    if stage1 >= epochs:
        raise error(_BAD_STAGE1.format(method=method, epochs=epochs, value=stage1))
    return stage1
