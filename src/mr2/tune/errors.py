"""The error family of :mod:`mr2.tune`: bad input to tune, from the command line or from Python."""

from __future__ import annotations

from mr2.errors import MR2Error

__all__ = ["EXIT_BAD_INPUT", "EXIT_NO_ADVICE", "TrialError", "TrialFailed", "TuneInputError"]

#: ``mr2 tune``'s exit code when no advice could be given (ERM failed, no choice could be made, or the
#: trial a dry run timed failed).
EXIT_NO_ADVICE = 1
#: ``mr2 tune``'s exit code for invalid input (nothing written; also a trial whose predictions tune
#: cannot use).
EXIT_BAD_INPUT = 2


class TuneInputError(MR2Error, ValueError):
    """Bad input to ``mr2 tune``; the message says what was wrong and how to fix it."""


class TrialError(TuneInputError):
    """A trial's training code failed or returned predictions tune cannot use; the message names the
    trial (candidate and seed) and its log file where there is one."""


class TrialFailed(TrialError):
    """A trial failed (raised, exited non-zero, timed out, wrote no predictions or non-finite logits):
    tune rules its candidate out and goes on (ERM failing still ends the tune)."""
