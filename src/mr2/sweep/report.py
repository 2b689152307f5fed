"""The report of a whole sweep, written to ``<sweep_dir>/report/`` with :mod:`mr2.report`.

It is ``mr2 report``'s report (comparison table, tiers from the reference, tests, diagnostics,
plots) over the runs of each method entry's selected setting, plus:

- ``report.md`` and ``report.html`` gain a *Sweep* section: the hyperparameter selection (every
  setting, its validation score over seeds, and its test figures for information), and the failed
  runs with the path of their logs;
- ``selection.json``: the selection in full (scores per seed, the chosen setting of each entry);
- ``settings.csv``: one row per (entry, setting): validation score, test overall, tiers, worst class.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mr2.io import atomic_write_json, atomic_write_text
from mr2.report import DisparityReport, ReportOutput, RunRecord, load_run, write_report
from mr2.report.exceptions import MissingClassWarning, ReportError
from mr2.report.html import add_section
from mr2.report.statistics import mean_std
from mr2.report.tables import Cell, Table, format_percent
from mr2.sweep.plan import RunPoint
from mr2.sweep.runner import RunOutcome
from mr2.sweep.selection import Selection, SettingScore, select_settings
from mr2.sweep.spec import SweepSpec

__all__ = [
    "SweepReport",
    "SweepReportError",
    "load_finished_runs",
    "selection_summary",
    "write_sweep_report",
]

_NO_REFERENCE_RUN = (
    "no run of the reference {reference!r} finished, so there is nothing to compare against; see the "
    "failed runs above"
)


class SweepReportError(ReportError):
    """The sweep's report cannot be written (e.g. no finished run of the reference)."""


@dataclass
class SweepReport:
    """What :func:`write_sweep_report` produced.

    Attributes:
        output: the report of the selected runs (comparison, markdown, files).
        selection: the hyperparameter selection.
        directory: the report directory.
        unreadable: run name -> why its finished run could not be read.
    """

    output: ReportOutput
    selection: Selection
    directory: Path
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def markdown_path(self) -> Path:
        return self.directory / "report.md"

    @property
    def plot_paths(self) -> list[Path]:
        """The PNG figures, in report order."""
        return [self.directory / f for f in self.output.files if f.suffix == ".png"]


def load_finished_runs(points: Sequence[RunPoint]) -> tuple[dict[str, RunRecord], dict[str, str]]:
    """Read every finished run of the sweep; returns ``(name -> run, name -> error)``."""
    runs: dict[str, RunRecord] = {}
    errors: dict[str, str] = {}
    for point in points:
        if not point.directory.is_finished:
            continue
        try:
            runs[point.name] = load_run(point.run_dir)
        except ReportError as error:
            errors[point.name] = str(error)
    return runs, errors


def _mean_cell(values: list[float]) -> str:
    mean, std, n = mean_std(values)
    if n == 0:
        return "n/a"
    return format_percent(mean) + ("" if math.isnan(std) else f" ± {100 * std:.2f}")


def _test_values(score: SettingScore, output: ReportOutput, bottom_fraction: float) -> dict[str, list[float]]:
    tiers = output.comparison.tiers
    values: dict[str, list[float]] = {}
    for run in score.runs:
        with warnings.catch_warnings():
            # The comparison has already warned about classes without test samples.
            warnings.simplefilter("ignore", MissingClassWarning)
            report = DisparityReport(run.confusion, tiers=tiers, bottom_fraction=bottom_fraction)
        summary = report.summary()
        for key, _ in output.comparison.metrics:
            values.setdefault(key, []).append(float(summary[key]))
    return values


#: One row per (entry, setting): its label, its score and its test metrics per seed.
SettingRow = tuple[str, SettingScore, dict[str, list[float]]]


def _setting_rows(selection: Selection, output: ReportOutput, bottom_fraction: float) -> list[SettingRow]:
    """The test metrics of every setting's runs, computed once for the markdown and the CSV."""
    return [
        (label, score, _test_values(score, output, bottom_fraction))
        for label, scores in selection.settings.items()
        for score in scores
    ]


def _metric(selection: Selection) -> str:
    return "validation accuracy" if selection.select_by == "val_accuracy" else "validation worst class"


def _columns(output: ReportOutput) -> list[tuple[str, str]]:
    return [(k, header) for k, header in output.comparison.metrics if k not in ("std", "bottom_mean")]


