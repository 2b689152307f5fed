"""The one error of a run directory that cannot be used, and the report error it is a kind of.

:class:`RunDirectoryError` is raised wherever a run directory is refused: by its writers (``mr2
train``, ``mr2 eval``, the sweep: a directory in the way, a finished run, a changed configuration)
and by its readers (``mr2 report``, ``mr2 tune``: a missing, unfinished or corrupt run). It is a
:class:`ReportError` (a ``ValueError``), which the report's callers catch, and a ``RuntimeError``,
which the engine's callers catch.

:class:`ReportError` is defined here, below both packages, because the report reads run
directories (``mr2.report`` imports ``mr2.rundir``) and imports run one way; ``mr2.report.exceptions``
is its public home.

Example:
    >>> error = RunDirectoryError("runs/erm-s0 has no final.json")
    >>> isinstance(error, ReportError), isinstance(error, ValueError), isinstance(error, RuntimeError)
    (True, True, True)
"""

from __future__ import annotations

from mr2.errors import MR2Error

__all__ = ["ReportError", "RunDirectoryError"]


class ReportError(MR2Error, ValueError):
    """Bad input to a disparity computation (wrong shape, out-of-range class id, ...)."""


class RunDirectoryError(ReportError, RuntimeError):
    """A run directory that cannot be used as asked: missing, unfinished, corrupt, inconsistent with
    the other runs, or in the way of a new run; the message says why and what to do."""
