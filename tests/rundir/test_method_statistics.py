"""Every method's per-class statistics reach the report under their own names: HBR's and center
loss's, written to final.json by the real engine, are read by ``load_run`` and rendered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import base_config, write_spread_npz
from mr2.config import config_from_dict
from mr2.engine import evaluate_run, train
from mr2.report.run_dir import load_run
from mr2.report.settings import ReportSettings
from mr2.report.writer import write_report
from mr2.rundir import RunDirectory

EXPECTED = {"hbr": ("class_hardness", "resampled_count"), "center_loss": ("center_sq_norm",)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    npz = write_spread_npz(out / "spread.npz")
    paths = {}
    for method in EXPECTED:
        config = base_config(npz, out, name=method, method={"name": method}, optim={"epochs": 2})
        train(config_from_dict(config), quiet=True)
        paths[method] = out / method
    return paths


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_load_run_keeps_the_methods_statistics(runs: dict[str, Path], method: str) -> None:
    written = json.loads((runs[method] / "final.json").read_text())["class_statistics"]
    assert tuple(written) == EXPECTED[method]
    statistics = load_run(runs[method]).class_statistics
    assert statistics is not None
    assert list(statistics) == list(EXPECTED[method])
    for key, values in written.items():
        assert statistics[key].tolist() == [float(v) for v in values]
        assert len(values) == 4


def test_the_report_renders_the_methods_statistics(runs: dict[str, Path], tmp_path: Path) -> None:
    records = [load_run(runs["center_loss"]), load_run(runs["hbr"])]
    settings = ReportSettings(bootstrap_resamples=0, plots=False, html=True)
    write_report(records, tmp_path / "report", settings)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    for method, keys in EXPECTED.items():
        per_class = report["diagnostics"][method]["per_class"]
        correlations = report["diagnostics"][method]["spearman_vs_error"]
        csv_header = (tmp_path / "report" / "diagnostics" / f"{method}.csv").read_text().splitlines()[0]
        for key in keys:
            assert per_class[key] == pytest.approx(records[method == "hbr"].class_statistics[key].tolist())
            assert key in correlations
            assert key in csv_header.split(",")
    markdown = (tmp_path / "report" / "report.md").read_text()
    html = (tmp_path / "report" / "report.html").read_text()
    table = markdown.split("## Diagnostics")[1].split("##")[0]
    header = next(line for line in table.splitlines() if line.startswith("| method"))
    for key in ("class_hardness", "resampled_count", "center_sq_norm"):
        assert key.replace("_", "\\_") in header or key in header
        assert key in html


@pytest.mark.parametrize("method", sorted(EXPECTED))
def test_the_engines_final_json_is_the_records_text(runs: dict[str, Path], method: str) -> None:
    run = RunDirectory(runs[method])
    assert json.dumps(run.read_final().to_dict(), indent=2) + "\n" == run.final.read_text()


def test_eval_writes_the_record_with_its_checkpoint(runs: dict[str, Path]) -> None:
    result = evaluate_run(runs["center_loss"], "test")
    written = json.loads(RunDirectory(runs["center_loss"]).eval_file("test").read_text())
    final = json.loads((runs["center_loss"] / "final.json").read_text())
    assert written == result
    assert list(written) == [*final, "checkpoint"] and written["checkpoint"] == "last.pt"
    assert written["confusion_matrix"] == final["confusion_matrix"]