def _selection_intro(selection: Selection, selected_mark: str) -> tuple[str, str]:
    """The heading and the paragraph above the settings table; ``selected_mark`` says how the table
    marks the selected setting (report.md: bold)."""
    metric = _metric(selection)
    if selection.tuned_labels():
        return "Hyperparameter selection (validation split)", (
            f"Each method's setting is chosen by the mean {metric} over its finished seeds "
            f"(`select_by: {selection.select_by}`); the test split plays no part in the choice. Only "
            f"the selected setting ({selected_mark}) enters the comparison above. The test columns are given "
            "for information (tiers as above; %, mean ± std over seeds)."
        )
    return "Validation results", (
        f"No method has a hyperparameter grid, so nothing was selected; the {metric} of each "
        "method (mean ± std over seeds) is listed next to its test figures (%)."
    )


def _selected_line(selection: Selection) -> str:
    """``Selected: mr2: c_bar=2.`` (empty without a tuned entry)."""
    tuned = selection.tuned_labels()
    if not tuned:
        return ""
    return "Selected: " + "; ".join(
        f"{label}: {chosen.setting_name}" for label in tuned if (chosen := selection.selected(label))
    ) + "."


def _settings_markdown(selection: Selection, output: ReportOutput, rows: Sequence[SettingRow]) -> list[str]:
    metric = _metric(selection)
    columns = _columns(output)
    heading, intro = _selection_intro(selection, "**bold**")
    lines = [
        f"## {heading}",
        "",
        intro,
        "",
        f"| method | setting | seeds | {metric} | "
        + " | ".join(f"test {header}" for _, header in columns) + " |",
        "|---|---|---:|---:|" + "---:|" * len(columns),
    ]
    for label, score, values in rows:
        seeds = f"{len(score.runs)}/{len(score.planned_seeds)}"
        name = score.setting_name or "(no grid)"
        if score.selected:
            name = f"**{name}**"
        cells = [_mean_cell(values.get(key, [])) for key, _ in columns]
        lines.append(
            f"| {label} | {name} | {seeds} | {_mean_cell(score.scores)} | " + " | ".join(cells) + " |"
        )
    lines.append("")
    selected = _selected_line(selection)
    if selected:
        lines += [selected, ""]
    return lines


def _settings_table(selection: Selection, output: ReportOutput, rows: Sequence[SettingRow]) -> Table:
    """The settings table of report.html: report.md's rows, the selected setting marked in words."""
    columns = _columns(output)
    table = Table(
        ["method", "setting", "seeds", _metric(selection), *(f"test {header}" for _, header in columns)],
        ["left", "left", "right", "right", *(["right"] * len(columns))],
    )
    for label, score, values in rows:
        name = score.setting_name or "(no grid)"
        table.rows.append([
            Cell(label, label),
            Cell(f"{name} (selected)" if score.selected else name, score.setting_name),
            Cell(f"{len(score.runs)}/{len(score.planned_seeds)}", len(score.runs)),
            Cell(_mean_cell(score.scores), None if math.isnan(score.mean) else score.mean),
            *(Cell(_mean_cell(values.get(k, [])), _mean_or_none(values.get(k, []))) for k, _ in columns),
        ])
    return table


def _mean_or_none(values: list[float]) -> float | None:
    mean = mean_std(values)[0]
    return None if math.isnan(mean) else mean


