"""`mr2 report` on tiny run directories written by the tests."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mr2.cli import report as report_cli
from mr2.cli.main import main as cli_main
from mr2.rundir.layout import RUN_DIR_NOT_FOUND


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mr2 report")
    report_cli.add_arguments(parser)
    return report_cli.run(parser.parse_args(argv))


def test_full_report(comparison_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main([*map(str, comparison_runs), "--out", str(out), "--bootstrap", "20"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "| method | seeds | overall | easy | medium | hard |" in captured.out
    assert f"Report written to {out}/report.md" in captured.out
    for name in ("report.md", "report.html", "report.json", "comparison.csv", "runs.csv", "per_class.csv"):
        assert (out / name).stat().st_size > 0, name
    for stem in ("sorted_accuracy", "accuracy_change", "tier_bars", "mr2-seed0_temperatures_vs_accuracy",
                 "mr2-seed0_spread_vs_accuracy", "mr2-seed0_temperatures_evolution"):
        for suffix in ("png", "svg"):
            assert (out / "plots" / f"{stem}.{suffix}").stat().st_size > 1000, stem
    assert sorted(p.name for p in (out / "diagnostics").iterdir()) == [
        "mr2-seed0.csv", "mr2-seed1.csv", "mr2-seed2.csv"
    ]
    markdown = (out / "report.md").read_text()
    assert "Reference method: **erm**" in markdown
    assert "bootstrap intervals" in markdown and "Spearman rank correlation" in markdown
    assert "![Sorted per-class accuracy" in markdown
    # Strict JSON: undefined values are null, never a NaN token.
    data = json.loads((out / "report.json").read_text(), parse_constant=lambda token: pytest.fail(token))
    assert data["methods"]["erm"]["paired_t_test"] == {}
    assert data["runs"]["erm-seed0"]["report"]["summary"]["overall"] is not None
    # report.html stands alone: every image inline, no script, style or link fetched from elsewhere.
    page = (out / "report.html").read_text()
    assert re.findall(r'<img [^>]*src="([^":]*):', page) == ["data"] * page.count("<img ")
    assert page.count("<img ") == len(list((out / "plots").glob("*.png")))
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert data["diagnostics"]["mr2-seed0"]["spearman_vs_error"]["spread"]["rho"] > 0.5
    assert data["training_evolution"]["mr2-seed1"]["epochs"] == [0, 1, 2, 3]
    assert data["runs"]["mr2-seed0"]["bootstrap"]["overall"]["low"] is not None


def test_reference_and_options(comparison_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(
        [*map(str, comparison_runs), "--out", str(out), "--reference", "mr2", "--tiers", "2",
         "--tier-source", "validation", "--bootstrap", "0", "--no-plots"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Reference method: **mr2**" in captured.out
    assert "| method | seeds | overall | easy | hard |" in captured.out
    assert not (out / "plots").exists()
    assert "validation split" in (out / "report.md").read_text()
    assert "<img" not in (out / "report.html").read_text()
    main([*map(str, comparison_runs), "--out", str(tmp_path / "plain"), "--bootstrap", "0", "--no-plots", "--no-html"])
    assert not (tmp_path / "plain" / "report.html").exists()


def test_single_run(tmp_path: Path, make_run: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run", method="erm", seed=0, confusion=np.array([[90, 10], [40, 60]]))
    assert main([str(run), "--out", str(tmp_path / "out"), "--bootstrap", "20"]) == 0
    out = capsys.readouterr().out
    assert "| erm | 1 | 75.00 | 90.00 | 60.00 |" in out


def test_missing_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    expected = RUN_DIR_NOT_FOUND.format(path=tmp_path / "missing")
    assert err.strip() == f"mr2 report: error: {expected}"
    assert not (tmp_path / "out").exists()


def test_half_written_run(comparison_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    final = comparison_runs[1] / "final.json"
    final.write_text(final.read_text()[:100])
    assert main([*map(str, comparison_runs), "--out", str(tmp_path / "out")]) == 2
    assert "half-written" in capsys.readouterr().err


def test_different_class_count(
    comparison_runs: list[Path], tmp_path: Path, make_run: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    other = make_run(tmp_path / "other", method="jtt", seed=0, confusion=np.eye(4, dtype=np.int64) * 5)
    assert main([str(comparison_runs[0]), str(other), "--out", str(tmp_path / "out")]) == 2
    assert "runs have different class counts" in capsys.readouterr().err


def test_registered_in_main_cli(comparison_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the `mr2` console script's own entry point (mr2.cli.main.main)."""
    code = cli_main(["report", *map(str, comparison_runs), "--out", str(tmp_path / "o"), "--no-plots", "--bootstrap", "0"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "o" / "report.md").is_file() and (tmp_path / "o" / "report.html").is_file()
    assert "| erm | 3 |" in capsys.readouterr().out


def test_runs_and_predictions_together_are_refused(comparison_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["report", str(comparison_runs[0]), "--predictions", "x.npz", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == f"mr2 report: error: {report_cli.SOURCES_BOTH}"
    assert cli_main(["report", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == f"mr2 report: error: {report_cli.SOURCES_NONE}"
    assert not (tmp_path / "o").exists()


def test_missing_class_in_every_run(tmp_path: Path) -> None:
    from mr2.report.exceptions import MissingClassWarning
    from mr2.report.run_dir import RunRecord
    from mr2.report.writer import write_report

    matrix = np.array([[8, 2, 0, 0], [0, 0, 0, 0], [1, 1, 6, 2], [0, 3, 0, 7]])
    runs = [
        RunRecord(name=f"{m}{s}", method=m, seed=s, confusion=matrix) for m in ("erm", "mr2") for s in (0, 1)
    ]
    with pytest.warns(MissingClassWarning):
        output = write_report(runs, tmp_path / "out", bootstrap_resamples=10)
    assert "Classes without a test sample (NaN, left out of every figure): 1." in output.markdown
    assert output.comparison.tiers.assignment.tolist() == [0, -1, 2, 1]
    per_class = (tmp_path / "out" / "per_class.csv").read_text().splitlines()
    assert per_class[2] == "1,,0,,,,"
    assert (tmp_path / "out" / "plots" / "sorted_accuracy.png").stat().st_size > 0
    text = (tmp_path / "out" / "report.json").read_text()
    assert "NaN" not in text
    data = json.loads(text)
    assert data["runs"]["erm0"]["report"]["by_class"][1] is None
    assert data["methods"]["mr2"]["per_class_mean"][1] is None


def test_labelled_sweep_variants_point_to_sweep_report(
    tmp_path: Path, make_run: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Two entries of one sweep that both run method mr2 (`mr2` and the labelled `mr2_centered`).
    sweep = tmp_path / "runs" / "my-sweep"
    confusion = np.array([[9, 1], [4, 6]])
    runs = [make_run(sweep / f"{label}__seed=0", method=method, seed=0, confusion=confusion,
                     run_name=f"{label}__seed=0")
            for label, method in (("erm", "erm"), ("mr2", "mr2"), ("mr2_centered", "mr2"))]
    (sweep / "sweep.json").write_text("{}")
    assert main([*map(str, runs), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == "mr2 report: error: " + report_cli.SWEEP_VARIANTS.format(
        first=runs[1], other=runs[2], method="mr2", seed=0, sweep=sweep
    ) + "\n"
    assert "`mr2 sweep report" in err
    assert not (tmp_path / "out").exists()
    # Outside a sweep the same pair is a duplicated run, as before.
    (sweep / "sweep.json").unlink()
    assert main([*map(str, runs), "--out", str(tmp_path / "out")]) == 2
    assert "pass each run once" in capsys.readouterr().err
