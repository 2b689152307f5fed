"""The configuration's error type (its own module so that the validators of every part of the
configuration can raise it without importing one another)."""

from __future__ import annotations

from mr2.errors import MR2Error

__all__ = ["ConfigError"]


class ConfigError(MR2Error, ValueError):
    """A configuration that cannot run; the message names the key and what is expected."""
