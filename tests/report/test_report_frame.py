"""Issue 45 item 8: the report's per-class figures as a pandas DataFrame (MetricFrame.by_group's shape),
checked against per-class accuracies computed by a slow loop over each run's confusion matrix, from
every way in: Comparison, ReportOutput, the report directory, report.json, one DisparityReport."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mr2.report import DisparityReport, ReportError, load_run, per_class_frame, write_report
from mr2.report.frame import NO_REPORT, NOT_A_REPORT

pd = pytest.importorskip("pandas")

K = 5
NAMES = ["ant", "bee", "cat", "dog", "eel"]
SUPPORT = [40, 50, 30, 0, 45]  # dog: no test sample


def _loop_accuracy(confusion: np.ndarray) -> list[float]:
    """Per-class accuracy the slow way: walk every cell of every row."""
    out = []
    for k in range(confusion.shape[0]):
        total = 0
        for j in range(confusion.shape[1]):
            total += int(confusion[k, j])
        out.append(math.nan if total == 0 else int(confusion[k, k]) / total)
    return out


def _loop_mean(rows: list[list[float]]) -> list[float]:
    out = []
    for k in range(len(rows[0])):
        values = [row[k] for row in rows if not math.isnan(row[k])]
        out.append(math.fsum(values) / len(values) if values else math.nan)
    return out


@pytest.fixture
def runs(tmp_path: Path, make_run: Callable[..., Path]) -> tuple[list[Path], dict[str, dict[int, np.ndarray]]]:
    """erm, mr2 and jtt x seeds 0-2 (jtt: 0-1) on 5 classes, class 'dog' without a test sample."""
    rng = np.random.default_rng(7)
    paths, confusions = [], {}
    for method, seeds in (("erm", 3), ("mr2", 3), ("jtt", 2)):
        for seed in range(seeds):
            confusion = np.stack([rng.multinomial(n, rng.dirichlet(np.ones(K) + 4 * np.eye(K)[k]))
                                  for k, n in enumerate(SUPPORT)])
            confusions.setdefault(method, {})[seed] = confusion
            paths.append(make_run(tmp_path / "runs" / f"{method}-{seed}", method=method, seed=seed,
                                  confusion=confusion, class_names=NAMES))
    return paths, confusions


def _expected(confusions: dict[str, dict[int, np.ndarray]]) -> dict[str, list[float]]:
    columns: dict[str, list[float]] = {}
    for method, by_seed in confusions.items():
        columns[f"{method} accuracy"] = _loop_mean([_loop_accuracy(c) for c in by_seed.values()])
    for method in confusions:
        if method != "erm":
            columns[f"{method} change vs erm"] = [
                a - b for a, b in zip(columns[f"{method} accuracy"], columns["erm accuracy"], strict=True)
            ]
    for method, by_seed in confusions.items():
        for seed, confusion in by_seed.items():
            columns[f"run {method}-seed{seed} accuracy"] = _loop_accuracy(confusion)
    return columns


@pytest.mark.filterwarnings("ignore::mr2.report.MissingClassWarning")
def test_the_frame_holds_the_reports_per_class_figures(runs, tmp_path: Path) -> None:
    paths, confusions = runs
    output = write_report([load_run(p) for p in paths], tmp_path / "out", bootstrap_resamples=0, plots=False)
    frame = per_class_frame(output, runs=True)
    expected = _expected(confusions)
    assert list(frame.index) == NAMES and frame.index.name == "class"
    assert list(frame.columns) == ["support", "tier", *expected]
    assert [int(v) for v in frame["support"]] == [int(c.sum()) for c in confusions["erm"][0]]
    for column, values in expected.items():
        got = frame[column].to_numpy(dtype=np.float64)
        assert np.isnan(got[3]) and math.isnan(values[3]), column  # dog: no test sample
        keep = [0, 1, 2, 4]
        assert got[keep] == pytest.approx([values[k] for k in keep], abs=1e-15), column
    # The tiers: the report's own, by class name; the class without samples is in none.
    members = output.comparison.tiers.to_dict()["members"]
    for tier, ids in members.items():
        assert all(frame["tier"].iloc[k] == tier for k in ids)
    assert pd.isna(frame["tier"].loc["dog"])
    # The same numbers as per_class.csv (the report's own per-class file).
    csv = pd.read_csv(tmp_path / "out" / "per_class.csv")
    for method in ("erm", "mr2", "jtt"):
        assert np.allclose(frame[f"{method} accuracy"], csv[f"accuracy_{method}"], atol=0, rtol=0, equal_nan=True)
    assert frame.attrs["reference"] == "erm"
    # Every way in gives the same frame.
    by_methods = per_class_frame(output)
    assert list(by_methods.columns) == list(frame.columns[: 2 + 3 + 2])
    for other in (output.comparison, tmp_path / "out", str(tmp_path / "out" / "report.json")):
        pd.testing.assert_frame_equal(per_class_frame(other, runs=True), frame)
    pd.testing.assert_frame_equal(output.per_class_frame(), by_methods)
    pd.testing.assert_frame_equal(output.comparison.per_class_frame(runs=True), frame)


def test_runs_without_class_names_are_indexed_by_class_id(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    confusion = np.array([[30, 5, 5], [10, 20, 10], [2, 3, 35]])
    output = write_report([load_run(make_run(tmp_path / "r", method="erm", seed=0, confusion=confusion))],
                          tmp_path / "out", bootstrap_resamples=0, plots=False)
    frame = per_class_frame(output)
    assert list(frame.index) == [0, 1, 2] and list(frame.columns) == ["support", "tier", "erm accuracy"]
    assert frame["erm accuracy"].tolist() == _loop_accuracy(confusion)


def test_one_disparity_report() -> None:
    confusion = np.array([[9, 1, 0], [2, 7, 1], [4, 4, 2]])
    frame = per_class_frame(DisparityReport(confusion, class_names=["a", "b", "c"]))
    assert list(frame.columns) == ["support", "tier", "accuracy"]
    assert frame["accuracy"].tolist() == _loop_accuracy(confusion)
    assert frame["tier"].tolist() == ["easy", "medium", "hard"] and frame["support"].tolist() == [10, 10, 10]


def test_bad_sources_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ReportError) as error:
        per_class_frame(tmp_path)
    assert str(error.value) == NO_REPORT.format(path=tmp_path)
    with pytest.raises(ReportError) as error:
        per_class_frame(3)
    assert str(error.value) == NOT_A_REPORT.format(value="int")
    (tmp_path / "report.json").write_text("[1, 2]")
    with pytest.raises(ReportError, match=r"is not a report\.json written by mr2 report"):
        per_class_frame(tmp_path)


def test_without_pandas_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now fails as if not installed
    with pytest.raises(ModuleNotFoundError) as error:
        per_class_frame(DisparityReport([[9, 1], [4, 6]]))
    assert str(error.value) == "mr2.report.per_class_frame needs pandas: pip install 'mr2[pandas]'"
