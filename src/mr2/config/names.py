"""The one rule for the names that become directories: run names (``name``), sweep names, tune names.

A name is one entry of its parent directory, created, overwritten and deleted by mr2, so it must not
reach anywhere else: not ``.`` or ``..`` (``name: .`` with ``--overwrite`` once staged and deleted
every sibling run), no path separator, no control character (a newline breaks logs and one-line
errors), no leading or trailing whitespace (invisible in listings), at most :data:`MAX_NAME_LENGTH`
bytes in UTF-8 (file systems allow 255 bytes per entry; files named after a run, such as a sweep's
``configs/<name>.yaml`` and its temporary copy, add a few).
"""

from __future__ import annotations

import unicodedata
from typing import Any

from mr2.config.errors import ConfigError

__all__ = ["BAD_NAME", "MAX_NAME_LENGTH", "check_name"]

#: The longest name accepted, in bytes of UTF-8 (200 ASCII characters).
MAX_NAME_LENGTH = 200

BAD_NAME = (
    "{what} {value} is not a usable name: {problem}; a name becomes a directory, so use 1 to "
    f"{MAX_NAME_LENGTH} bytes (UTF-8) without '/', '\\', control characters or surrounding spaces, "
    "other than '.' and '..' (e.g. erm-seed0)"
)
_SHOWN = 60


def _problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "it is not a string"
    if not value:
        return "it is empty"
    if value in (".", ".."):
        return "'.' and '..' name directories, not runs"
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_LENGTH:
        return f"it is longer than {MAX_NAME_LENGTH} bytes in UTF-8"
    if "/" in value or "\\" in value:
        return "it contains a path separator"
    if any(unicodedata.category(c) == "Cc" for c in value):
        return "it contains a control character"
    if value != value.strip():
        return "it begins or ends with whitespace"
    return None


def check_name(value: Any, what: str, error: type[Exception] = ConfigError) -> str:
    """Return ``value`` if it is a usable name, else raise ``error`` (:data:`BAD_NAME`).

    Args:
        value: the name to check.
        what: how the message names the setting (``"config key 'name'"``, ``"--name"``).
        error: the exception type to raise (the caller's error family).

    Example:
        >>> check_name("erm-seed0", "name")
        'erm-seed0'
        >>> try:
        ...     check_name("..", "config key 'name'")
        ... except ConfigError as failure:
        ...     print(str(failure)[:60])
        config key 'name' '..' is not a usable name: '.' and '..' na
    """
    problem = _problem(value)
    if problem is None:
        result: str = value
        return result
    shown = repr(value[:_SHOWN]) + "..." if isinstance(value, str) and len(value) > _SHOWN else repr(value)
    raise error(BAD_NAME.format(what=what, value=shown, problem=problem))
