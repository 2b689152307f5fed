"""report.html: the report as one self-contained page (no network, no other file needed).

The page holds the run list, the comparison tables, the bootstrap and diagnostics tables, the
per-class table (sortable by any column with a few lines of inline JavaScript) and the plots, inlined
as base64 PNG; a caller adds sections of its own with :func:`add_section` (the sweep's selection and
failed runs). It is filled from ``templates/report.html`` with :class:`string.Template`; every
table is the :class:`mr2.report.tables.Table` that report.md shows, and every cell carries the raw
value of report.json in its ``data-value`` attribute (the sort key).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from string import Template

from mr2.report.comparison import Comparison
from mr2.report.diagnostics import ClassDiagnostics
from mr2.report.markdown import (
    DIAGNOSTICS_NOTE,
    PlotFile,
    bootstrap_heading,
    missing_classes_line,
    overview_line,
    tier_note,
    worst_classes_line,
)
from mr2.report.tables import (
    PAIRED_TEST_NEEDS_SEEDS,
    Cell,
    Table,
    bootstrap_table,
    diagnostics_table,
    difference_table,
    flags_note,
    missing_p_values,
    per_class_table,
    run_list_table,
    sign_table,
    summary_table,
)

__all__ = ["add_section", "html_table", "report_html"]


def _markup(text: str) -> str:
    """Escape ``text`` and turn markdown's ``**bold**`` and backticks into tags."""
    escaped = html.escape(text, quote=False)
    parts = escaped.split("**")
    escaped = "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))
    parts = escaped.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _data_value(cell: Cell) -> str:
    if cell.value is None:
        return ""
    if isinstance(cell.value, float):
        return repr(cell.value)
    return str(cell.value)


def html_table(table: Table, *, table_id: str | None = None, sortable: bool = False) -> str:
    """The table as HTML; with ``sortable`` each heading is a button that sorts by its column.

    >>> print(html_table(Table(["n"], ["right"], [[Cell("3", 3)]])))
    <table>
    <thead><tr><th class="right">n</th></tr></thead>
    <tbody>
    <tr><td class="right" data-value="3">3</td></tr>
    </tbody>
    </table>
    """
    attributes = f' id="{table_id}"' if table_id else ""
    if sortable:
        attributes += ' class="sortable"'
    head = "".join(
        f'<th class="{align}">'
        + (f'<button type="button">{html.escape(header)}</button>' if sortable else html.escape(header))
        + "</th>"
        for header, align in zip(table.headers, table.align, strict=True)
    )
    rows = [
        "<tr>"
        + "".join(
            f'<td class="{align}" data-value="{html.escape(_data_value(cell))}">{html.escape(cell.text)}</td>'
            for cell, align in zip(row, table.align, strict=True)
        )
        + "</tr>"
        for row in table.rows
    ]
    return "\n".join(
        [f"<table{attributes}>", f"<thead><tr>{head}</tr></thead>", "<tbody>", *rows, "</tbody>", "</table>"]
    )


def _wide(table_html: str) -> str:
    """A table that may be wider than the page scrolls sideways inside it instead of widening it."""
    return f'<div class="wide">{table_html}</div>'


def _comparison_section(comparison: Comparison) -> str:
    # User text (the reference's label, the tiers' names) is escaped on its own, never passed
    # through _markup: a label holding ** or backticks must not become tags.
    tiers = comparison.tiers
    sizes = ", ".join(f"{name} {size}" for name, size in zip(tiers.names, tiers.sizes, strict=True))
    reference = html.escape(comparison.reference, quote=False)
    parts = [
        f"<p>Reference method: <strong>{reference}</strong>. Tiers ranked by "
        f"{html.escape(tiers.ranked_by, quote=False)}; classes per tier: {html.escape(sizes, quote=False)}. "
        "Accuracies in %, mean ± std over seeds.</p>",
        _wide(html_table(summary_table(comparison), table_id="summary")),
    ]
    note = flags_note(comparison)
    if note is not None:
        parts.append(f'<p class="flags"><strong>{html.escape(note, quote=False)}</strong></p>')
    if len(comparison.methods) > 1:
        parts += [
            f"<p>Difference to {reference} in percentage points (paired t-test over seeds; * marks "
            f"p &lt; {comparison.alpha:g}, no multiple-comparison correction):</p>",
            _wide(html_table(difference_table(comparison), table_id="difference")),
            f"<p>Per-class sign test against {reference} (per-class accuracy averaged over seeds; "
            "exact binomial test, ties dropped):</p>",
            _wide(html_table(sign_table(comparison), table_id="sign-test")),
        ]
        if missing_p_values(comparison):
            parts.append(f'<p class="note">{html.escape(PAIRED_TEST_NEEDS_SEEDS, quote=False)}</p>')
    return "\n".join(parts)


