"""report.md: the comparison tables, bootstrap intervals, diagnostics and plots on one page.

Every piece of user text it shows (method labels, run, class, tier and data-set names, paths) goes
through :func:`mr2.report.tables.escape_markdown`: a label cannot inject markdown or HTML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mr2.report.comparison import Comparison
from mr2.report.diagnostics import ClassDiagnostics
from mr2.report.tables import (
    bootstrap_table,
    comparison_markdown,
    diagnostics_table,
    escape_markdown,
    markdown_table,
    run_list_table,
)

__all__ = ["PlotFile", "report_markdown"]


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


def overview_line(comparison: Comparison) -> str:
    """``N runs on DATASET (K classes, SPLIT split, N samples).``"""
    first = comparison.methods[0].runs[0]
    num_runs = sum(len(summary.runs) for summary in comparison.methods)
    dataset = first.dataset or "unknown data set"
    return (
        f"{num_runs} runs on {dataset} ({first.num_classes} classes, {first.split} split, "
        f"{int(first.support.sum())} samples)."
    )


TIER_NOTE = (
    "Tier accuracy is the mean of the per-class accuracies of the tier's classes. Tiers come "
    "from the reference method and are the same for every row. Ranking and evaluating on the "
    "same test split favours the other methods slightly on the hard tier (regression to the "
    "mean); `--tier-source validation` ranks on the validation split instead."
)

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
        *([escape_markdown(missing), ""] if missing else []),
        *markdown_table(run_list_table(comparison)),
        "",
        "## Comparison",
        "",
        comparison_markdown(comparison),
        TIER_NOTE,
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
