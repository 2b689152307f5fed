"""The command line's fast paths import neither torch nor numpy, and the lazy public
API (PEP 562 ``__getattr__`` in ``mr2``, ``mr2.report``, ``mr2.sweep``) still gives every name.

Each command runs in a fresh interpreter (a subprocess), so that what it imports is all that is in
``sys.modules``: the worker prints the exit code, the output and which heavy modules were loaded.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPOSITORY, load_script

HEAVY = ("torch", "numpy", "scipy", "matplotlib", "pandas", "sklearn", "torchvision")

WORKER = f"""
import contextlib, io, json, sys
from mr2.cli.main import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit_:
        code = exit_.code
heavy = sorted(name for name in {HEAVY!r} if name in sys.modules)
print(json.dumps({{"code": code, "out": out.getvalue(), "err": err.getvalue(), "heavy": heavy}}))
"""


def run_cli(*argv: str, cwd: Path | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, *argv], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("argv", "expected_out"),
    [
        (["--version"], "mr2 0.1.0"),
        (["--help"], "usage: mr2"),
        (["presets"], "Run one with `mr2 sweep --preset NAME`"),
        (["presets", "demo"], "name: demo"),
        *[([command, "--help"], f"usage: mr2 {command}")
          for command in ("demo", "train", "eval", "report", "sweep", "tune", "presets")],
    ],
)
def test_fast_commands_import_no_torch_or_numpy(argv: list[str], expected_out: str) -> None:
    result = run_cli(*argv)
    assert result["code"] == 0, result["err"]
    assert expected_out in result["out"]
    assert result["heavy"] == []


def test_help_lists_every_subcommand_without_importing_them() -> None:
    from mr2.cli.main import SUBCOMMANDS

    result = run_cli("--help")
    for name, _, help_text in SUBCOMMANDS:
        assert name in result["out"]
        assert help_text[:30] in " ".join(result["out"].split())


def test_sweep_status_imports_no_torch_or_numpy(tmp_path: Path) -> None:
    # A real sweep directory (sweep.json, configs/), written by a dry run in another process.
    done = subprocess.run(
        [sys.executable, "-m", "mr2", "sweep", "--preset", "demo", "--dry-run", "--output-dir",
         str(tmp_path)], capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = run_cli("sweep", "status", str(tmp_path / "demo"))
    assert result["code"] == 0, result["err"]
    assert "3 run(s): 3 pending" in result["out"]
    assert result["heavy"] == []
    bad = run_cli("sweep", "status", str(tmp_path))
    assert bad["code"] == 2
    assert "is not a sweep directory" in bad["err"]
    assert bad["heavy"] == []


def test_a_training_command_still_runs_its_subcommand() -> None:
    # The lazy dispatch still gives `train` its arguments and run(): a bad --set is a one-line error.
    result = run_cli("train", "--set", "optim.lr=abc")
    assert result["code"] == 2
    assert result["err"].startswith("mr2 train: error: ")
    assert "optim.lr" in result["err"]


@pytest.mark.parametrize("package", ["mr2", "mr2.report", "mr2.sweep"])
def test_lazy_public_api_gives_every_name(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(set(module.__all__) - {"__version__"}) == sorted(module.EXPORTS)
    for name, source_name in module.EXPORTS.items():
        source = importlib.import_module(source_name)
        expected = source if source_name == f"{package}.{name}" else getattr(source, name)
        assert getattr(module, name) is expected
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        module.NoSuchName  # noqa: B018


def test_import_mr2_is_cheap_and_public_names_resolve_in_a_fresh_interpreter() -> None:
    code = (
        "import sys, mr2\n"
        f"before = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "from mr2 import MR2Loss, ConfusionMatrix\n"
        "import torch\n"
        "loss = mr2.MR2Loss(num_classes=3)\n"
        "assert MR2Loss is mr2.MR2Loss and isinstance(loss, torch.nn.Module)\n"
        "assert mr2.functional.__name__ == 'mr2.functional'\n"
        "from mr2.sweep import SweepSpecError; from mr2.report import ReportError\n"
        "print(before)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_startup_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # Smoke test of benchmarks/bench_cli_startup.py (no timing assertion: the figures go to BENCHMARKS).
    module = load_script(REPOSITORY / "benchmarks" / "bench_cli_startup.py")
    result = module.main(["--quick"])
    assert set(result) == {"python -c pass", "mr2 --version", "mr2 --help", "difference"}
    assert all(value > 0 for key, value in result.items() if key != "difference")
    assert "| `mr2 --version` |" in capsys.readouterr().out
