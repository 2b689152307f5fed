"""Which keys two resolved configurations differ in: the one rule used by resume (``mr2 train``) and by
the sweep's staleness check."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mr2.config.paths import MISSING, get_dotted
from mr2.config.schema import RunConfig, config_to_dict

__all__ = ["RESUMABLE_KEYS", "config_differences"]

#: Keys a run may change between attempts without becoming another run: more epochs continue a run
#: (the schedule is rebuilt), and where the run directory lives does not change what it holds.
RESUMABLE_KEYS = ("optim.epochs", "output_dir")


def _leaf_differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys: list[str] = []
        for key in sorted(set(a) | set(b), key=str):
            keys += _leaf_differences(a.get(key, MISSING), b.get(key, MISSING), f"{prefix}{key}.")
        return keys
    return [] if a == b else [prefix.rstrip(".")]


def config_differences(
    previous: dict[str, Any], current: dict[str, Any], ignore: Iterable[str] = ()
) -> list[str]:
    """Dotted keys in which ``previous`` and ``current`` (plain dicts of resolved configs) differ.

    A key that ``previous`` lacks counts as equal when ``current`` holds the schema's default there
    (a configuration field added to mr2 after a run was written does not make the run another one).
    Keys equal to or below an entry of ``ignore`` are left out.

    Example:
        >>> old = {"seed": 0, "optim": {"lr": 0.1}}
        >>> config_differences(old, {"seed": 1, "optim": {"lr": 0.1, "momentum": 0.9}})
        ['seed']
        >>> config_differences(old, {"seed": 0, "optim": {"lr": 0.2}}, ignore=["optim"])
        []
    """
    defaults = config_to_dict(RunConfig())
    ignored = tuple(ignore)
    keys = []
    for key in _leaf_differences(previous, current):
        if any(key == skip or key.startswith(skip + ".") for skip in ignored):
            continue
        if get_dotted(previous, key) is MISSING and get_dotted(current, key) == get_dotted(defaults, key):
            continue
        keys.append(key)
    return keys
