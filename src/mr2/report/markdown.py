"""report.md: the comparison tables, bootstrap intervals, diagnostics and plots on one page.

Every piece of user text it shows (method labels, run, class, tier and data-set names, paths) goes
through :func:`mr2.report.tables.escape_markdown`: a label cannot inject markdown or HTML.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mr2.report.comparison import Comparison
from mr2.report.diagnostics import ClassDiagnostics
from mr2.report.tables import (
    PAIRED_TEST_NEEDS_SEEDS,
    Table,
    bootstrap_table,
    comparison_markdown,
    diagnostics_table,
    escape_markdown,
    format_percent,
    hardest_first,
    markdown_table,
    missing_p_values,
    per_class_table,
    run_list_table,
)

__all__ = ["PlotFile", "report_markdown"]

#: How many of each method's worst classes the summary names.
WORST_CLASSES_NAMED = 3


@dataclass(frozen=True)
class PlotFile:
    """A figure written by the report: its caption and files, relative to the report directory."""

    caption: str
    png: Path
    svg: Path


def missing_classes_line(comparison: Comparison) -> str | None:
    """The sentence naming the classes without a test sample, or None when every class has one."""
    first = comparison.methods[0].runs[0]
    missing = np.flatnonzero(first.support == 0)
    if not missing.size:
        return None
    return (
        f"Classes without a {first.split} sample (NaN, left out of every figure): "
        + ", ".join(str(int(k)) for k in missing)
        + "."
    )


#: Predictions files named in the heading before it says "and N more".
_FILES_NAMED = 6


def _distinct_names(paths: Sequence[Path]) -> list[str]:
    """The files' names, or, where two share a name (``trials/.../test.npz``), their paths below the
    deepest folder they all share.

    >>> _distinct_names([Path("t/erm/s0/test.npz"), Path("t/m/s0/test.npz")])
    ['erm/s0/test.npz', 'm/s0/test.npz']
    """
    names = [path.name for path in paths]
    if len(set(names)) == len(names):
        return names
    common = Path(os.path.commonpath([str(path.absolute().parent) for path in paths]))
    return [str(path.absolute().relative_to(common)) for path in paths]


def _source(comparison: Comparison) -> str:
    """What the runs were evaluated on: the data set's name, else the predictions files' names."""
    runs = [run for summary in comparison.methods for run in summary.runs]
    if runs[0].dataset:
        return runs[0].dataset
    # A run read from a predictions file has a path and no run configuration.
    paths = [run.path for run in runs if run.path is not None and run.config is None]
    if not paths or len(paths) != len(runs):
        return "unknown data set"
    files = _distinct_names(paths)
    shown = ", ".join(files[:_FILES_NAMED])
    if len(files) > _FILES_NAMED:
        shown += f" and {len(files) - _FILES_NAMED} more"
    return f"predictions files: {shown}"


def overview_line(comparison: Comparison) -> str:
    """``N runs on DATASET (K classes, SPLIT split, N samples).``; DATASET is ``predictions files:
    a.npz, b.csv`` for a report of predictions files."""
    first = comparison.methods[0].runs[0]
    num_runs = sum(len(summary.runs) for summary in comparison.methods)
    dataset = _source(comparison)
    return (
        f"{num_runs} runs on {dataset} ({first.num_classes} classes, {first.split} split, "
        f"{int(first.support.sum())} samples)."
    )


def worst_classes_line(comparison: Comparison) -> str:
    """The summary's sentence naming each method's worst classes (mean accuracy over seeds, %):
    ``Worst classes (...): erm: Shirt 35.00, Coat 55.00, ...; mr2: ...``. A class without a name
    is ``class <id>``; classes without samples are left out; ties go to the lower class id."""
    first = comparison.methods[0].runs[0]
    names = first.class_names
    parts = []
    for summary in comparison.methods:
        accuracy = summary.per_class_mean
        order = [int(k) for k in np.argsort(accuracy, kind="stable") if not np.isnan(accuracy[k])]
        shown = [
            f"{names[k] if names is not None and names[k] else f'class {k}'} {format_percent(accuracy[k])}"
            for k in order[:WORST_CLASSES_NAMED]
        ]
        parts.append(f"{summary.method}: {', '.join(shown)}")
    return "Worst classes (mean accuracy over seeds, %): " + "; ".join(parts) + "."


_TIER_NOTE = (
    "Tier accuracy is the mean of the per-class accuracies of the tier's classes. Tiers come "
    "from the reference method and are the same for every row."
)
#: Said after :data:`_TIER_NOTE` only when the tiers were ranked on the test split.
_TEST_SPLIT_TIERS_NOTE = (
    "Ranking and evaluating on the same test split favours the other methods slightly on the hard "
    "tier (regression to the mean); `--tier-source validation` ranks on the validation split instead."
)


def tier_note(comparison: Comparison) -> str:
    """The note under the comparison tables; the advice to rank on validation only when the tiers
    were ranked on the test split."""
    if comparison.tier_source == "test":
        return f"{_TIER_NOTE} {_TEST_SPLIT_TIERS_NOTE}"
    return _TIER_NOTE


_PER_CLASS_NOTE = (
    "One row per class, from the hardest (lowest ranking accuracy, the tiers' order) to the easiest: "
    "test samples, tier, the accuracy that ranked it, each method's accuracy (mean over seeds, %) and "
    "each method's change against the reference (percentage points). With many classes (K = 1000) "
    "this is a long table; per_class.csv holds the same rows in class-id order, report.html sorts them "
    "by any column."
)


def per_class_markdown(comparison: Comparison) -> list[str]:
    """The per-class section's table as markdown lines, hardest class first."""
    table = per_class_table(comparison)
    ordered = Table(table.headers, table.align, [table.rows[k] for k in hardest_first(comparison)])
    return markdown_table(ordered)

