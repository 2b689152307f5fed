"""Dotted key paths into nested mappings (``"method.options.c_bar"``): the one implementation used by
config overrides, sweep specs and staleness checks."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from mr2.errors import MR2Error

__all__ = ["MISSING", "DottedPathError", "get_dotted", "set_dotted"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: Returned by :func:`get_dotted` for a path that does not exist.
MISSING: Any = _Missing()

_NOT_BELOW_MAPPING = "key {path!r}: {part!r} holds {value!r}, not a mapping, so it has no keys below it"


class DottedPathError(MR2Error, ValueError):
    """A dotted path that runs through a value that is not a mapping."""


def get_dotted(data: Any, path: str, default: Any = MISSING) -> Any:
    """``data["a"]["b"]`` for ``path = "a.b"``, or ``default`` where a part is absent.

    Example:
        >>> get_dotted({"optim": {"lr": 0.1}}, "optim.lr")
        0.1
        >>> get_dotted({"optim": {"lr": 0.1}}, "optim.momentum", None) is None
        True
    """
    node = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def set_dotted(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``data["a"]["b"] = value`` (a deep copy) for ``path = "a.b"``, creating mappings on the way.

    Raises:
        DottedPathError: a part of the path holds a value that is not a mapping.

    Example:
        >>> config = {"optim": {"lr": 0.1}}
        >>> set_dotted(config, "method.options.c_bar", 2)
        >>> config
        {'optim': {'lr': 0.1}, 'method': {'options': {'c_bar': 2}}}
    """
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise DottedPathError(_NOT_BELOW_MAPPING.format(path=path, part=part, value=child))
        node = child
    node[parts[-1]] = copy.deepcopy(value)
