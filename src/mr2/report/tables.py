"""The report's tables: built once from a :class:`Comparison`, rendered as markdown, HTML or CSV.

Each table is a :class:`Table` of :class:`Cell` s; a cell holds the text shown (percent, ``n/a``) and
the raw value behind it (a fraction, a count, a name), which the HTML page uses to sort columns and
which equals the number in report.json. :func:`markdown_table` renders a table for report.md; the
HTML page (:mod:`mr2.report.html`) renders the same tables. The CSV files hold fractions.
"""

from __future__ import annotations

import csv
import io
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mr2.report.comparison import Comparison, MethodSummary
from mr2.report.csv_cells import csv_row
from mr2.report.degenerate import CHANCE_LEVEL, DEGENERATE_MARK
from mr2.report.diagnostics import CLASS_STATISTICS, ClassDiagnostics, ordered_statistics
from mr2.report.statistics import RankCorrelation, mean_std
from mr2.report.tiers import ranking_order

__all__ = [
    "Cell",
    "Table",
    "bootstrap_table",
    "comparison_csv",
    "comparison_markdown",
    "diagnostics_table",
    "difference_table",
    "escape_markdown",
    "flags_note",
    "format_p",
    "format_percent",
    "hardest_first",
    "markdown_table",
    "missing_p_values",
    "per_class_csv",
    "per_class_table",
    "run_list_table",
    "runs_csv",
    "sign_table",
    "summary_table",
]

_LABELS = dict(CLASS_STATISTICS)


@dataclass(frozen=True)
class Cell:
    """One table cell.

    Attributes:
        text: what is shown.
        value: the raw value (a fraction, count or name; None when undefined): sort key and the
            number report.json holds.
    """

    text: str
    value: float | int | str | None = None


@dataclass
class Table:
    """A table: headers, one alignment per column (``"left"`` / ``"right"``) and rows of cells."""

    headers: list[str]
    align: list[str]
    rows: list[list[Cell]] = field(default_factory=list)


def format_percent(value: float, *, signed: bool = False) -> str:
    """A fraction in percent with 2 decimals (``n/a`` for NaN).

    >>> format_percent(0.71804), format_percent(-0.0123, signed=True), format_percent(float("nan"))
    ('71.80', '-1.23', 'n/a')
    """
    if math.isnan(value):
        return "n/a"
    return f"{100 * value:+.2f}" if signed else f"{100 * value:.2f}"


