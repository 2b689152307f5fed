"""Write the disparity report of several runs to a directory (what ``mr2 report`` produces).

Layout of ``out/``::

    report.md           one readable page: the worst classes by name, the comparison tables, bootstrap
                        intervals, diagnostics, the per-class table (hardest class first) and plots
    report.html         the same page, self-contained (plots inline), per-class table sortable
    report.json         everything (comparison, per-run reports, bootstrap intervals, diagnostics)
    comparison.csv      one row per (method, metric): mean, std over seeds, difference, t-test
    runs.csv            one row per run: every table metric (and bootstrap bounds)
    per_class.csv       one row per class: tier, ranking accuracy, each method's mean accuracy
    diagnostics/<run>.csv   per-class statistics (||mu_k||^2, s_k, a_k, gamma_k, margins, accuracy)
    plots/*.png, *.svg  sorted accuracy, accuracy change, tier bars, statistic vs accuracy, evolution

report.json is strict JSON: undefined values (NaN: a class without samples, a test with too few
seeds) are written as ``null``. Every file is written atomically; ``report.md`` is written last.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mr2.checks import is_int, is_number
from mr2.io import atomic_write_json, atomic_write_text
from mr2.report.bootstrap import MAX_RESAMPLES, NUM_RESAMPLES_TOO_LARGE
from mr2.report.comparison import Comparison, compare_runs
from mr2.report.diagnostics import (
    CLASS_STATISTICS,
    ClassDiagnostics,
    TrainingEvolution,
    training_evolution,
)
from mr2.report.exceptions import ReportError
from mr2.report.html import report_html
from mr2.report.markdown import PlotFile, report_markdown
from mr2.report.run_dir import RunRecord
from mr2.report.serialization import json_safe
from mr2.report.settings import ReportSettings
from mr2.report.tables import comparison_csv, per_class_csv, runs_csv

__all__ = ["ReportOutput", "ReportSettings", "write_report"]

_LABELS = dict(CLASS_STATISTICS)


@dataclass
class ReportOutput:
    """What :func:`write_report` produced.

    Attributes:
        comparison: the comparison of the runs.
        markdown: the text of report.md.
        files: every file written, relative to the output directory.
    """

    comparison: Comparison
    markdown: str
    files: list[Path] = field(default_factory=list)

    def per_class_frame(self, *, runs: bool = False) -> Any:
        """The per-class figures as a pandas DataFrame, one row per class (needs pandas:
        ``pip install 'mr2[pandas]'``); see :func:`mr2.report.frame.per_class_frame`."""
        return self.comparison.per_class_frame(runs=runs)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "run"


SEED_INVALID = "the bootstrap seed (--seed) must be a non-negative integer, got {value!r}"
BOOTSTRAP_INVALID = (
    f"the bootstrap resamples (--bootstrap) must be an integer from 0 (no intervals) to {MAX_RESAMPLES}, "
    "got {value!r}"
)
ALPHA_INVALID = "the significance level (--alpha) must be a number in (0, 1), got {value!r}"


def check_settings(settings: ReportSettings) -> None:
    """Refuse settings the report cannot honour, before any work: a seed numpy refuses, a negative or
    huge resample count, a significance level outside (0, 1).

    Raises:
        ReportError: naming the setting and its flag.
    """
    if not is_int(settings.seed) or settings.seed < 0:
        raise ReportError(SEED_INVALID.format(value=settings.seed))
    resamples = settings.bootstrap_resamples
    if not is_int(resamples) or resamples < 0:
        raise ReportError(BOOTSTRAP_INVALID.format(value=resamples))
    if resamples > MAX_RESAMPLES:
        raise ReportError(NUM_RESAMPLES_TOO_LARGE.format(value=resamples, limit=MAX_RESAMPLES))
    alpha = settings.alpha
    if not is_number(alpha) or not 0.0 < float(alpha) < 1.0:
        raise ReportError(ALPHA_INVALID.format(value=alpha))


def write_report(
    runs: Sequence[RunRecord],
    out_dir: str | Path,
    settings: ReportSettings | None = None,
    **overrides: Any,
) -> ReportOutput:
    """Compare ``runs`` and write the report directory ``out_dir`` (see the module docstring).

    Args:
        runs: the runs (from run directories or predictions files).
        out_dir: the report directory.
        settings: the options (default: :class:`ReportSettings`'s defaults).
        **overrides: fields of :class:`ReportSettings` replacing those of ``settings``
            (``write_report(runs, out, bootstrap_resamples=0, plots=False)``).
    """
    settings = dataclasses.replace(settings or ReportSettings(), **overrides)
    check_settings(settings)
    out = Path(out_dir)
    comparison = compare_runs(runs, **settings.comparison_options())
    files: list[Path] = []

    def text(name: str, content: str) -> None:
        atomic_write_text(out / name, content)
        files.append(Path(name))

    text("comparison.csv", comparison_csv(comparison))
    text("runs.csv", runs_csv(comparison))
    text("per_class.csv", per_class_csv(comparison))

    diagnostics: dict[str, list[ClassDiagnostics]] = {}
    evolutions: dict[str, TrainingEvolution] = {}
    for summary in comparison.methods:
        for run, report in zip(summary.runs, summary.reports, strict=True):
            item = ClassDiagnostics.from_run(run)
            diagnostics.setdefault(summary.method, []).append(item)
            if item.statistics:
                text(f"diagnostics/{_slug(run.name)}.csv", item.to_csv())
            evolution = training_evolution(run.metrics, report.by_class, comparison.tiers)
            if evolution is not None:
                evolutions[run.name] = evolution

    plots: list[PlotFile] = []
    if settings.plots:
        plots = _write_plots(comparison, diagnostics, evolutions, out)
        files.extend(path for plot in plots for path in (plot.png, plot.svg))

    report_json: dict[str, Any] = comparison.to_dict()
    report_json["diagnostics"] = {
        item.run_name: item.to_dict() for items in diagnostics.values() for item in items
    }
    report_json["training_evolution"] = {name: e.to_dict() for name, e in evolutions.items()}
    report_json = json_safe(report_json)
    atomic_write_json(out / "report.json", report_json)
    files.append(Path("report.json"))

    if settings.html:
        text(
            "report.html",
            report_html(comparison, diagnostics, plots, out, confidence=settings.confidence),
        )
    markdown = report_markdown(comparison, diagnostics, plots, confidence=settings.confidence)
    text("report.md", markdown)
    return ReportOutput(comparison=comparison, markdown=markdown, files=files)


def _write_plots(
    comparison: Comparison,
    diagnostics: dict[str, list[ClassDiagnostics]],
    evolutions: dict[str, TrainingEvolution],
    out: Path,
) -> list[PlotFile]:
    from mr2.report import plots

    plot_dir = out / "plots"
    written: list[PlotFile] = []

    def record(paths: list[Path], caption: str) -> None:
        png, svg = (p.relative_to(out) for p in paths)
        written.append(PlotFile(caption, png, svg))

    first = comparison.methods[0].runs[0]
    class_names = first.class_names
    curves = {s.method: s.per_class_mean for s in comparison.methods}
    record(
        plots.plot_sorted_accuracy(curves, plot_dir / "sorted_accuracy"),
        "Sorted per-class accuracy (mean over seeds)",
    )
    reference = comparison.methods[0]
    others = {s.method: s.per_class_mean for s in comparison.methods[1:]}
    if others:
        record(
            plots.plot_accuracy_change(
                comparison.tiers.reference_accuracy,
                others,
                plot_dir / "accuracy_change",
                reference_name=reference.method,
                tiers=comparison.tiers,
                class_names=class_names,
            ),
            f"Per-class accuracy change vs {reference.method}",
        )
    tier_keys = [f"tier:{name}" for name in comparison.tiers.names]
    record(
        plots.plot_tier_bars(
            {s.method: np.array([s.mean[k] for k in tier_keys]) for s in comparison.methods},
            {s.method: np.array([s.std[k] for k in tier_keys]) for s in comparison.methods},
            comparison.tiers.names,
            plot_dir / "tier_bars",
        ),
        "Tier accuracy, mean ± std over seeds",
    )
    for items in diagnostics.values():
        # One run per method (the lowest seed) keeps the number of figures small.
        item = items[0]
        slug = _slug(item.run_name)
        for key in ("temperatures", "spread", "margin_mean"):
            if key in item.statistics:
                record(
                    plots.plot_statistic_vs_accuracy(
                        item.statistics[key],
                        item.accuracy,
                        plot_dir / f"{slug}_{key}_vs_accuracy",
                        statistic_label=_LABELS[key],
                        title=item.run_name,
                        class_names=item.class_names,
                    ),
                    f"{_LABELS[key]} vs class accuracy ({item.run_name})",
                )
        evolution = evolutions.get(item.run_name)
        if evolution is not None:
            for key in ("temperatures", "spread"):
                if key in evolution.series:
                    record(
                        plots.plot_training_evolution(
                            evolution,
                            plot_dir / f"{slug}_{key}_evolution",
                            key=key,
                            label=_LABELS[key],
                        ),
                        f"{_LABELS[key]} during training ({item.run_name})",
                    )
    return written
