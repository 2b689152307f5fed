"""A write the operating system refuses (here: the output path runs through a file) ends any
subcommand with one line on stderr and exit code 2, not a traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mr2.cli.main import WRITE_FAILED, main


def test_report_into_a_path_under_a_file_is_one_line_exit_2(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    predictions = tmp_path / "a.npz"
    y = np.arange(40) % 4
    np.savez(predictions, y_true=y, y_pred=y)
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    code = main(["report", "--predictions", f"{predictions}=model", "--out", str(blocker / "report")])
    err = capsys.readouterr().err
    assert code == 2
    expected = WRITE_FAILED.format(command="mr2 report", path=blocker / "report" / "comparison.csv",
                                   reason="Not a directory")
    assert err.strip() == expected
    assert blocker.read_text() == "not a directory"
