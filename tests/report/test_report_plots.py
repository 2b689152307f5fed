"""The plots are written as non-empty PNG and SVG files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mr2.report import plots
from mr2.report.diagnostics import training_evolution
from mr2.report.exceptions import ReportError
from mr2.report.tiers import TierSplit

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_written(paths: list[Path], stem: Path) -> None:
    assert paths == [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg")]
    png, svg = (p.read_bytes() for p in paths)
    assert png.startswith(PNG_SIGNATURE) and len(png) > 5000
    assert b"<svg" in svg[:1000] and len(svg) > 5000
    # Nothing left behind by the atomic writes.
    assert sorted(p.name for p in stem.parent.iterdir() if p.name.startswith(".")) == []


def test_sorted_accuracy(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    curves = {"erm": rng.uniform(0, 1, 50), "mr2": np.append(rng.uniform(0, 1, 49), np.nan)}
    stem = tmp_path / "plots" / "sorted"
    check_written(plots.plot_sorted_accuracy(curves, stem), stem)


def test_accuracy_change_with_tiers(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    reference = rng.uniform(0, 1, 30)
    tiers = TierSplit.from_accuracy(reference, 3)
    stem = tmp_path / "change"
    paths = plots.plot_accuracy_change(
        reference,
        {"mr2": reference + rng.normal(0, 0.05, 30), "jtt": reference + 0.01},
        stem,
        reference_name="erm",
        tiers=tiers,
    )
    check_written(paths, stem)


def test_statistic_vs_accuracy(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    stem = tmp_path / "gamma"
    paths = plots.plot_statistic_vs_accuracy(
        rng.uniform(0.5, 1.5, 20), rng.uniform(0, 1, 20), stem, title="mr2-seed0"
    )
    check_written(paths, stem)


def test_tier_bars(tmp_path: Path) -> None:
    stem = tmp_path / "bars"
    paths = plots.plot_tier_bars(
        {"erm": [0.85, 0.71, 0.57], "mr2": [0.85, 0.72, 0.59]},
        {"erm": [0.01, 0.02, np.nan], "mr2": [0.01, 0.01, 0.02]},
        ("easy", "medium", "hard"),
        stem,
    )
    check_written(paths, stem)


def test_training_evolution(tmp_path: Path) -> None:
    records = [
        {"epoch": e, "temperatures": [1.0 + 0.1 * e, 1.0, 0.9 - 0.05 * e, 1.1]} for e in range(5)
    ]
    accuracy = np.array([0.9, 0.7, 0.5, 0.3])
    evolution = training_evolution(records, accuracy, TierSplit.from_accuracy(accuracy, 2))
    assert evolution is not None
    stem = tmp_path / "evolution"
    check_written(plots.plot_training_evolution(evolution, stem), stem)


def test_bad_curves_are_explained(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="nothing to plot"):
        plots.plot_sorted_accuracy({}, tmp_path / "x")
    with pytest.raises(ReportError, match="curve 'mr2' has"):
        plots.plot_accuracy_change([0.1, 0.2], {"mr2": [0.1]}, tmp_path / "x")


def svg_texts(path: Path) -> list[str]:
    import re

    return re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text())


def test_scatter_points_carry_their_class_names(tmp_path: Path) -> None:
    import matplotlib

    names = [f"cls-{k}" for k in range(12)]
    rng = np.random.default_rng(2)
    accuracy = rng.uniform(0.3, 1.0, 12)
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as <text>, not paths
        _, svg = plots.plot_statistic_vs_accuracy(
            rng.uniform(0.9, 1.1, 12), accuracy, tmp_path / "gamma", class_names=names
        )
        _, change = plots.plot_accuracy_change(
            accuracy, {"mr2": accuracy + 0.01}, tmp_path / "change", class_names=names
        )
        many = rng.uniform(0, 1, 100)
        _, crowded = plots.plot_statistic_vs_accuracy(many, many, tmp_path / "many")
    assert sorted(t for t in svg_texts(svg) if t.startswith("cls-")) == sorted(names)
    order = np.lexsort((np.arange(12), -accuracy))  # easy -> hard, the x axis of the change plot
    assert [t for t in svg_texts(change) if t.startswith("cls-")] == [names[k] for k in order]
    # 100 classes: only the 20 hardest and the 20 easiest are named (by id without names).
    labelled = sorted(int(t) for t in svg_texts(crowded) if t.isdigit() and int(t) < 100)
    ranked = np.argsort(many, kind="stable")
    extremes = set(ranked[:20].tolist()) | set(ranked[-20:].tolist())
    assert set(labelled) >= extremes
    assert len(set(labelled) - extremes) <= 5  # at most the x axis's tick labels (0, 20, ... 80)


def test_tier_bars_draw_no_error_bar_without_an_interval() -> None:
    # One seed (std NaN everywhere) draws bars only; a NaN std of one tier drops that tier's bar; a
    # std of 0 over seeds is a real, zero-height interval and keeps its bar.
    figure = plots.tier_bars_figure(
        {"one_seed": [0.85, 0.71, 0.57], "seeds": [0.85, 0.72, 0.59], "same": [0.8, 0.7, 0.6]},
        {"one_seed": [np.nan] * 3, "seeds": [0.01, np.nan, 0.02], "same": [0.0, 0.0, 0.0]},
        ("easy", "medium", "hard"),
    )
    bars = {container.get_label(): container for container in figure.axes[0].containers
            if hasattr(container, "patches")}
    assert set(bars) == {"one_seed", "seeds", "same"}
    assert bars["one_seed"].errorbar is None

    def drawn(label: str) -> list[tuple[float, float]]:
        errorbar = bars[label].errorbar
        assert errorbar is not None
        (lines,) = errorbar.lines[2]
        return [(float(s[0, 1]), float(s[1, 1])) for s in lines.get_segments() if len(s)]

    assert drawn("seeds") == [(84.0, 86.0), (57.0, 61.0)]
    assert drawn("same") == [(80.0, 80.0), (70.0, 70.0), (60.0, 60.0)]
