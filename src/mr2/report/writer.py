"""Write the disparity report of several runs to a directory (what ``mr2 report`` produces).

Layout of ``out/``::

    report.md           the tables, diagnostics and plots in one readable page
    report.json         everything (comparison, per-run reports, bootstrap intervals, diagnostics)
    comparison.csv      one row per (method, metric): mean, std over seeds, difference, t-test
    runs.csv            one row per run: every table metric (and bootstrap bounds)
    per_class.csv       one row per class: tier, ranking accuracy, each method's mean accuracy
    diagnostics/<run>.csv   per-class statistics (||mu_k||^2, s_k, a_k, gamma_k, margins, accuracy)
    plots/*.png, *.svg  sorted accuracy, accuracy change, tier bars, statistic vs accuracy, evolution

Every file is written atomically; ``report.md`` is written last.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mr2.io import atomic_write_json, atomic_write_text
from mr2.report.comparison import Comparison, compare_runs, mean_std
from mr2.report.diagnostics import (
    CLASS_STATISTICS,
    ClassDiagnostics,
    RankCorrelation,
    TrainingEvolution,
    training_evolution,
)
from mr2.report.disparity import json_safe
from mr2.report.run_dir import RunRecord

__all__ = ["ReportOutput", "write_report"]

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


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "run"


def _rho_cell(values: list[RankCorrelation]) -> str:
    mean, std, n = mean_std([c.rho for c in values])
    if n == 0:
        return "n/a"
    text = f"{mean:+.2f}"
    if n > 1:
        text += f" ± {std:.2f}"
    return text + f" ({n})"


def _diagnostics_markdown(diagnostics: dict[str, list[ClassDiagnostics]]) -> list[str]:
    present = {key for items in diagnostics.values() for item in items for key in item.statistics}
    keys = [key for key, _ in CLASS_STATISTICS if key in present]
    if not keys:
        return []
    lines = [
        "## Diagnostics: which classes get the larger margins?",
        "",
        "Spearman rank correlation between each per-class quantity and the class error "
        "(1 - accuracy), mean ± std over the method's runs (number of runs). A positive value for "
        "gamma_k means the harder classes received the larger temperatures, as MR2 intends; a "
        "negative one means the allocation is inverted.",
        "",
        "| method | " + " | ".join(_LABELS[k].replace("|", "\\|") for k in keys) + " |",
        "|---|" + "---:|" * len(keys),
    ]
    for method, items in diagnostics.items():
        if not any(item.statistics for item in items):
            continue
        cells = []
        for key in keys:
            values = [d.correlations()[key] for d in items if key in d.statistics]
            cells.append(_rho_cell(values))
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _bootstrap_markdown(comparison: Comparison, confidence: float) -> list[str]:
    if not comparison.bootstrap:
        return []
    headers = [header for _, header in comparison.metrics]
    lines = [
        f"## Per-run values with {100 * confidence:g}% bootstrap intervals (test samples resampled "
        "within classes; %)",
        "",
        "| run | method | seed | " + " | ".join(headers) + " |",
        "|---|---|---:|" + "---:|" * len(headers),
    ]
    for summary in comparison.methods:
        for run in summary.runs:
            cells = []
            for key, _ in comparison.metrics:
                ci = comparison.bootstrap[run.name][key]
                if math.isnan(ci.estimate):
                    cells.append("n/a")
                else:
                    cells.append(
                        f"{100 * ci.estimate:.2f} [{100 * ci.low:.2f}, {100 * ci.high:.2f}]"
                    )
            seed = "" if run.seed is None else str(run.seed)
            lines.append(f"| {run.name} | {run.method} | {seed} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def write_report(
    runs: Sequence[RunRecord],
    out_dir: str | Path,
    *,
    reference: str | None = None,
    num_tiers: int | None = None,
    tier_source: str = "test",
    bottom_fraction: float = 0.1,
    alpha: float = 0.05,
    bootstrap_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    plots: bool = True,
) -> ReportOutput:
    """Compare ``runs`` and write the report directory ``out_dir`` (see the module docstring).

    Arguments are those of :func:`mr2.report.comparison.compare_runs`; ``plots=False`` skips the
    figures (and the matplotlib import).
    """
    out = Path(out_dir)
    comparison = compare_runs(
        runs,
        reference=reference,
        num_tiers=num_tiers,
        tier_source=tier_source,
        bottom_fraction=bottom_fraction,
        alpha=alpha,
        bootstrap_resamples=bootstrap_resamples,
        confidence=confidence,
        seed=seed,
    )
    files: list[Path] = []

    def text(name: str, content: str) -> None:
        atomic_write_text(out / name, content)
        files.append(Path(name))

    text("comparison.csv", comparison.to_csv())
    text("runs.csv", comparison.runs_csv())
    text("per_class.csv", comparison.per_class_csv())

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

    plot_lines: list[str] = []
    if plots:
        plot_lines = _write_plots(comparison, diagnostics, evolutions, out, files)

    report_json: dict[str, Any] = comparison.to_dict()
    report_json["diagnostics"] = {
        item.run_name: item.to_dict() for items in diagnostics.values() for item in items
    }
    report_json["training_evolution"] = {name: e.to_dict() for name, e in evolutions.items()}
    atomic_write_json(out / "report.json", json_safe(report_json))
    files.append(Path("report.json"))

    run_lines = [
        "| run | method | seed | directory |",
        "|---|---|---:|---|",
        *(
            f"| {run.name} | {run.method} | {'' if run.seed is None else run.seed} | "
            f"{'' if run.path is None else run.path} |"
            for summary in comparison.methods
            for run in summary.runs
        ),
    ]
    first = comparison.methods[0].runs[0]
    dataset = first.dataset or "unknown data set"
    missing = np.flatnonzero(first.support == 0)
    missing_line = (
        [
            f"Classes without a {first.split} sample (NaN, left out of every figure): "
            + ", ".join(str(int(k)) for k in missing)
            + ".",
            "",
        ]
        if missing.size
        else []
    )
    markdown_lines = [
        "# Class-wise disparity report",
        "",
        f"{len(runs)} runs on {dataset} ({first.num_classes} classes, {first.split} split, "
        f"{int(first.support.sum())} samples).",
        "",
        *missing_line,
        *run_lines,
        "",
        "## Comparison",
        "",
        comparison.to_markdown(),
        "Tier accuracy is the mean of the per-class accuracies of the tier's classes. Tiers come "
        "from the reference method and are the same for every row. Ranking and evaluating on the "
        "same test split favours the other methods slightly on the hard tier (regression to the "
        "mean); `--tier-source validation` ranks on the validation split instead.",
        "",
        *_bootstrap_markdown(comparison, confidence),
        *_diagnostics_markdown(diagnostics),
        *plot_lines,
        "Files: comparison.csv, runs.csv, per_class.csv and report.json hold the same figures as "
        "fractions (not percent).",
        "",
    ]
    markdown = "\n".join(markdown_lines)
    text("report.md", markdown)
    return ReportOutput(comparison=comparison, markdown=markdown, files=files)


def _write_plots(
    comparison: Comparison,
    diagnostics: dict[str, list[ClassDiagnostics]],
    evolutions: dict[str, TrainingEvolution],
    out: Path,
    files: list[Path],
) -> list[str]:
    from mr2.report import plots

    plot_dir = out / "plots"
    lines = ["## Plots", ""]

    def record(paths: list[Path], caption: str) -> None:
        files.extend(p.relative_to(out) for p in paths)
        lines.extend([f"![{caption}]({paths[0].relative_to(out).as_posix()})", ""])

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
    return lines
