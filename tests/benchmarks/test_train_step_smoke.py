"""The training-step benchmark runs (quick mode) and reports finite, positive timings."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_train_step.py"


def test_quick_run_reports_timings(capsys):
    spec = importlib.util.spec_from_file_location("bench_train_step", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--quick"])
    assert all(math.isfinite(v) for v in result.values())
    assert result["cross-entropy"] > 0 and result["mr2"] > 0
    out = capsys.readouterr().out
    assert "MR2 overhead" in out and "| small_cnn |" in out
