"""How a class (or tier) name is spelled in a logged scalar's name: one rule for every logger.

``ClasswiseDisparity.to_log_dict`` (``class_accuracy/<key>``, fed to Lightning's ``log_dict``) and the
engine's TensorBoard tags (``val_class_accuracy/<key>``, ``mr2/temperature/<key>``, ...) spell a class
name the same way, so the two can be compared tag for tag:

- every character outside ``[A-Za-z0-9_.-]`` becomes ``_`` (``"T-shirt/top"`` -> ``"T-shirt_top"``:
  a ``/`` in a name never adds a level to TensorBoard's or Lightning's hierarchy; a space, a
  non-ASCII letter or a control character becomes ``_`` too);
- an empty name is spelled by its class id;
- names that end up the same are made unique in class-id order: the first keeps the key, each later
  one gets ``_<class id>`` appended (again, until the key is unused), and a
  :class:`LogKeyCollisionWarning` names the renamed classes (their logged names are not their own).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

__all__ = ["LogKeyCollisionWarning", "log_key", "log_keys"]

COLLISION = (
    "{count} class name(s) spell the same logged key as an earlier class and were renamed: {pairs}; "
    "give the classes names that differ in letters, digits, '_', '.' or '-' to log them as named"
)


class LogKeyCollisionWarning(UserWarning):
    """Class names that collide once spelled as logged keys were renamed (``a/b`` and ``a_b``)."""

_OUTSIDE = re.compile(r"[^A-Za-z0-9_.\-]")


def log_key(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_.-]`` replaced by ``_``.

    >>> log_key("T-shirt/top"), log_key("sea lion"), log_key("crème")
    ('T-shirt_top', 'sea_lion', 'cr_me')
    """
    return _OUTSIDE.sub("_", name)


def log_keys(names: Sequence[str]) -> list[str]:
    """One distinct key per name, in order (see the module docstring for the rule).

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     log_keys(["a/b", "a_b", "", "a b"])
    ['a_b', 'a_b_1', '2', 'a_b_3']
    >>> str(caught[0].message).split(":")[0]
    '2 class name(s) spell the same logged key as an earlier class and were renamed'
    """
    keys: list[str] = []
    used: set[str] = set()
    renamed: list[str] = []
    for class_id, name in enumerate(names):
        key = log_key(name) or str(class_id)
        if key in used:
            while key in used:
                key = f"{key}_{class_id}"
            renamed.append(f"{name!r} -> {key!r}")
        used.add(key)
        keys.append(key)
    if renamed:
        shown = ", ".join(renamed[:5]) + (f" and {len(renamed) - 5} more" if len(renamed) > 5 else "")
        warnings.warn(COLLISION.format(count=len(renamed), pairs=shown), LogKeyCollisionWarning, stacklevel=2)
    return keys
