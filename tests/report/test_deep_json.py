"""A ``final.json`` or a ``metrics.jsonl`` line nested 100,000 deep is a one-line error naming the file
(``mr2 report`` used to end in the RecursionError of ``json.loads``); ``RunDirectory.read_metrics``
drops such a line like any other that does not parse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mr2.cli.main import main
from mr2.rundir import RunDirectory, RunDirectoryError, layout

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_deep_final_json_is_a_one_line_error(tmp_path: Path, make_run, capsys) -> None:
    run = make_run(tmp_path / "erm-s0", method="erm", seed=0, confusion=np.eye(3, dtype=np.int64) * 5)
    (run / "final.json").write_text(DEEP)
    with pytest.raises(RunDirectoryError) as caught:
        RunDirectory(run).read_final()
    assert str(caught.value) == layout.FILE_UNREADABLE.format(
        file="final.json", path=run, error=layout.JSON_TOO_DEEP
    )
    out = tmp_path / "out"
    assert main(["report", str(run), "--no-plots", "--bootstrap", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"mr2 report: error: {caught.value}\n"
    assert not out.exists()


def test_a_deep_metrics_line_is_a_one_line_error(tmp_path: Path, make_run, capsys) -> None:
    run = make_run(tmp_path / "erm-s0", method="erm", seed=0, confusion=np.eye(3, dtype=np.int64) * 5)
    (run / "metrics.jsonl").write_text('{"epoch": 1}\n' + DEEP + "\n")
    assert RunDirectory(run).read_metrics() == [{"epoch": 1}]
    out = tmp_path / "out"
    assert main(["report", str(run), "--no-plots", "--bootstrap", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mr2 report: error: ") and err.count("\n") == 1 and "line 2" in err
    assert "nested too deep" in err
