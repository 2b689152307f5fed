"""studies/regimes/k_axis.py: the regime map with K as an axis keeps exactly the cells measured at both K."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from helpers import load_script

ROOT = Path(__file__).resolve().parents[2]


def _write_map(folder: Path, rows: list[tuple]) -> None:
    folder.mkdir()
    with (folder / "regime_map.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["model", "per_class", "method", "tier", "change", "ci95", "seeds"])
        writer.writerows(rows)


def test_cells_at_both_k_are_paired_and_the_figure_is_written(tmp_path):
    k_axis = load_script(ROOT / "studies" / "regimes" / "k_axis.py", "k_axis")
    _write_map(tmp_path / "k10", [("mlp", 100, "mr2", "hard", -0.5, 1.0, 5), ("mlp", 1000, "mr2", "hard", 0.2, 0.1, 5),
                                  ("cnn", 100, "supcon", "easy", 0.25, 0.5, 5)])
    _write_map(tmp_path / "k100", [("mlp", 100, "mr2", "hard", -5.0, 1.5, 5), ("cnn", 100, "supcon", "easy", 1.0, 0.4, 5),
                                   ("cnn", 300, "supcon", "easy", 2.0, 0.4, 5)])
    k_axis.main(tmp_path / "k10", tmp_path / "k100")
    with (tmp_path / "k100" / "k_axis.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["model"], r["per_class"], r["method"], r["tier"]) for r in rows] == [
        ("cnn", "100", "supcon", "easy"), ("mlp", "100", "mr2", "hard")]
    assert [float(rows[1][k]) for k in ("change_k10", "ci95_k10", "change_k100", "ci95_k100")] == [-0.5, 1.0, -5.0, 1.5]
    assert (tmp_path / "k100" / "k_axis.png").stat().st_size > 10_000


def test_no_common_cell_is_an_error(tmp_path):
    k_axis = load_script(ROOT / "studies" / "regimes" / "k_axis.py", "k_axis")
    _write_map(tmp_path / "k10", [("mlp", 1000, "mr2", "hard", 0.2, 0.1, 5)])
    _write_map(tmp_path / "k100", [("mlp", 100, "mr2", "hard", -5.0, 1.5, 5)])
    with pytest.raises(SystemExit, match="no cell is measured at both K"):
        k_axis.main(tmp_path / "k10", tmp_path / "k100")
    assert not (tmp_path / "k100" / "k_axis.csv").exists()
