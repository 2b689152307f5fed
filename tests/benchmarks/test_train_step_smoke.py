"""The training-step benchmark runs (quick mode) and reports finite, positive timings."""

from __future__ import annotations

import math
from pathlib import Path

from helpers import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_train_step.py"


def test_quick_run_reports_timings(capsys):
    module = load_script(SCRIPT)
    result = module.main(["--quick"])
    assert all(math.isfinite(v) for v in result.values())
    assert result["cross-entropy"] > 0 and result["mr2"] > 0 and result["mr2 paper"] > 0
    out = capsys.readouterr().out
    assert "MR2 overhead" in out and "| small_cnn |" in out
    assert "| mr2 (default, T = d) |" in out and "| mr2 paper (T = 1) |" in out
