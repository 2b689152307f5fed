"""Optional dependencies (``pip install 'mr2[extra]'``): one message for a missing one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EXTRA_MISSING", "needs_extra"]

EXTRA_MISSING = "{feature} needs {package}: pip install 'mr2[{extra}]'"


@contextmanager
def needs_extra(feature: str, package: str, extra: str) -> Iterator[None]:
    """Turn a :class:`ModuleNotFoundError` inside the block into one that names the extra to install.

    Example:
        >>> with needs_extra("mr2.demo", "no_such_package", "demo"):
        ...     import no_such_package
        Traceback (most recent call last):
        ...
        ModuleNotFoundError: mr2.demo needs no_such_package: pip install 'mr2[demo]'
    """
    try:
        yield
    except ModuleNotFoundError as error:
        message = EXTRA_MISSING.format(feature=feature, package=package, extra=extra)
        raise ModuleNotFoundError(message) from error