def _plots_section(plots: Sequence[PlotFile], out_dir: Path) -> str:
    if not plots:
        return ""
    figures = []
    for plot in plots:
        data = base64.b64encode((out_dir / plot.png).read_bytes()).decode("ascii")
        caption = html.escape(plot.caption)
        figures.append(
            f'<figure><img alt="{caption}" src="data:image/png;base64,{data}">'
            f"<figcaption>{caption}</figcaption></figure>"
        )
    return "<h2>Plots</h2>\n<div>\n" + "\n".join(figures) + "\n</div>"


def report_html(
    comparison: Comparison,
    diagnostics: Mapping[str, Sequence[ClassDiagnostics]],
    plots: Sequence[PlotFile],
    out_dir: str | Path,
    *,
    confidence: float,
) -> str:
    """The text of report.html (``plots`` are read from ``out_dir`` and inlined)."""
    template = Template(resources.files("mr2.report").joinpath("templates/report.html").read_text("utf-8"))
    missing = missing_classes_line(comparison)
    bootstrap = ""
    if comparison.bootstrap:
        bootstrap = f"<h2>{html.escape(bootstrap_heading(confidence))}</h2>\n" + _wide(
            html_table(bootstrap_table(comparison), table_id="bootstrap")
        )
    table = diagnostics_table(diagnostics)
    diagnostics_html = ""
    if table is not None:
        diagnostics_html = (
            "<h2>Diagnostics: which classes get the larger margins?</h2>\n"
            f'<p class="note">{_markup(DIAGNOSTICS_NOTE)}</p>\n'
            + _wide(html_table(table, table_id="diagnostics"))
        )
    return template.substitute(
        title=html.escape(f"Class-wise disparity report: {overview_line(comparison)}"),
        overview=html.escape(overview_line(comparison), quote=False),
        worst=html.escape(worst_classes_line(comparison), quote=False),
        missing=f"<p>{html.escape(missing, quote=False)}</p>" if missing else "",
        runs=_wide(html_table(run_list_table(comparison), table_id="runs")),
        comparison=_comparison_section(comparison),
        tier_note=_markup(tier_note(comparison)),
        bootstrap=bootstrap,
        diagnostics=diagnostics_html,
        per_class='<div class="scroll">'
        + html_table(per_class_table(comparison), table_id="per-class", sortable=True)
        + "</div>",
        plots=_plots_section(plots, Path(out_dir)),
    )


#: A block of :func:`add_section`: a paragraph, a table, or a bulleted list (one string per item).
SectionBlock = str | Table | Sequence[str]


def add_section(page: str, heading: str, blocks: Sequence[SectionBlock]) -> str:
    """``page`` (a report.html) with a section added at its end: ``heading``, then each block.

    Text is escaped as is (no markup is interpreted, so a user's label holding ``**`` or ``<`` shows
    as written); a :class:`~mr2.report.tables.Table` is rendered like the report's own tables.

    >>> page = "<body>\\n<p>report</p>\\n<script>\\n</script>"
    >>> print(add_section(page, "Sweep", ["runs of <a>", ["x", "y"]]))
    <body>
    <p>report</p>
    <h2>Sweep</h2>
    <p>runs of &lt;a&gt;</p>
    <ul>
    <li>x</li>
    <li>y</li>
    </ul>
    <script>
    </script>
    """
    parts = [f"<h2>{html.escape(heading, quote=False)}</h2>"]
    for block in blocks:
        if isinstance(block, str):
            parts.append(f"<p>{html.escape(block, quote=False)}</p>")
        elif isinstance(block, Table):
            parts.append(_wide(html_table(block)))
        else:
            parts += ["<ul>", *(f"<li>{html.escape(item, quote=False)}</li>" for item in block), "</ul>"]
    anchor = page.index("\n<script>")  # the page's script comes last: the section goes before it
    return page[:anchor] + "\n" + "\n".join(parts) + page[anchor:]
