"""Errors and warnings of the disparity report.

Every message a user can see is a module-level constant next to the code that raises it, so tests
assert on the exact text and a message is changed in one place.
"""

from __future__ import annotations

__all__ = ["MissingClassWarning", "PredictionsError", "ReportError", "RunDirectoryError"]


class ReportError(ValueError):
    """Bad input to a disparity computation (wrong shape, out-of-range class id, ...)."""


class RunDirectoryError(ReportError):
    """A run directory is missing, unfinished, corrupt or inconsistent with the other runs."""


class MissingClassWarning(UserWarning):
    """Some classes have no evaluated sample: their accuracy is NaN and they are left out."""


class PredictionsError(ReportError):
    """A predictions file is missing, unreadable, malformed or inconsistent with the other files."""
