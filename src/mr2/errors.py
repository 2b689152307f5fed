"""The base of every error mr2 raises for bad input, and the check of a choice among a ``Literal``'s values.

Every exception of mr2 derives from :class:`MR2Error` and keeps its builtin base too
(``class ConfigError(MR2Error, ValueError)``), so ``except ValueError`` keeps working and
``except MR2Error`` catches them all: the command line reports an ``MR2Error`` as one line on stderr
with exit code 2, anything else is a bug and keeps its traceback.

A choice among strings is written once, as a ``Literal`` type; the tuple of values and the words of
the message are derived from it (:func:`choices`, :func:`listed`, :func:`either`), and
:func:`check_choice` refuses a value outside it.

This module imports nothing of mr2 and no torch: the command line imports it at start-up.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

__all__ = ["COMMAND_ERROR", "COMMAND_WRITE_FAILED", "MR2Error", "check_choice", "choices", "either", "listed"]

#: How a command (``mr2 train``, a sweep's run) reports an :class:`MR2Error` it did not catch: one line.
COMMAND_ERROR = "{command}: error: {error}"
#: How a command reports a write the operating system refused (:class:`mr2.io.WriteError`): one line.
COMMAND_WRITE_FAILED = (
    "{command}: error: could not write {path}: {reason}; every file written before it is complete (atomic "
    "writes): free space, fix the path or choose another output directory, then run the same command again"
)


class MR2Error(Exception):
    """Base of every error mr2 raises for input it cannot use; the message says what to fix.

    Example:
        >>> from mr2.config import ConfigError
        >>> issubclass(ConfigError, MR2Error), issubclass(ConfigError, ValueError)
        (True, True)
    """


def choices(literal: Any) -> tuple[Any, ...]:
    """The values a ``Literal`` type admits, in order; a union of ``Literal`` types gives all of theirs.

    Example:
        >>> choices(Literal["mlp", "linear"])
        ('mlp', 'linear')
        >>> choices(Literal["a"] | Literal["b", "c"])
        ('a', 'b', 'c')
    """
    origin = get_origin(literal)
    if origin is Literal:
        return get_args(literal)
    if origin in (Union, types.UnionType):
        return tuple(value for member in get_args(literal) for value in choices(member))
    raise TypeError(f"choices() takes a Literal type or a union of them; got {literal!r}")


def listed(literal: Any) -> str:
    """The values of ``literal`` as a Python list: ``['mlp', 'linear']``.

    Example:
        >>> print(f"head must be one of {listed(Literal['mlp', 'linear'])}")
        head must be one of ['mlp', 'linear']
    """
    return repr(list(choices(literal)))


def either(literal: Any, notes: Mapping[Any, str] | None = None) -> str:
    """The values of ``literal`` as words, each followed by its note if it has one:
    ``'a' (note), 'b' or 'c'``.

    Example:
        >>> print(either(Literal["pooled", "batch"], {"batch": "released code"}))
        'pooled' or 'batch' (released code)
        >>> print(either(Literal["a", "b", "c"]))
        'a', 'b' or 'c'
    """
    notes = notes or {}
    words = [f"{value!r} ({notes[value]})" if value in notes else repr(value) for value in choices(literal)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def check_choice(value: object, literal: Any, message: str, error: type[Exception]) -> None:
    """Raise ``error(message.format(value=value))`` unless ``value`` is one of ``literal``'s values.

    Args:
        value: what the caller was given.
        literal: the ``Literal`` type that lists the values allowed (the parameter's annotation).
        message: a ``str.format`` template with a ``{value!r}`` field; usually built from the same
            ``Literal`` with :func:`listed` or :func:`either`.
        error: the exception class to raise (an :class:`MR2Error`).

    Example:
        >>> Head = Literal["mlp", "linear"]
        >>> check_choice("mlp", Head, "", ValueError)
        >>> check_choice("deep", Head, f"head must be one of {listed(Head)}; got {{value!r}}.", ValueError)
        Traceback (most recent call last):
        ...
        ValueError: head must be one of ['mlp', 'linear']; got 'deep'.
    """
    if value not in choices(literal):
        raise error(message.format(value=value))
