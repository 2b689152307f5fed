"""CSV cells safe to open in a spreadsheet (OWASP's rule against CSV / formula injection).

A spreadsheet runs a cell that begins with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return,
which some programs skip before reading one of those) as a formula: a method label or class name such
as ``=HYPERLINK(...)`` or ``-2+3+cmd|' /C calc'!A0`` would become a live formula in whoever opens
the report's CSV files. :func:`csv_text` prefixes such a cell with a single quote, which spreadsheets
read as "text"; a cell that is a plain number (``-0.5``, ``+3``, ``-1e-05``, ``-inf``) is left as it
is, so numeric columns stay numeric.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["csv_row", "csv_text"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)")


def csv_text(cell: str) -> str:
    """``cell`` with a leading ``'`` when a spreadsheet would read it as a formula.

    >>> csv_text("=1+2"), csv_text("-0.5"), csv_text("erm")
    ("'=1+2", '-0.5', 'erm')
    """
    if cell.startswith(_FORMULA_START) and not _NUMBER.fullmatch(cell):
        return "'" + cell
    return cell


def csv_row(cells: Iterable[Any]) -> list[Any]:
    """A row with :func:`csv_text` applied to every string cell (numbers are written as they are)."""
    return [csv_text(cell) if isinstance(cell, str) else cell for cell in cells]
