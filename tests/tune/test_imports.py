"""What a user's training script imports in every trial stays light: ``from mr2.tune import
loss_from_spec`` loads no sweep, engine or report module (issue 36)."""

from __future__ import annotations

import subprocess
import sys


def _modules(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(m for m in sys.modules if m.startswith('mr2')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def test_loss_from_spec_imports_no_sweep_engine_or_report_module():
    loaded = _modules("from mr2.tune import loss_from_spec, candidates")
    heavy = sorted(m for m in loaded if m.startswith(("mr2.sweep", "mr2.engine", "mr2.report")))
    assert heavy == []
    assert "mr2.tune.loss_spec" in loaded


def test_the_function_candidates_is_mr2_tune_candidates():
    from mr2.tune import candidates

    assert callable(candidates) and candidates("quick")[0].label == "erm"
