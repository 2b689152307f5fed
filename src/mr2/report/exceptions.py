"""Errors and warnings of the disparity report.

Every message a user can see is a module-level constant next to the code that raises it, so tests
assert on the exact text and a message is changed in one place.

:class:`ReportError` and :class:`RunDirectoryError` are defined in :mod:`mr2.rundir.errors` (the
run directory's one error is a report error too, and the report imports the run directory, not the
other way round); this is their public home.
"""

from __future__ import annotations

from mr2.rundir.errors import ReportError, RunDirectoryError

__all__ = ["MissingClassWarning", "PredictionsError", "ReportError", "RunDirectoryError"]


class MissingClassWarning(UserWarning):
    """Some classes have no evaluated sample: their accuracy is NaN and they are left out."""


class PredictionsError(ReportError):
    """A predictions file is missing, unreadable, malformed or inconsistent with the other files."""
