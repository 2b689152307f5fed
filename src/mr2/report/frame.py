"""The report's per-class figures as a pandas DataFrame (optional extra: ``pip install 'mr2[pandas]'``).

The shape is that of fairlearn's ``MetricFrame.by_group``: one row per class (the groups), indexed by
the class names (by the class ids where the runs have no names), one column per figure:

- ``support``: the class's test samples; ``tier``: its tier (None for a class left unranked);
- ``<method> accuracy``: each method's per-class accuracy, mean over its seeds;
- ``<method> change vs <reference>``: each other method's mean minus the reference's;
- with ``runs=True``, ``run <name> accuracy``: each run's own per-class accuracy.

Values are fractions (0.8, not 80 %), the numbers report.json and per_class.csv hold, NaN for a class
without a test sample. ``frame.attrs`` holds ``reference`` and ``tiers_ranked_by``.

:func:`per_class_frame` takes what the report's Python API returns (a :class:`Comparison`, the
:class:`ReportOutput` of :func:`mr2.report.write_report`, a :class:`DisparityReport` of one run), a
report directory written by ``mr2 report`` or its report.json, and what ``mr2 tune`` produced: the
``TuneResult`` of :func:`mr2.tune.tune` or a tune's directory (its confirmation report).

Example:
    >>> from mr2.report import DisparityReport, per_class_frame
    >>> report = DisparityReport([[9, 1], [4, 6]], class_names=["cat", "dog"])
    >>> per_class_frame(report)  # doctest: +NORMALIZE_WHITESPACE
           support  tier  accuracy
    class
    cat         10  easy       0.9
    dog         10  hard       0.6
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mr2.extras import needs_extra
from mr2.report.disparity import DisparityReport
from mr2.report.exceptions import ReportError

if TYPE_CHECKING:
    import pandas

__all__ = ["NOT_A_REPORT", "NO_REPORT", "TUNE_WITHOUT_REPORT", "per_class_frame"]

NOT_A_REPORT = (
    "per_class_frame takes a Comparison, a ReportOutput, a DisparityReport, a tune's result, or the path "
    "of a report directory, its report.json or a tune's directory; got {value!r}"
)
NO_REPORT = (
    "no report at {path}: give a directory written by `mr2 report` (it holds report.json), that "
    "report.json, or a tune's directory (its confirmation/report/report.json)"
)
TUNE_WITHOUT_REPORT = (
    "this tune wrote no confirmation report (no confirmation ran, or it failed: see recommendation.json's "
    "confirmation.error), so there are no per-class figures to tabulate"
)
_BAD_REPORT_JSON = "{path} is not a report.json written by mr2 report: {reason}"


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def _report_json(path: Path) -> dict[str, Any]:
    """The report.json of a report directory, of a tune's directory, or the file itself."""
    candidates = [path] if path.suffix == ".json" else [
        path / "report.json", path / "confirmation" / "report" / "report.json"]
    for candidate in candidates:
        if candidate.is_file():
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
                raise ReportError(_BAD_REPORT_JSON.format(path=candidate, reason=error)) from error
            if not isinstance(data, dict) or not {"methods", "runs", "tiers", "reference"} <= set(data):
                raise ReportError(_BAD_REPORT_JSON.format(
                    path=candidate, reason="it lacks methods, runs, tiers or reference"))
            return data
    raise ReportError(NO_REPORT.format(path=path))


def _tier_column(tiers: Mapping[str, Any], num_classes: int) -> list[str | None]:
    column: list[str | None] = [None] * num_classes
    for name, members in tiers["members"].items():
        for k in members:
            column[int(k)] = name
    return column


def _index(class_names: Sequence[str] | None, num_classes: int) -> tuple[list[Any], str]:
    if class_names is not None:
        return list(class_names), "class"
    return list(range(num_classes)), "class"


