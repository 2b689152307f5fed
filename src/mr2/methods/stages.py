"""The first stage of two-stage methods (JTT, HBR): one rule for its length, one set of messages.

Stage 1 trains plain ERM for ``T`` epochs (default ``max(1, round(0.2 * epochs))``, JTT's); stage 2,
from a fresh model, needs at least one epoch, so ``1 <= T < epochs``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BAD_STAGE1", "BAD_STAGE1_VALUE", "check_stage1_option", "resolve_stage1"]

BAD_STAGE1_VALUE = (
    "{method} option stage1_epochs must be an integer >= 1, or null for the default "
    "max(1, round(0.2 * epochs)); got {value!r}."
)
BAD_STAGE1 = (
    "{method} option stage1_epochs must be smaller than the number of epochs ({epochs}), so that the "
    "second stage has at least one epoch; got {value!r}."
)


def check_stage1_option(method: str, value: Any, error: type[Exception]) -> int | None:
    """``value`` if it is None or an integer >= 1, else raise ``error`` naming ``method``.

    Example:
        >>> check_stage1_option("jtt", 2, ValueError)
        2
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
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
        raise error(BAD_STAGE1.format(method=method, epochs=epochs, value=stage1))
    return stage1