def _settings_csv(selection: Selection, output: ReportOutput, rows: Sequence[SettingRow]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    keys = [key for key, _ in output.comparison.metrics]
    writer.writerow(
        ["method", "setting", "selected", "finished_seeds", "planned_seeds", f"{selection.select_by}_mean",
         f"{selection.select_by}_std", *(f"test_{key}_mean" for key in keys)]
    )
    for label, score, values in rows:
        row: list[Any] = [
            label, score.setting_name, int(score.selected), len(score.runs), len(score.planned_seeds),
            "" if math.isnan(score.mean) else repr(score.mean),
            "" if math.isnan(score.std) else repr(score.std),
        ]
        for key in keys:
            mean = mean_std(values.get(key, []))[0]
            row.append("" if math.isnan(mean) else repr(mean))
        writer.writerow(row)
    return buffer.getvalue()


#: The paragraph above the list of failed runs.
_FAILED_NOTE = (
    "These runs are missing from every table. Fix the cause and run the same `mr2 sweep` command "
    "again: finished runs are skipped, interrupted ones resume from their checkpoint."
)


def _failures_markdown(failed: Sequence[RunOutcome], unreadable: dict[str, str]) -> list[str]:
    if not failed and not unreadable:
        return []
    lines = ["## Failed runs", "", _FAILED_NOTE, ""]
    for outcome in failed:
        lines.append(f"- `{outcome.point.name}`: {outcome.message} (log: `{outcome.log_path}`)")
    for name, error in unreadable.items():
        lines.append(f"- `{name}`: its final.json cannot be read: {error}")
    lines.append("")
    return lines


def write_sweep_report(
    spec: SweepSpec,
    points: Sequence[RunPoint],
    outcomes: Sequence[RunOutcome] = (),
    *,
    out_dir: str | Path | None = None,
    plots: bool | None = None,
) -> SweepReport:
    """Select hyperparameters on validation and write the report of the sweep.

    Args:
        spec: the sweep.
        points: its planned runs.
        outcomes: the runner's outcomes (failures are listed in the report).
        out_dir: report directory (default ``<sweep_dir>/report``).
        plots: draw the figures (default: the spec's ``report.plots``).

    Raises:
        SweepReportError: no finished run of the reference entry.
        mr2.sweep.selection.SelectionError: settings to choose from but no validation results.
    """
    directory = Path(out_dir) if out_dir is not None else spec.sweep_dir / "report"
    runs, unreadable = load_finished_runs(points)
    selection = select_settings(points, runs, spec.select_by)
    selected = selection.selected_runs()
    if not any(run.method == spec.reference for run in selected):
        raise SweepReportError(_NO_REFERENCE_RUN.format(reference=spec.reference))
    options = spec.report
    output = write_report(selected, directory, options.settings(reference=spec.reference, plots=plots))
    failed = [o for o in outcomes if o.status == "failed"]
    atomic_write_json(directory / "selection.json", selection.to_dict())
    rows = _setting_rows(selection, output, options.bottom_fraction)
    atomic_write_text(directory / "settings.csv", _settings_csv(selection, output, rows))
    output.files += [Path("selection.json"), Path("settings.csv")]

    planned = len(points)
    finished = len(runs)
    sweep_lines = [
        "## Sweep",
        "",
        f"Sweep `{spec.name}` in `{spec.sweep_dir}`"
        + (f" (from `{spec.source}`)" if spec.source is not None else "")
        + f": {finished} of {planned} planned runs finished; {len(spec.seeds)} seed(s) "
        f"({', '.join(str(s) for s in spec.seeds)}); reference `{spec.reference}`.",
        "",
        *_settings_markdown(selection, output, rows),
        *_failures_markdown(failed, unreadable),
    ]
    markdown = output.markdown.rstrip("\n") + "\n\n" + "\n".join(sweep_lines)
    if Path("report.html") in output.files:
        page = (directory / "report.html").read_text("utf-8")
        atomic_write_text(directory / "report.html", _sweep_html(page, spec, selection, output, rows, failed,
                                                                 unreadable, finished, planned))
    atomic_write_text(directory / "report.md", markdown)
    output.markdown = markdown
    return SweepReport(output=output, selection=selection, directory=directory, unreadable=unreadable)


def _sweep_html(page: str, spec: SweepSpec, selection: Selection, output: ReportOutput,
                rows: Sequence[SettingRow], failed: Sequence[RunOutcome], unreadable: dict[str, str],
                finished: int, planned: int) -> str:
    """report.html with the sections report.md gains: the sweep, its selection, its failed runs. User
    text (names, paths, messages) is passed as text and escaped by :func:`add_section`."""
    source = f" (from {spec.source})" if spec.source is not None else ""
    summary = (
        f"Sweep {spec.name} in {spec.sweep_dir}{source}: {finished} of {planned} planned runs finished; "
        f"{len(spec.seeds)} seed(s) ({', '.join(str(s) for s in spec.seeds)}); reference {spec.reference}."
    )
    heading, intro = _selection_intro(selection, "marked selected")
    selected = _selected_line(selection)
    page = add_section(page, "Sweep", [summary])
    page = add_section(page, heading, [intro.replace("`", ""), _settings_table(selection, output, rows),
                                       *([selected] if selected else [])])
    if failed or unreadable:
        items = [f"{o.point.name}: {o.message} (log: {o.log_path})" for o in failed]
        items += [f"{name}: its final.json cannot be read: {error}" for name, error in unreadable.items()]
        page = add_section(page, "Failed runs", [_FAILED_NOTE.replace("`", ""), items])
    return page


def selection_summary(report: SweepReport) -> str:
    """One line per tuned entry: ``mr2: c_bar=2 (validation accuracy 91.20)``."""
    parts = []
    for label in report.selection.tuned_labels():
        chosen = report.selection.selected(label)
        if chosen is not None:
            parts.append(f"{label}: {chosen.setting_name} ({report.selection.select_by} "
                         f"{format_percent(chosen.mean)})")
    return "\n".join(parts)
