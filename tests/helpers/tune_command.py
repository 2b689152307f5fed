"""The stand-in training command of the `mr2 tune --command` tests, and the CLI arguments and error
check the tests that drive `mr2 tune` in-process share."""

from __future__ import annotations

import sys
from pathlib import Path

#: The deterministic stand-in script (tests/tune/command_script.py) and its command template.
SCRIPT = Path(__file__).resolve().parents[1] / "tune" / "command_script.py"
COMMAND = f"{sys.executable} {SCRIPT} --loss-json {{loss}} --seed {{seed}} --out {{out}}"


def tune_args(out: Path, *extra: str, command: str = COMMAND, name: str = "c") -> list[str]:
    """`mr2 tune` arguments for a small --command tune (6 classes, ERM and one candidate, 2 + 2 seeds)."""
    return ["tune", "--command", command, "--num-classes", "6", "--candidates", "erm,mr2-paper-c1", "--seeds",
            "2", "--confirm-seeds", "2", "--output-dir", str(out), "--name", name, *extra]


def one_line_error(capsys, code: int) -> str:
    """The standard error of a run that must end in exit 2 with one `mr2 tune: error:` line."""
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("mr2 tune: error: ") and err.count("\n") == 1, err
    return err
