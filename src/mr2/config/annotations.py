"""Whether a value read from YAML fits a type annotation, and how a message names what it admits.

One judge for the run configuration's schema (:mod:`mr2.config.schema`) and for the options of
mr2's own models (:mod:`mr2.models.registry`). YAML gives a list for a sequence and an int where a
float is meant; both fit. An annotation it cannot judge admits anything.
"""

from __future__ import annotations

import collections.abc
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from mr2.errors import choices
from mr2.value_types import is_int, is_number

__all__ = ["describe", "matches"]

_SEQUENCES = (collections.abc.Sequence, list, tuple)


def matches(value: Any, annotation: Any, *, literal: Literal["value", "type"] = "value") -> bool:
    """Whether ``value`` fits ``annotation``.

    Args:
        value: a value as YAML gives it.
        annotation: the field's or parameter's annotation (``int``, ``float | None``,
            ``Literal['a', 'b']``, ``Sequence[int]``, ``tuple[int, int]``, ``dict[str, Any]``...).
        literal: ``"value"``: a ``Literal`` admits its values only; ``"type"``: any value of the
            type of one of them (the caller's constructor refuses the others with its own message).

    Example:
        >>> matches(3, float), matches(True, int), matches([1, 2], tuple[int, ...])
        (True, False, True)
        >>> matches("C", Literal["A", "B"]), matches("C", Literal["A", "B"], literal="type")
        (False, True)
    """
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Any:
        return True
    if origin is Literal:
        if literal == "type":
            return any(type(value) is type(a) for a in args)
        return value in choices(annotation)
    if origin in (Union, types.UnionType):
        return any(matches(value, a, literal=literal) for a in args)
    if annotation is type(None):
        return value is None
    if origin is dict:
        return isinstance(value, dict)
    if origin in _SEQUENCES:
        if not isinstance(value, (list, tuple)):
            return False
        if not args:
            return True
        if len(args) == 1 or args[-1] is Ellipsis:
            return all(matches(item, args[0], literal=literal) for item in value)
        return len(value) == len(args) and all(
            matches(v, a, literal=literal) for v, a in zip(value, args, strict=True)
        )
    if annotation is float:
        return is_number(value)
    if annotation is int:
        return is_int(value)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def describe(annotation: Any, names: Mapping[Any, tuple[str, str]] | None = None) -> str:
    """How a message names the values ``annotation`` admits.

    Args:
        annotation: as for :func:`matches`.
        names: ``type -> (a value, a list of them)`` in words (``int: ("an integer", "integers")``);
            a type it does not name is named by its ``__name__``.

    Example:
        >>> describe(float | None), describe(Literal["sgd", "adamw"])
        ('float or null', "one of 'sgd', 'adamw'")
        >>> describe(tuple[int, ...], {int: ("an integer", "integers")})
        'a list of integers'
    """
    names = names or {}
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, choices(annotation)))
    if origin in (Union, types.UnionType):
        return " or ".join(describe(a, names) for a in args)
    if annotation is type(None):
        return "null"
    if origin is dict:
        return "a mapping"
    if origin in _SEQUENCES:
        item = args[0] if args and (len(args) == 1 or args[-1] is Ellipsis) else None
        if item is not None and item in names:
            return f"a list of {names[item][1]}"
        if args and origin is tuple:
            return f"a list of {len(args)} values ({', '.join(describe(a, names) for a in args)})"
        return "a list"
    if annotation in names:
        return names[annotation][0]
    return getattr(annotation, "__name__", str(annotation))
