"""When every run of a sweep fails for the same reason, the sweep says so in one line on the terminal,
quoting the first failure's log (the Python example of docs/sweeps.md, run as a
script without an ``if __name__ == "__main__":`` guard, failed all six runs with ``train.log`` files
holding only their header, and the cause buried on stderr)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import yaml

from helpers.sweeps import sweep_dict, write_npz
from mr2.cli.main import main
from mr2.sweep.runner import ALL_FAILED, MAIN_GUARD_HINT, ONLY_HEADER


def test_a_script_without_the_main_guard_is_told_about_it(tmp_path):
    npz = write_npz(tmp_path / "data.npz")
    data = sweep_dict(npz, tmp_path / "runs", seeds=[0], methods={"erm": {}, "mr2": {}},
                      report={"bootstrap": 0, "plots": False})
    script = tmp_path / "sweep_script.py"
    script.write_text(textwrap.dedent(f"""
        from mr2.sweep import run_sweep, spec_from_dict

        result = run_sweep(spec_from_dict({data!r}), report=False)
        print("all ok:", result.ok)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    expected = ALL_FAILED.format(message="exit code 1", name="erm__seed=0",
                                 excerpt=ONLY_HEADER.format(hint=MAIN_GUARD_HINT))
    assert expected in done.stdout.splitlines(), done.stdout
    assert "all ok: False" in done.stdout
    # With the guard, the same script runs.
    guarded = "if __name__ == '__main__':\n" + textwrap.indent(script.read_text(), "    ")
    script.write_text(guarded)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert "all ok: True" in done.stdout, done.stdout + done.stderr
    assert "every run failed" not in done.stdout


def test_runs_failing_for_one_reason_quote_the_first_log(tmp_path, capsys):
    npz = write_npz(tmp_path / "data.npz")
    data = sweep_dict(npz, tmp_path / "runs", seeds=[0, 1], methods={"mr2": {"method.options.c_bar": -1}},
                      reference="mr2", report={"bootstrap": 0, "plots": False})
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(file), "--no-report"]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("every run failed")]
    assert len(lines) == 1, out
    assert lines[0].startswith("every run failed (exit code 2); the first, mr2__seed=0, logged: ")
    assert "c_bar must be a positive number; got -1" in lines[0]


def test_runs_failing_for_different_reasons_get_no_common_line(tmp_path, capsys):
    npz = write_npz(tmp_path / "data.npz")
    data = sweep_dict(npz, tmp_path / "runs", seeds=[0], methods={"erm": {}, "mr2": {"method.options.c_bar": -1}},
                      report={"bootstrap": 0, "plots": False})
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(file), "--no-report"]) == 1
    assert "every run failed" not in capsys.readouterr().out
