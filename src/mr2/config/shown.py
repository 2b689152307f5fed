"""User values in one-line error messages, shortened (``reprlib``): a value may be 200 KB of YAML.

Used by the run configuration's schema and the sweep specification's messages alike.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["Shown", "shown"]

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 6
_REPR.maxlong = 40


def shown(value: Any) -> str:
    """``repr(value)``, shortened for a one-line message.

    Example:
        >>> print(shown("x" * 1000))
        'xxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxx'
        >>> print(shown(list(range(100))), shown(-10**50))
        [0, 1, 2, 3, 4, 5, ...] -10000000000000000...0000000000000000000
    """
    try:
        return _REPR.repr(value)
    except ValueError:  # an int of more than 4,300 digits has no repr (sys.set_int_max_str_digits)
        return f"<{type(value).__name__} too large to show>"


class Shown:
    """Formats as :func:`shown` under ``!r`` (message constants use ``{value!r}``)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return shown(self.value)
