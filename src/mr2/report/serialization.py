"""Strict JSON for the report files: numpy values as Python values, NaN and infinities as ``null``.

``report.json`` and every ``to_dict()`` of the report layer use :func:`json_safe`, so the files parse
with any strict JSON reader (``JSON.parse`` in a browser included). ``final.json`` of a run directory,
written by the engine, keeps Python's ``NaN`` token instead; the report reads both.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["json_safe"]


def json_safe(value: Any) -> Any:
    """Convert numpy scalars/arrays to Python values and NaN/inf to None, recursively (strict JSON).

    >>> json_safe({"a": np.array([1.0, np.nan]), "b": np.int64(3)})
    {'a': [1.0, None], 'b': 3}
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
