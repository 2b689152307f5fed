"""Smoke test of benchmarks/bench_engine.py (engine vs hand-written loop): quick mode runs and
prints both methods' ratios. No timing assertions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_engine.py"


def test_quick_engine_benchmark_prints_both_ratios(capsys):
    spec = importlib.util.spec_from_file_location("bench_engine_under_test", BENCH_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        assert module.main(["--quick"]) == 0
    finally:
        sys.modules.pop(spec.name, None)
    out = capsys.readouterr().out
    assert "| erm |" in out and "| mr2 |" in out and "engine / loop" in out
