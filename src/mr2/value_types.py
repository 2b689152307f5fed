"""Type guards for plain Python values (config, spec and option checks), without importing torch.

They live apart from :mod:`mr2.checks` (which validates tensors and imports torch) so that the
configuration schema and the sweep specification, and with them the command line's fast paths, stay
free of torch; :mod:`mr2.checks` re-exports them.
"""

from __future__ import annotations

from typing import TypeGuard

__all__ = ["is_int", "is_number"]


def is_int(value: object) -> TypeGuard[int]:
    """``value`` is a Python ``int`` and not a ``bool`` (``True`` is an ``int`` to ``isinstance``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """``value`` is a Python ``int`` or ``float`` and not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
