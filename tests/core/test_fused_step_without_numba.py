"""MR2Loss without numba (the ``fast`` extra is optional): the eager steady step, and a clear warning for
an installed numba that fails to load. Each case runs in a fresh interpreter, where the import of numba
is blocked or replaced before mr2 is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_STEPS = """
import sys, torch
{prelude}
from mr2 import MR2Loss
from mr2.statistics import _fused_cpu
loss, eager = MR2Loss(3), MR2Loss(3)
eager.statistics.fused_step = False
g = torch.Generator().manual_seed(0)
for _ in range(4):
    logits, features = torch.randn(9, 3, generator=g), torch.rand(9, 4, generator=g)
    target = torch.arange(9) % 3
    assert torch.equal(loss(logits, features, target), eager(logits, features, target))
assert loss.statistics.all_seen_known()
assert all(torch.equal(a, b) for a, b in zip(loss.state_dict().values(), eager.state_dict().values()))
print(_fused_cpu.available(), sys.modules.get("mr2.statistics._fused_cpu_numba") is not None)
"""


def _run(prelude: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "MR2_FUSED_CPU"}
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", _STEPS.format(prelude=prelude)], env=env,
                          capture_output=True, text=True, check=True)


def test_without_numba_the_eager_step_runs_bit_for_bit():
    out = _run('sys.modules["numba"] = None  # as if not installed')
    assert out.stdout.split() == ["False", "False"]
    assert "numba" not in out.stderr


def test_a_numba_that_fails_to_load_warns_once_and_the_eager_step_runs(tmp_path):
    broken = tmp_path / "numba"
    broken.mkdir()
    (broken / "__init__.py").write_text('raise ImportError("Numba needs NumPy 2.3 or less; got 9.9")\n')
    out = _run("", extra_path=tmp_path)
    assert out.stdout.split() == ["False", "False"]
    warning = [line for line in out.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warning) == 1, out.stderr
    assert "numba is installed but could not be loaded (ImportError: Numba needs NumPy 2.3" in warning[0]
    assert "MR2_FUSED_CPU=0" in warning[0]