DIAGNOSTICS_NOTE = (
    "Spearman rank correlation between each per-class quantity and the class error "
    "(1 - accuracy), mean ± std over the method's runs (number of runs). A positive value for "
    "gamma_k means the harder classes received the larger temperatures, as MR2 intends; a "
    "negative one means the allocation is inverted."
)


def bootstrap_heading(confidence: float) -> str:
    """The heading of the bootstrap table."""
    return (
        f"Per-run values with {100 * confidence:g}% bootstrap intervals (test samples resampled "
        "within classes; %)"
    )


def report_markdown(
    comparison: Comparison,
    diagnostics: Mapping[str, Sequence[ClassDiagnostics]],
    plots: Sequence[PlotFile],
    *,
    confidence: float,
) -> str:
    """The text of report.md."""
    missing = missing_classes_line(comparison)
    lines = [
        "# Class-wise disparity report",
        "",
        escape_markdown(overview_line(comparison)),
        "",
        escape_markdown(worst_classes_line(comparison)),
        "",
        *([escape_markdown(missing), ""] if missing else []),
        *markdown_table(run_list_table(comparison)),
        "",
        "## Comparison",
        "",
        comparison_markdown(comparison),
        *([PAIRED_TEST_NEEDS_SEEDS, ""] if missing_p_values(comparison) else []),
        tier_note(comparison),
        "",
    ]
    if comparison.bootstrap:
        lines += [f"## {bootstrap_heading(confidence)}", "", *markdown_table(bootstrap_table(comparison)), ""]
    table = diagnostics_table(diagnostics)
    if table is not None:
        lines += [
            "## Diagnostics: which classes get the larger margins?",
            "",
            DIAGNOSTICS_NOTE,
            "",
            *markdown_table(table),
            "",
        ]
    lines += ["## Per-class accuracy", "", _PER_CLASS_NOTE, "", *per_class_markdown(comparison), ""]
    if plots:
        lines += ["## Plots", ""]
        for plot in plots:
            lines += [f"![{escape_markdown(plot.caption)}]({plot.png.as_posix()})", ""]
    lines += [
        "Files: comparison.csv, runs.csv, per_class.csv and report.json hold the same figures as "
        "fractions (not percent).",
        "",
    ]
    return "\n".join(lines)
