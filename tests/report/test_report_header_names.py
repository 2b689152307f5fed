"""The report's header names predictions files so a reader can tell them apart (issue 39: a tune's
trials are all called test.npz, and the header read "test.npz, test.npz, ...")."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mr2.report.comparison import compare_runs
from mr2.report.markdown import overview_line
from mr2.report.run_dir import RunRecord


def _run(method: str, seed: int, path: Path) -> RunRecord:
    confusion = np.array([[8, 2], [3, 7]], dtype=np.int64)
    return RunRecord(name=f"{method}@{seed}", method=method, confusion=confusion, seed=seed, path=path)


def test_files_of_the_same_name_are_named_by_their_distinct_paths(tmp_path):
    trials = tmp_path / "trials" / "confirmation"
    runs = [_run("erm", 3, trials / "erm" / "seed=3" / "test.npz"), _run("m", 3, trials / "m" / "seed=3" / "test.npz")]
    line = overview_line(compare_runs(runs, reference="erm"))
    assert "predictions files: erm/seed=3/test.npz, m/seed=3/test.npz" in line


def test_distinct_file_names_stay_short(tmp_path):
    runs = [_run("erm", 0, tmp_path / "a.npz"), _run("m", 0, tmp_path / "b" / "c.csv")]
    assert "predictions files: a.npz, c.csv" in overview_line(compare_runs(runs, reference="erm"))