def _frame_from_report_dict(data: Mapping[str, Any], *, runs: bool) -> pandas.DataFrame:
    """The frame from a comparison's dictionary (:meth:`Comparison.to_dict`, report.json)."""
    with needs_extra("mr2.report.per_class_frame", "pandas", "pandas"):
        import pandas as pd

    reference = data["reference"]
    methods: Mapping[str, Any] = data["methods"]
    first = data["runs"][methods[reference]["runs"][0]]["report"]
    num_classes = int(first["num_classes"])
    index, index_name = _index(first.get("class_names"), num_classes)
    columns: dict[str, list[Any]] = {
        "support": [int(v) for v in first["support"]],
        "tier": _tier_column(data["tiers"], num_classes),
    }
    means = {name: [_float(v) for v in item["per_class_mean"]] for name, item in methods.items()}
    for name, mean in means.items():
        columns[f"{name} accuracy"] = mean
    for name, mean in means.items():
        if name != reference:
            columns[f"{name} change vs {reference}"] = [
                a - b for a, b in zip(mean, means[reference], strict=True)
            ]
    if runs:
        for item in methods.values():
            for run in item["runs"]:
                columns[f"run {run} accuracy"] = [_float(v) for v in data["runs"][run]["report"]["by_class"]]
    frame = pd.DataFrame(columns, index=pd.Index(index, name=index_name))
    frame.attrs["reference"] = reference
    frame.attrs["tiers_ranked_by"] = data["tiers"].get("ranked_by")
    return frame


def per_class_frame(source: Any, *, runs: bool = False) -> pandas.DataFrame:
    """The per-class figures of a report as a DataFrame, one row per class (see the module docstring).

    Args:
        source: a :class:`mr2.report.Comparison`, a :class:`mr2.report.ReportOutput`, a
            :class:`mr2.report.DisparityReport` (one run: columns ``support``, ``tier``, ``accuracy``),
            a tune's result (``mr2.tune.tune(...)``: its confirmation report), or the path of a
            report directory, of its report.json, or of a tune's directory.
        runs: add one column per run (``run <name> accuracy``) after the methods' means and changes.

    Returns:
        A ``pandas.DataFrame`` indexed by class name (class id where the runs have no names).

    Raises:
        ModuleNotFoundError: pandas is not installed (``pip install 'mr2[pandas]'``).
        ReportError: ``source`` is none of the above, or a path without a report.
    """
    # Comparison and ReportOutput are recognised by what they hold, not imported: both of their
    # modules reach this one (their per_class_frame methods), and an import back would be a cycle.
    if hasattr(source, "comparison") and hasattr(source, "markdown"):  # a ReportOutput
        source = source.comparison
    if isinstance(source, DisparityReport):
        return _frame_from_disparity(source)
    if all(hasattr(source, name) for name in ("reference", "methods", "to_dict")):  # a Comparison
        return _frame_from_report_dict(source.to_dict(), runs=runs)
    if isinstance(source, (str, Path)):
        return _frame_from_report_dict(_report_json(Path(source)), runs=runs)
    if hasattr(source, "report_dir") and hasattr(source, "recommendation_file"):  # a TuneResult
        if source.report_dir is None:
            raise ReportError(TUNE_WITHOUT_REPORT)
        return _frame_from_report_dict(_report_json(Path(source.report_dir)), runs=runs)
    raise ReportError(NOT_A_REPORT.format(value=type(source).__name__))


def _frame_from_disparity(report: Any) -> pandas.DataFrame:
    with needs_extra("mr2.report.per_class_frame", "pandas", "pandas"):
        import pandas as pd

    index, index_name = _index(report.class_names, report.num_classes)
    frame = pd.DataFrame(
        {
            "support": [int(v) for v in report.support],
            "tier": _tier_column(report.tiers.to_dict(), report.num_classes),
            "accuracy": [float(v) for v in report.by_class],
        },
        index=pd.Index(index, name=index_name),
    )
    frame.attrs["tiers_ranked_by"] = report.tiers.ranked_by
    return frame
