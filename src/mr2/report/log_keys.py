"""How a class (or tier) name is spelled in a logged scalar's name: one rule for every logger.

``ClasswiseDisparity.to_log_dict`` (``class_accuracy/<key>``, fed to Lightning's ``log_dict``) and the
engine's TensorBoard tags (``val_class_accuracy/<key>``, ``mr2/temperature/<key>``, ...) spell a class
name the same way, so the two can be compared tag for tag:

- every character outside ``[A-Za-z0-9_.-]`` becomes ``_`` (``"T-shirt/top"`` -> ``"T-shirt_top"``:
  a ``/`` in a name never adds a level to TensorBoard's or Lightning's hierarchy; a space, a
  non-ASCII letter or a control character becomes ``_`` too);
- an empty name is spelled by its class id;
- names that end up the same are made unique in class-id order: the first keeps the key, each later
  one gets ``_<class id>`` appended (again, until the key is unused).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["log_key", "log_keys"]

_OUTSIDE = re.compile(r"[^A-Za-z0-9_.\-]")


def log_key(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_.-]`` replaced by ``_``.

    >>> log_key("T-shirt/top"), log_key("sea lion"), log_key("crème")
    ('T-shirt_top', 'sea_lion', 'cr_me')
    """
    return _OUTSIDE.sub("_", name)


def log_keys(names: Sequence[str]) -> list[str]:
    """One distinct key per name, in order (see the module docstring for the rule).

    >>> log_keys(["a/b", "a_b", "", "a b"])
    ['a_b', 'a_b_1', '2', 'a_b_3']
    """
    keys: list[str] = []
    used: set[str] = set()
    for class_id, name in enumerate(names):
        key = log_key(name) or str(class_id)
        while key in used:
            key = f"{key}_{class_id}"
        used.add(key)
        keys.append(key)
    return keys
