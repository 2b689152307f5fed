"""`mr2 sweep` refuses, before writing anything, a sweep directory it cannot create or write and a
Slurm launcher where Slurm's commands are missing: one line, exit code 2."""

from __future__ import annotations

import os
import stat

import pytest
import yaml

from mr2.cli.main import main
from mr2.sweep.launcher import NO_SLURM

BASE = {"data": {"name": "synthetic"}, "model": {"name": "mlp"}}


def _file(tmp_path, output_dir, **changes):
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump({"name": "s", "output_dir": str(output_dir), "base": BASE,
                                    "methods": {"erm": {}}, **changes}))
    return file


def _one_error(capsys, start):
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"mr2 sweep: error: {start}"), captured.err
    return captured.err


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_output_dir_that_is_a_file_or_under_a_file(tmp_path, capsys, dry_run):
    blocker = tmp_path / "runs"
    blocker.write_text("keep me")
    flags = ["--dry-run"] if dry_run else ["--no-report"]
    for output_dir in (blocker, blocker / "deeper"):
        assert main(["sweep", str(_file(tmp_path, output_dir)), *flags]) == 2
        err = _one_error(capsys, f"cannot write the sweep directory {output_dir / 's'}: ")
        assert f"{blocker} is a file, not a directory; choose another output directory" in err
    assert blocker.read_text() == "keep me"


def test_a_dangling_symbolic_link_in_the_path(tmp_path, capsys):
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "gone")
    assert main(["sweep", str(_file(tmp_path, link)), "--no-report"]) == 2
    err = _one_error(capsys, f"cannot write the sweep directory {link / 's'}: ")
    assert f"{link} is a symbolic link to {tmp_path / 'gone'}, which does not exist" in err
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_a_read_only_directory(tmp_path, capsys):
    if os.geteuid() == 0:  # root writes through permission bits: use a directory of sysfs
        output_dir = "/sys/fs/mr2-test-runs"
        try:
            os.mkdir(output_dir)
        except OSError:
            pass
        else:
            os.rmdir(output_dir)
            pytest.skip("no directory that root cannot write to here (/sys/fs is writable)")
    else:
        read_only = tmp_path / "ro"
        read_only.mkdir()
        read_only.chmod(stat.S_IRUSR | stat.S_IXUSR)
        output_dir = str(read_only / "runs")
    assert main(["sweep", str(_file(tmp_path, output_dir)), "--dry-run"]) == 2
    _one_error(capsys, f"cannot write the sweep directory {output_dir}/s: ")
    assert not os.path.exists(output_dir)


def test_slurm_without_slurm_commands_is_refused_before_writing(tmp_path, capsys, monkeypatch):
    pytest.importorskip("submitit")
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    runs = tmp_path / "runs"
    file = _file(tmp_path, runs)
    for flags in (["--dry-run"], ["--no-report"]):
        assert main(["sweep", str(file), "--launcher", "slurm", *flags]) == 2
        err = _one_error(capsys, NO_SLURM.format(missing="`sbatch` and `srun` were"))
        assert "--launcher-option executor=local runs the same code path" in err
    assert not runs.exists()
    # With the commands on PATH (stand-ins here), the plan is accepted; executor=local needs none.
    for command in ("sbatch", "srun"):
        (empty / command).write_text("#!/bin/sh\nexit 1\n")
        (empty / command).chmod(0o755)
    assert main(["sweep", str(file), "--launcher", "slurm", "--dry-run"]) == 0
    (empty / "srun").unlink()
    assert main(["sweep", str(file), "--launcher", "slurm", "--dry-run"]) == 2
    _one_error(capsys, NO_SLURM.format(missing="`srun` was"))
    assert main(["sweep", str(file), "--launcher", "slurm", "--launcher-option", "executor=local",
                 "--dry-run"]) == 0
