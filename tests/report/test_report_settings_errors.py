"""Report settings a user can get wrong are one-line errors, not tracebacks or silent acceptances:
``--seed -1`` with the bootstrap (numpy's ValueError), ``--bootstrap 1000000000000`` (55 s and 3 GB, then
a MemoryError), ``--bootstrap -1`` and ``--alpha -1``, ``5`` or ``nan`` (accepted without a word)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mr2.cli.main import main
from mr2.report import bootstrap as bootstrap_module
from mr2.report import writer as writer_module
from mr2.report.bootstrap import bootstrap_confusion
from mr2.report.exceptions import ReportError
from mr2.report.predictions import load_predictions
from mr2.report.writer import write_report


@pytest.fixture
def predictions(tmp_path: Path) -> list[str]:
    y = np.arange(40) % 4
    path = tmp_path / "p.npz"
    np.savez(path, y_true=y, y_pred=(y + (np.arange(40) % 5 == 0)) % 4)
    return [f"{path}=a", f"{path}=b"]


CASES = [
    (["--seed", "-1"], writer_module.SEED_INVALID.format(value=-1)),
    (["--bootstrap", "1000000000000"], bootstrap_module.NUM_RESAMPLES_TOO_LARGE.format(
        value=1_000_000_000_000, limit=100_000)),
    (["--bootstrap", "-1"], writer_module.BOOTSTRAP_INVALID.format(value=-1)),
    (["--alpha", "-1", "--bootstrap", "0"], writer_module.ALPHA_INVALID.format(value=-1.0)),
    (["--alpha", "5", "--bootstrap", "0"], writer_module.ALPHA_INVALID.format(value=5.0)),
    (["--alpha", "nan", "--bootstrap", "0"], writer_module.ALPHA_INVALID.format(value=math.nan)),
    (["--alpha", "0", "--bootstrap", "0"], writer_module.ALPHA_INVALID.format(value=0.0)),
]


@pytest.mark.parametrize(("flags", "message"), CASES, ids=[" ".join(f) for f, _ in CASES])
def test_bad_report_settings_are_one_line_errors(tmp_path, predictions, capsys, flags, message) -> None:
    out = tmp_path / "out"
    code = main(["report", "--predictions", *predictions, "--no-plots", "--out", str(out), *flags])
    assert code == 2
    assert capsys.readouterr().err == f"mr2 report: error: {message}\n"
    assert not out.exists()


def test_the_python_api_raises_a_report_error(tmp_path, predictions) -> None:
    runs = load_predictions(predictions)
    for overrides in ({"seed": -1}, {"bootstrap_resamples": -1}, {"alpha": 5.0}, {"alpha": math.nan},
                      {"bootstrap_resamples": 10**12}, {"seed": 1.5}, {"bootstrap_resamples": True}):
        with pytest.raises(ReportError):
            write_report(runs, tmp_path / "out", plots=False, **overrides)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ReportError, match="seed"):
        bootstrap_confusion([[3, 1], [1, 3]], num_resamples=10, seed=-1)
    with pytest.raises(ReportError) as caught:
        bootstrap_confusion([[3, 1], [1, 3]], num_resamples=10**12)
    assert str(caught.value) == bootstrap_module.NUM_RESAMPLES_TOO_LARGE.format(value=10**12, limit=100_000)
    # The limit itself and a seed of 0 are fine.
    assert bootstrap_confusion([[3, 1], [1, 3]], metrics=["overall"], num_resamples=100_000, seed=0)
