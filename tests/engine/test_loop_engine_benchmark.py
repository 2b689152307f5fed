"""Smoke test of benchmarks/bench_engine.py (engine vs hand-written loop): quick mode runs and
prints both methods' ratios. No timing assertions."""

from __future__ import annotations

from helpers import REPOSITORY, load_script


def test_quick_engine_benchmark_prints_both_ratios(capsys):
    module = load_script(REPOSITORY / "benchmarks" / "bench_engine.py", "bench_engine_under_test")
    assert module.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "| erm |" in out and "| mr2 |" in out and "engine / loop" in out