def format_p(value: float) -> str:
    """A p-value with 3 decimals, ``<0.001`` below, ``n/a`` for NaN.

    >>> format_p(0.04567), format_p(1e-5)
    ('0.046', '<0.001')
    """
    if math.isnan(value):
        return "n/a"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _value(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _mean_std_cell(mean: float, std: float) -> Cell:
    text = format_percent(mean)
    if not math.isnan(std):
        text += f" ± {100 * std:.2f}"
    return Cell(text, _value(mean))


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")
_HTML_SPECIAL = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape_markdown(text: str) -> str:
    """``text`` (a method label, run, class or data-set name) as literal markdown inline text.

    Markdown's inline markup characters (backslash, backtick, ``*``, ``_``, brackets, ``|``, ``~``,
    ``$``) are backslash-escaped, ``&``, ``<`` and ``>`` become HTML entities (no raw HTML reaches a
    renderer), and line breaks and other control characters become spaces (a table row stays one
    line).

    >>> escape_markdown("**a|b** <i>")
    '\\\\*\\\\*a\\\\|b\\\\*\\\\* &lt;i&gt;'
    """
    text = "".join(" " if unicodedata.category(char) == "Cc" else char for char in text)
    text = _MARKDOWN_SPECIAL.sub(r"\\\1", text)
    return "".join(_HTML_SPECIAL.get(char, char) for char in text)


def markdown_table(table: Table) -> list[str]:
    """The table as markdown lines (header, alignment row, one line per row). Headers and cells that
    show a name (a string value) are escaped with :func:`escape_markdown`.

    >>> markdown_table(Table(["method", "n"], ["left", "right"], [[Cell("erm", "erm"), Cell("3", 3)]]))
    ['| method | n |', '|---|---:|', '| erm | 3 |']
    """
    separator = "|" + "".join("---:|" if a == "right" else "---|" for a in table.align)
    return [
        "| " + " | ".join(escape_markdown(h) for h in table.headers) + " |",
        separator,
        *(
            "| "
            + " | ".join(
                escape_markdown(cell.text) if isinstance(cell.value, str) else cell.text for cell in row
            )
            + " |"
            for row in table.rows
        ),
    ]


def _method_cell(comparison: Comparison, summary: MethodSummary) -> Cell:
    """The method's name, marked with :data:`DEGENERATE_MARK` when its mean includes a degenerate
    run (the cell's value stays the bare name)."""
    flagged = any(run.name in comparison.flags for run in summary.runs)
    return Cell(f"{summary.method} {DEGENERATE_MARK}" if flagged else summary.method, summary.method)


def _run_cell(comparison: Comparison, name: str) -> Cell:
    """A run's name, marked like :func:`_method_cell` when it is degenerate."""
    return Cell(f"{name} {DEGENERATE_MARK}" if name in comparison.flags else name, name)


def flags_note(comparison: Comparison) -> str | None:
    """The sentence naming every degenerate run and why (None when no run is flagged): what the
    printed summary and report.md say under the first table.

    The runs stay in every figure; a method whose mean over seeds includes one carries
    :data:`DEGENERATE_MARK` in the tables.
    """
    if not comparison.flags:
        return None
    named = "; ".join(
        f"{run.name} {comparison.flags[run.name].reason()}"
        for summary in comparison.methods
        for run in summary.runs
        if run.name in comparison.flags
    )
    count = len(comparison.flags)
    return (
        f"{DEGENERATE_MARK} Degenerate run{'s' if count > 1 else ''} (kept in every figure; a mean over "
        f"seeds marked {DEGENERATE_MARK} includes one): {named}. A run is flagged when it predicts one "
        "class for every sample, or when its accuracy is not above chance (the accuracy of predicting "
        "with its own class frequencies while ignoring the input: 1/K on a balanced test split) by an "
        f"exact one-sided binomial test at the {CHANCE_LEVEL:g} level."
    )


def summary_table(comparison: Comparison) -> Table:
    """Method, number of seeds, and each table metric as mean ± std over seeds (percent); a method
    whose mean includes a degenerate run is marked (:func:`flags_note`)."""
    table = Table(
        ["method", "seeds", *(header for _, header in comparison.metrics)],
        ["left", "right", *(["right"] * len(comparison.metrics))],
    )
    for summary in comparison.methods:
        table.rows.append(
            [
                _method_cell(comparison, summary),
                Cell(str(len(summary.runs)), len(summary.runs)),
                *(_mean_std_cell(summary.mean[k], summary.std[k]) for k, _ in comparison.metrics),
            ]
        )
    return table


PAIRED_TEST_NEEDS_SEEDS = (
    "No p-value where a method shares fewer than 2 seeds with the reference: the paired t-test "
    "needs at least 2 seeds of both (runs of several seeds; predictions files labelled METHOD@SEED)."
)


def missing_p_values(comparison: Comparison) -> bool:
    """Whether some paired t-test of the difference table is undefined (fewer than 2 common seeds):
    its cells show the difference without a p-value and the page says why once
    (:data:`PAIRED_TEST_NEEDS_SEEDS`)."""
    return any(
        math.isnan(test.pvalue)
        for summary in comparison.methods
        if summary.method != comparison.reference
        for test in summary.paired.values()
    )


def difference_table(comparison: Comparison) -> Table:
    """Each other method's difference to the reference (points) with its paired t-test p-value
    (none where the test is undefined: see :func:`missing_p_values`)."""
    table = Table(
        ["method", "pairs", *(header for _, header in comparison.metrics)],
        ["left", "right", *(["right"] * len(comparison.metrics))],
    )
    for summary in comparison.methods:
        if summary.method == comparison.reference:
            continue
        cells = []
        pairs = 0
        for key, _ in comparison.metrics:
            test = summary.paired[key]
            pairs = max(pairs, test.num_pairs)
            mark = "*" if test.pvalue < comparison.alpha else ""
            difference = summary.difference[key]
            p_value = "" if math.isnan(test.pvalue) else f" (p={format_p(test.pvalue)})"
            text = f"{format_percent(difference, signed=True)}{mark}{p_value}"
            cells.append(Cell(text, _value(difference)))
        table.rows.append([_method_cell(comparison, summary), Cell(str(pairs), pairs), *cells])
    return table


def sign_table(comparison: Comparison) -> Table:
    """Per-class sign test of each other method against the reference."""
    table = Table(
        ["method", "classes better", "classes worse", "ties", "p"],
        ["left", "right", "right", "right", "right"],
    )
    for summary in comparison.methods:
        if summary.method == comparison.reference:
            continue
        sign = summary.sign
        assert sign is not None
        table.rows.append(
            [
                _method_cell(comparison, summary),
                Cell(str(sign.better), sign.better),
                Cell(str(sign.worse), sign.worse),
                Cell(str(sign.ties), sign.ties),
                Cell(format_p(sign.pvalue), _value(sign.pvalue)),
            ]
        )
    return table


def comparison_markdown(comparison: Comparison) -> str:
    """The comparison tables (percent / percentage points) as markdown."""
    tiers = comparison.tiers
    sizes = ", ".join(f"{name} {size}" for name, size in zip(tiers.names, tiers.sizes, strict=True))
    reference = escape_markdown(comparison.reference)
    lines = [
        f"Reference method: **{reference}**. Tiers ranked by {escape_markdown(tiers.ranked_by)}; "
        f"classes per tier: {escape_markdown(sizes)}. Accuracies in %, mean ± std over seeds.",
        "",
        *markdown_table(summary_table(comparison)),
    ]
    note = flags_note(comparison)
    if note is not None:
        lines += ["", escape_markdown(note)]
    if len(comparison.methods) > 1:
        lines += [
            "",
            f"Difference to {reference} in percentage points (paired t-test over seeds; "
            f"`*` marks p < {comparison.alpha:g}, no multiple-comparison correction):",
            "",
            *markdown_table(difference_table(comparison)),
            "",
            f"Per-class sign test against {reference} (per-class accuracy averaged over "
            "seeds; exact binomial test, ties dropped):",
            "",
            *markdown_table(sign_table(comparison)),
        ]
    return "\n".join(lines) + "\n"


def bootstrap_table(comparison: Comparison) -> Table:
    """Per run: each table metric with its bootstrap interval (percent); no row without bootstrap."""
    table = Table(
        ["run", "method", "seed", *(header for _, header in comparison.metrics)],
        ["left", "left", "right", *(["right"] * len(comparison.metrics))],
    )
    if not comparison.bootstrap:
        return table
    for summary in comparison.methods:
        for run in summary.runs:
            cells = []
            for key, _ in comparison.metrics:
                ci = comparison.bootstrap[run.name][key]
                if math.isnan(ci.estimate):
                    cells.append(Cell("n/a"))
                else:
                    cells.append(
                        Cell(
                            f"{100 * ci.estimate:.2f} [{100 * ci.low:.2f}, {100 * ci.high:.2f}]",
                            ci.estimate,
                        )
                    )
            seed = "" if run.seed is None else str(run.seed)
            table.rows.append(
                [_run_cell(comparison, run.name), Cell(run.method, run.method), Cell(seed, run.seed), *cells]
            )
    return table


def run_list_table(comparison: Comparison) -> Table:
    """The runs: name, method, seed and where they were read from; a column saying why a run is
    degenerate when some run is (:mod:`mr2.report.degenerate`)."""
    flagged = bool(comparison.flags)
    table = Table(
        ["run", "method", "seed", "directory", *(["degenerate"] if flagged else [])],
        ["left", "left", "right", "left", *(["left"] if flagged else [])],
    )
    for summary in comparison.methods:
        for run in summary.runs:
            path = "" if run.path is None else str(run.path)
            flag = comparison.flags.get(run.name)
            reason = "" if flag is None else flag.reason()
            table.rows.append(
                [
                    _run_cell(comparison, run.name),
                    Cell(run.method, run.method),
                    Cell("" if run.seed is None else str(run.seed), run.seed),
                    Cell(path, path),
                    *([Cell(reason, reason)] if flagged else []),
                ]
            )
    return table


def _rho_cell(values: Sequence[RankCorrelation]) -> Cell:
    mean, std, n = mean_std([c.rho for c in values])
    if n == 0:
        return Cell("n/a")
    text = f"{mean:+.2f}"
    if n > 1:
        text += f" ± {std:.2f}"
    return Cell(text + f" ({n})", mean)


def diagnostics_table(diagnostics: Mapping[str, Sequence[ClassDiagnostics]]) -> Table | None:
    """Spearman rho of each per-class statistic with the class error, per method (None: no run has
    statistics)."""
    keys = ordered_statistics(
        key for items in diagnostics.values() for item in items for key in item.statistics
    )
    if not keys:
        return None
    table = Table(["method", *(_LABELS.get(k, k) for k in keys)], ["left", *(["right"] * len(keys))])
    for method, items in diagnostics.items():
        if not any(item.statistics for item in items):
            continue
        cells = [_rho_cell([d.correlations()[key] for d in items if key in d.statistics]) for key in keys]
        table.rows.append([Cell(method, method), *cells])
    return table


def _csv_cell(value: float) -> str:
    return "" if math.isnan(value) else repr(float(value))


def _per_class_columns(comparison: Comparison) -> tuple[list[str], list[list[Any]]]:
    """Per-class columns: id, name, support, tier, ranking accuracy, each method's mean accuracy."""
    first = comparison.methods[0].runs[0]
    num_classes = first.num_classes
    names = first.class_names if first.class_names is not None else [""] * num_classes
    tier_name = np.array([*comparison.tiers.names, ""])[comparison.tiers.assignment]
    columns: list[list[Any]] = [
        list(range(num_classes)),
        list(names),
        first.support.tolist(),
        tier_name.tolist(),
        comparison.tiers.reference_accuracy.tolist(),
    ]
    header = ["class_id", "class_name", "support", "tier", "ranking_accuracy"]
    for summary in comparison.methods:
        header.append(f"accuracy_{summary.method}")
        columns.append(summary.per_class_mean.tolist())
    return header, columns


def per_class_table(comparison: Comparison) -> Table:
    """One row per class, in class-id order: id, name, support, tier, ranking accuracy, each method's
    mean accuracy over seeds (percent), then each other method's change against the reference
    (percentage points)."""
    header, columns = _per_class_columns(comparison)
    base = comparison.methods[0]
    others = comparison.methods[1:]
    changes = [summary.per_class_mean - base.per_class_mean for summary in others]
    headers = ["class", "name", "support", "tier", "ranking accuracy"]
    headers += [f"{summary.method} accuracy" for summary in comparison.methods]
    headers += [f"{summary.method} change vs {base.method}" for summary in others]
    table = Table(
        headers, ["right", "left", "right", "left", *(["right"] * (len(header) - 4 + len(others)))]
    )
    change_rows = np.stack(changes, axis=1).tolist() if changes else [[] for _ in columns[0]]
    for row, change in zip(zip(*columns, strict=True), change_rows, strict=True):
        class_id, name, support, tier = row[:4]
        table.rows.append(
            [
                Cell(str(class_id), class_id),
                Cell(name, name),
                Cell(str(support), support),
                Cell(tier, tier),
                *(Cell(format_percent(v), _value(v)) for v in row[4:]),
                *(Cell(format_percent(v, signed=True), _value(v)) for v in change),
            ]
        )
    return table


def hardest_first(comparison: Comparison) -> list[int]:
    """Class ids from the hardest to the easiest: the tiers' ranking
    (:func:`mr2.report.tiers.ranking_order`) reversed, so the rows run through the hard tier first
    even across ties; classes without a ranking accuracy last, by id.

    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> tiers = SimpleNamespace(reference_accuracy=np.array([0.9, np.nan, 0.5, 0.9]))
    >>> hardest_first(SimpleNamespace(tiers=tiers))
    [2, 3, 0, 1]
    """
    accuracy = comparison.tiers.reference_accuracy
    ranked = ranking_order(accuracy)[::-1]
    unranked = np.flatnonzero(np.isnan(accuracy))
    return [int(k) for k in (*ranked, *unranked)]


def per_class_csv(comparison: Comparison) -> str:
    """One row per class: tier, ranking accuracy and each method's mean accuracy over seeds."""
    header, columns = _per_class_columns(comparison)
    for column in columns[4:]:
        column[:] = [_csv_cell(v) for v in column]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(csv_row(header))
    writer.writerows(csv_row(row) for row in zip(*columns, strict=True))
    return buffer.getvalue()


def comparison_csv(comparison: Comparison) -> str:
    """One row per (method, metric): mean, std, difference, t-test (fractions, not percent)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", "metric", "num_seeds", "mean", "std", "difference", "t", "pvalue", "pairs"])
    for summary in comparison.methods:
        for key, _ in comparison.metrics:
            test = summary.paired.get(key)
            writer.writerow(
                csv_row(
                    [
                        summary.method,
                        key,
                        int((~np.isnan(summary.values[key])).sum()),
                        _csv_cell(summary.mean[key]),
                        _csv_cell(summary.std[key]),
                        _csv_cell(summary.difference[key]),
                        _csv_cell(test.statistic) if test else "",
                        _csv_cell(test.pvalue) if test else "",
                        test.num_pairs if test else "",
                    ]
                )
            )
    return buffer.getvalue()


def runs_csv(comparison: Comparison) -> str:
    """One row per run: every table metric, with bootstrap bounds when computed."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = ["run", "method", "seed"]
    for key, _ in comparison.metrics:
        header.append(key)
        if comparison.bootstrap:
            header += [f"{key}_low", f"{key}_high"]
    writer.writerow(csv_row(header))
    for summary in comparison.methods:
        for run, report in zip(summary.runs, summary.reports, strict=True):
            values = report.summary()
            row: list[Any] = [run.name, run.method, "" if run.seed is None else run.seed]
            for key, _ in comparison.metrics:
                row.append(_csv_cell(values[key]))
                if comparison.bootstrap:
                    interval = comparison.bootstrap[run.name][key]
                    row += [_csv_cell(interval.low), _csv_cell(interval.high)]
            writer.writerow(csv_row(row))
    return buffer.getvalue()
