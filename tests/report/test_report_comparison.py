"""Comparison of methods over seeds (aggregation) and its tables (rendering)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from mr2.report import comparison as comparison_module
from mr2.report.comparison import compare_runs
from mr2.report.exceptions import ReportError
from mr2.report.run_dir import RunRecord, load_runs
from mr2.report.tables import comparison_csv, comparison_markdown, per_class_csv, runs_csv


def _run(method: str, seed: int, accuracy: list[float], per_class: int = 10) -> RunRecord:
    correct = np.round(np.array(accuracy) * per_class).astype(int)
    k = len(accuracy)
    matrix = np.zeros((k, k), dtype=np.int64)
    matrix[np.arange(k), np.arange(k)] = correct
    matrix[np.arange(k), (np.arange(k) + 1) % k] = per_class - correct
    return RunRecord(name=f"{method}-{seed}", method=method, seed=seed, confusion=matrix)


def test_tiers_ranked_on_reference_mean_and_fixed() -> None:
    runs = [
        _run("erm", 0, [0.9, 0.5, 0.1, 0.7, 0.3, 0.6]),
        _run("erm", 1, [0.9, 0.6, 0.2, 0.7, 0.3, 0.4]),
        _run("mr2", 0, [0.1, 0.5, 0.9, 0.7, 0.3, 0.6]),
        _run("mr2", 1, [0.2, 0.5, 0.9, 0.7, 0.4, 0.6]),
    ]
    result = compare_runs(runs)
    # Reference mean per class: [0.9, 0.55, 0.15, 0.7, 0.3, 0.5] -> easy {0, 3}, medium {1, 5}, hard {4, 2}.
    assert result.tiers.assignment.tolist() == [0, 1, 2, 0, 2, 1]
    mr2 = result.method("mr2")
    assert mr2.values["tier:hard"].tolist() == pytest.approx([(0.9 + 0.3) / 2, (0.9 + 0.4) / 2])
    assert mr2.values["tier:easy"].tolist() == pytest.approx([0.4, 0.45])
    assert mr2.mean["tier:hard"] == pytest.approx(0.625)
    assert mr2.std["tier:hard"] == pytest.approx(np.std([0.6, 0.65], ddof=1))
    erm = result.method("erm")
    assert mr2.difference["tier:hard"] == pytest.approx(0.625 - erm.mean["tier:hard"])
    expected = stats.ttest_rel(mr2.values["overall"], erm.values["overall"])
    assert mr2.paired["overall"].pvalue == pytest.approx(expected.pvalue)
    assert result.reference == "erm" and result.methods[0].method == "erm"
    assert "reference method erm (test split" in result.tiers.ranked_by


def test_reference_option_and_unknown_reference() -> None:
    runs = [_run("erm", 0, [0.9, 0.5, 0.1]), _run("mr2", 0, [0.8, 0.6, 0.2])]
    assert compare_runs(runs, reference="mr2").methods[0].method == "mr2"
    with pytest.raises(ReportError) as info:
        compare_runs(runs, reference="jtt")
    assert str(info.value) == comparison_module.REFERENCE_UNKNOWN.format(
        name="jtt", methods="erm, mr2"
    )


def test_validation_tier_source_needs_validation() -> None:
    runs = [_run("erm", 0, [0.9, 0.5, 0.1]), _run("mr2", 0, [0.8, 0.6, 0.2])]
    with pytest.raises(ReportError, match="tier_source='validation' needs"):
        compare_runs(runs, tier_source="validation")
    runs[0].validation_confusion = np.array([[1, 1, 0], [0, 2, 0], [0, 0, 2]])
    result = compare_runs(runs, tier_source="validation")
    assert result.tiers.assignment.tolist() == [2, 0, 1]
    assert "validation split" in result.tiers.ranked_by


def test_outputs_from_run_directories(comparison_runs: list[Path]) -> None:
    result = compare_runs(load_runs(comparison_runs), bootstrap_resamples=50)
    markdown = comparison_markdown(result)
    assert "| method | seeds | overall | easy | medium | hard | worst class | bottom 10% | std |" in markdown
    assert "| erm | 3 |" in markdown and "| mr2 | 3 |" in markdown
    assert "Difference to erm" in markdown and "sign test" in markdown
    rows = list(csv.DictReader(io.StringIO(comparison_csv(result))))
    assert len(rows) == 2 * 7
    overall = next(r for r in rows if r["method"] == "mr2" and r["metric"] == "overall")
    assert float(overall["mean"]) == pytest.approx(result.method("mr2").mean["overall"])
    assert int(overall["pairs"]) == 3
    runs_rows = list(csv.DictReader(io.StringIO(runs_csv(result))))
    assert len(runs_rows) == 6 and "overall_low" in runs_rows[0]
    per_class = list(csv.DictReader(io.StringIO(per_class_csv(result))))
    assert len(per_class) == 9 and per_class[0]["tier"] == "easy"
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["reference"] == "erm"
    assert set(data["runs"]) == {f"{m}-seed{s}" for m in ("erm", "mr2") for s in range(3)}
    assert data["methods"]["erm"]["sign_test"] is None
