"""The error family of :mod:`mr2.tune`: bad input to tune, from the command line or from Python."""

from __future__ import annotations

from mr2.errors import MR2Error

__all__ = ["TrialError", "TrialFailed", "TuneInputError"]


class TuneInputError(MR2Error, ValueError):
    """Bad input to ``mr2 tune``; the message says what was wrong and how to fix it."""


class TrialError(TuneInputError):
    """A trial's training code failed or returned predictions tune cannot use; the message names the
    trial (candidate and seed) and its log file where there is one."""


class TrialFailed(TrialError):
    """A trial failed (raised, exited non-zero, timed out, wrote no predictions or non-finite logits):
    tune rules its candidate out and goes on (ERM failing still ends the tune)."""
