"""Plots of the disparity report (matplotlib, written as PNG and SVG).

Figures are built on :class:`matplotlib.figure.Figure` directly, never through ``pyplot``, so no GUI
backend or global figure state is involved (the Agg renderer is used to write the files). Every
function takes a path stem (``out/plots/sorted_accuracy``), writes ``<stem>.png`` and
``<stem>.svg`` atomically and returns both paths.

Accuracies are plotted in percent. Per-class scatter plots name their points: each point carries its
class name (its id when the run has no names) when there are at most :data:`MAX_POINT_LABELS`
classes; with more, the ``MAX_POINT_LABELS // 2`` hardest and easiest classes are named.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from numpy.typing import ArrayLike

from mr2.io import atomic_write_bytes
from mr2.report.diagnostics import TrainingEvolution
from mr2.report.exceptions import ReportError
from mr2.report.statistics import spearman
from mr2.report.tiers import TierSplit

__all__ = [
    "plot_accuracy_change",
    "plot_sorted_accuracy",
    "plot_statistic_vs_accuracy",
    "plot_tier_bars",
    "plot_training_evolution",
    "save_figure",
    "tier_bars_figure",
]

_NO_CURVES = "nothing to plot: pass at least one curve"
_CURVE_LENGTH = "curve {name!r} has {actual} classes, expected {expected}"

_FORMATS = ("png", "svg")

#: Up to this many classes, every point of a per-class scatter plot is labelled with its class.
MAX_POINT_LABELS = 40


def _point_labels(num_classes: int, class_names: Sequence[str] | None) -> list[str]:
    if class_names is not None and len(class_names) == num_classes:
        return [str(name) for name in class_names]
    return [str(k) for k in range(num_classes)]


def _labelled_points(order_key: np.ndarray) -> np.ndarray:
    """Indices of the points to label: all of them, or the extremes of ``order_key`` (NaN last)."""
    valid = np.flatnonzero(~np.isnan(order_key))
    if valid.size <= MAX_POINT_LABELS:
        return valid
    ranked = valid[np.argsort(order_key[valid], kind="stable")]
    half = MAX_POINT_LABELS // 2
    return np.concatenate([ranked[:half], ranked[-half:]])


def save_figure(figure: Figure, stem: str | Path) -> list[Path]:
    """Write ``figure`` to ``<stem>.png`` (150 dpi) and ``<stem>.svg`` atomically; return the paths."""
    stem = Path(stem)
    paths = []
    for fmt in _FORMATS:
        buffer = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else {"Software": None}
        figure.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight", metadata=metadata)
        path = stem.with_name(f"{stem.name}.{fmt}")
        atomic_write_bytes(path, buffer.getvalue())
        paths.append(path)
    return paths


def _check_curves(curves: Mapping[str, ArrayLike], length: int | None = None) -> dict[str, np.ndarray]:
    if not curves:
        raise ReportError(_NO_CURVES)
    arrays = {name: np.asarray(values, dtype=np.float64) for name, values in curves.items()}
    expected = length if length is not None else next(iter(arrays.values())).shape[0]
    for name, values in arrays.items():
        if values.shape != (expected,):
            raise ReportError(_CURVE_LENGTH.format(name=name, actual=values.shape, expected=expected))
    return arrays


def plot_sorted_accuracy(
    curves: Mapping[str, ArrayLike], stem: str | Path, *, title: str | None = None
) -> list[Path]:
    """Per-class accuracy of each run sorted in decreasing order, overlaid (paper's Figure 1a).

    Args:
        curves: ``{label: per-class accuracy [K]}`` (fractions; NaN classes are dropped).
        stem: output path without suffix.
        title: figure title.

    Returns:
        The PNG and SVG paths.
    """
    arrays = _check_curves(curves)
    figure = Figure(figsize=(6.4, 4.0), layout="constrained")
    axes = figure.subplots()
    for label, values in arrays.items():
        ranked = np.sort(values[~np.isnan(values)])[::-1]
        axes.plot(np.arange(1, ranked.size + 1), 100 * ranked, label=label, linewidth=1.5)
    axes.set_xlabel("class rank (sorted by the run's own accuracy)")
    axes.set_ylabel("per-class accuracy (%)")
    axes.set_title(title or "Sorted per-class accuracy")
    axes.grid(alpha=0.3)
    axes.legend()
    return save_figure(figure, stem)


def _tier_boundaries(axes: Axes, tiers: TierSplit) -> None:
    edges = np.cumsum(tiers.sizes)
    starts = np.concatenate([[0], edges[:-1]])
    for edge in edges[:-1]:
        axes.axvline(edge + 0.5, color="grey", linestyle="--", linewidth=0.8)
    for start, edge, name in zip(starts, edges, tiers.names, strict=True):
        axes.text(
            (start + edge + 1) / 2,
            1.0,
            name,
            transform=axes.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
        )


def plot_accuracy_change(
    reference_accuracy: ArrayLike,
    curves: Mapping[str, ArrayLike],
    stem: str | Path,
    *,
    reference_name: str = "reference",
    tiers: TierSplit | None = None,
    class_names: Sequence[str] | None = None,
) -> list[Path]:
    """Per-class accuracy change against the reference, classes ordered by reference accuracy.

    Each method's points are ``acc_k - ref_k`` (percentage points), classes sorted by the reference
    accuracy (descending, ties by id: the tier ranking); with ``tiers``, the tier boundaries and each
    tier's mean change are drawn.

    Args:
        reference_accuracy: the reference's per-class accuracy [K] (the ranking).
        curves: ``{method: per-class accuracy [K]}``.
        stem: output path without suffix.
        reference_name: the reference's label.
        tiers: the tier split to draw (ranked on ``reference_accuracy``), or None.
        class_names: names of the classes; with at most :data:`MAX_POINT_LABELS` classes they
            label the x axis (each column of points is one class).
    """
    reference = np.asarray(reference_accuracy, dtype=np.float64)
    arrays = _check_curves(curves, reference.shape[0])
    order = np.lexsort((np.arange(reference.shape[0]), -reference))
    x = np.arange(1, reference.shape[0] + 1)
    figure = Figure(figsize=(7.0, 4.0), layout="constrained")
    axes = figure.subplots()
    axes.axhline(0.0, color="black", linewidth=0.8)
    colors = [f"C{i}" for i in range(len(arrays))]
    for color, (label, values) in zip(colors, arrays.items(), strict=True):
        change = 100 * (values - reference)[order]
        axes.plot(x, change, ".", color=color, alpha=0.6, markersize=4, label=label)
        if tiers is not None:
            tier_change = 100 * (tiers.accuracy(values) - tiers.accuracy(reference))
            edges = np.cumsum(tiers.sizes)
            starts = np.concatenate([[0], edges[:-1]])
            axes.hlines(tier_change, starts + 0.5, edges + 0.5, colors=color, linewidth=2.0)
    if tiers is not None:
        _tier_boundaries(axes, tiers)
    if reference.shape[0] <= MAX_POINT_LABELS:
        labels = _point_labels(reference.shape[0], class_names)
        axes.set_xticks(x, [labels[k] for k in order], rotation=90, fontsize=7)
    axes.set_xlabel(f"class by {reference_name} accuracy (easy → hard)")
    axes.set_ylabel(f"accuracy change vs {reference_name} (points)")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower left")
    return save_figure(figure, stem)


def plot_statistic_vs_accuracy(
    statistic: ArrayLike,
    accuracy: ArrayLike,
    stem: str | Path,
    *,
    statistic_label: str = "gamma_k",
    title: str | None = None,
    class_names: Sequence[str] | None = None,
) -> list[Path]:
    """Scatter of a per-class statistic against class accuracy, with Spearman's rho vs the error.

    A positive rho(statistic, error) means the harder classes have the larger statistic. Each point
    is labelled with its class name (see the module docstring for many classes).
    """
    stat = np.asarray(statistic, dtype=np.float64)
    acc = np.asarray(accuracy, dtype=np.float64)
    correlation = spearman(stat, 1.0 - acc)
    figure = Figure(figsize=(5.0, 4.0), layout="constrained")
    axes = figure.subplots()
    axes.scatter(100 * acc, stat, s=12, alpha=0.7)
    labels = _point_labels(acc.shape[0], class_names)
    for k in _labelled_points(np.where(np.isnan(stat), np.nan, acc)):
        axes.annotate(
            labels[k],
            (100 * acc[k], stat[k]),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=7,
            alpha=0.8,
        )
    axes.set_xlabel("class accuracy (%)")
    axes.set_ylabel(statistic_label)
    rho = "n/a" if math.isnan(correlation.rho) else f"{correlation.rho:+.2f}"
    p = "n/a" if math.isnan(correlation.pvalue) else f"{correlation.pvalue:.2g}"
    heading = f"Spearman rho({statistic_label}, error) = {rho} (p = {p}, {correlation.n} classes)"
    axes.set_title(f"{title}\n{heading}" if title else heading, fontsize=10)
    axes.grid(alpha=0.3)
    return save_figure(figure, stem)


def tier_bars_figure(
    means: Mapping[str, ArrayLike],
    stds: Mapping[str, ArrayLike],
    tier_names: Sequence[str],
    *,
    title: str | None = None,
) -> Figure:
    """The figure of :func:`plot_tier_bars`: a NaN std (one seed) draws no error bar, a method with
    no std at all none of them."""
    arrays = _check_curves(means, len(tier_names))
    spreads = _check_curves({m: stds[m] for m in arrays}, len(tier_names))
    figure = Figure(figsize=(7.6, 4.0), layout="constrained")
    axes = figure.subplots()
    width = 0.8 / len(arrays)
    positions = np.arange(len(tier_names))
    for index, (label, values) in enumerate(arrays.items()):
        spread = spreads[label]
        # NaN entries draw nothing (matplotlib drops them); never a zero-height bar for "no interval".
        error = None if np.isnan(spread).all() else 100 * spread
        axes.bar(
            positions + (index - (len(arrays) - 1) / 2) * width,
            100 * values,
            width,
            yerr=error,
            capsize=3,
            label=label,
        )
    axes.set_xticks(positions, list(tier_names))
    axes.set_ylabel("tier accuracy (%), mean ± std over seeds")
    axes.set_title(title or "Accuracy per tier")
    axes.grid(alpha=0.3, axis="y")
    # Bars start at 0 (honest heights) and fill the axes: the legend goes to the right, outside.
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return figure


def plot_tier_bars(
    means: Mapping[str, ArrayLike],
    stds: Mapping[str, ArrayLike],
    tier_names: Sequence[str],
    stem: str | Path,
    *,
    title: str | None = None,
) -> list[Path]:
    """Grouped bars of tier accuracy per method with error bars over seeds (no bar for one seed).

    Args:
        means: ``{method: tier accuracies [T]}`` (fractions).
        stds: ``{method: std over seeds [T]}`` (NaN: no error bar).
        tier_names: the T tier names.
        stem: output path without suffix.
        title: figure title.
    """
    return save_figure(tier_bars_figure(means, stds, tier_names, title=title), stem)


def plot_training_evolution(
    evolution: TrainingEvolution,
    stem: str | Path,
    *,
    key: str = "temperatures",
    label: str = "gamma_k",
) -> list[Path]:
    """Evolution of a per-class statistic during training: its mean per tier over epochs, and its
    Spearman correlation with the final class error over epochs."""
    figure = Figure(figsize=(9.0, 3.6), layout="constrained")
    left, right = figure.subplots(1, 2)
    series = evolution.series[key]
    if key in evolution.tier_means:
        for index, name in enumerate(evolution.tier_names):
            left.plot(evolution.epochs, evolution.tier_means[key][:, index], label=name)
        left.legend()
        left.set_title(f"{label}: mean over each tier's classes", fontsize=10)
    else:
        present = ~np.isnan(series)
        counts = present.sum(axis=1).astype(np.float64)
        sums = np.where(present, series, 0.0).sum(axis=1)
        left.plot(
            evolution.epochs,
            np.divide(sums, counts, out=np.full(sums.shape, np.nan), where=counts > 0),
        )
        left.set_title(f"{label}: mean over classes", fontsize=10)
    left.set_xlabel("epoch")
    left.set_ylabel(label)
    left.grid(alpha=0.3)
    right.plot(evolution.epochs, evolution.spearman_vs_final_error[key])
    right.axhline(0.0, color="black", linewidth=0.8)
    right.set_ylim(-1.05, 1.05)
    right.set_xlabel("epoch")
    right.set_ylabel("Spearman rho vs final error")
    right.set_title(f"rank correlation of {label} with the final class error", fontsize=10)
    right.grid(alpha=0.3)
    for axes in (left, right):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    return save_figure(figure, stem)
