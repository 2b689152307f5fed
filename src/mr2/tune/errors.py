"""The error family of :mod:`mr2.tune`: bad input to tune, from the command line or from Python."""

from __future__ import annotations

__all__ = ["TrialError", "TuneInputError"]


class TuneInputError(ValueError):
    """Bad input to ``mr2 tune``; the message says what was wrong and how to fix it."""


class TrialError(TuneInputError):
    """A trial's training code failed or returned predictions tune cannot use; the message names the
    trial (candidate and seed) and its log file where there is one."""
