"""Operating-system failures of ``mr2 train`` / ``mr2 eval`` are one-line errors (exit code 2):
checked before anything is built or written where they can be (an output path that is a file, a
dangling link, a directory that cannot be written), and a real disk-full error mid-run (a file-size
limit: the kernel's EFBIG on write) keeps the last checkpoint and says to run the same command again.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from helpers import base_config, read_only
from mr2.cli.main import main
from mr2.config import config_from_dict
from mr2.engine import TrainingSession, train
from mr2.engine.run import DISK_FULL
from mr2.rundir import RunDirectory
from mr2.rundir.layout import DANGLING_LINK, NOT_WRITABLE, PARENT_NOT_A_DIRECTORY, RUN_DIR_NOT_A_DIRECTORY

REPO_SRC = str(Path(__file__).resolve().parents[2] / "src")


def _train(config: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    """``mr2 train`` on ``config``: exit code 2 and one line on stderr, returned without its prefix."""
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    assert main(["train", "--config", str(config_file), "--quiet", *extra]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1, captured.err
    return lines[0].removeprefix("mr2 train: error: ")


def _eval(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["eval", str(run_dir)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0].removeprefix("mr2 eval: error: ")


def test_output_dir_that_is_a_file(spread_npz, tmp_path, capsys):
    out = tmp_path / "runs"
    out.write_text("not a directory")
    message = _train(base_config(spread_npz, out), tmp_path, capsys)
    assert message == PARENT_NOT_A_DIRECTORY.format(parent=out, path=out / "run")
    assert out.read_text() == "not a directory"


def test_output_dir_below_a_file(spread_npz, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "deeper" / "runs"
    message = _train(base_config(spread_npz, out), tmp_path, capsys)
    assert message == PARENT_NOT_A_DIRECTORY.format(parent=tmp_path / "file", path=out / "run")


def test_run_directory_that_is_a_file(spread_npz, tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    (out / "run").write_text("x")
    for extra in ((), ("--overwrite",)):
        message = _train(base_config(spread_npz, out), tmp_path, capsys, *extra)
        assert message == RUN_DIR_NOT_A_DIRECTORY.format(path=out / "run")
    assert sorted(p.name for p in out.iterdir()) == ["run"] and (out / "run").read_text() == "x"


def test_dangling_symbolic_link_as_run_directory(spread_npz, tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    target = tmp_path / "gone"
    (out / "run").symlink_to(target)
    message = _train(base_config(spread_npz, out), tmp_path, capsys)
    assert message == DANGLING_LINK.format(link=out / "run", target=target)
    assert _eval(out / "run", capsys) == DANGLING_LINK.format(link=out / "run", target=target)
    assert not target.exists() and (out / "run").is_symlink()


def test_dangling_symbolic_link_as_output_dir(spread_npz, tmp_path, capsys):
    out = tmp_path / "runs"
    out.symlink_to(tmp_path / "gone")
    message = _train(base_config(spread_npz, out), tmp_path, capsys)
    assert message == DANGLING_LINK.format(link=out, target=tmp_path / "gone")


def test_read_only_output_dir(spread_npz, tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    with read_only(out):
        assert not os.access(out, os.W_OK)
        message = _train(base_config(spread_npz, out), tmp_path, capsys)
    assert message == NOT_WRITABLE.format(directory=out, reason="permission denied", path=out / "run")
    assert list(out.iterdir()) == []


def test_read_only_run_directory_for_eval(spread_npz, tmp_path, capsys):
    train(config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 1})), quiet=True)
    run = tmp_path / "run"
    before = sorted(p.name for p in run.iterdir())
    with read_only(run):
        message = _eval(run, capsys)
    assert message == NOT_WRITABLE.format(directory=run, reason="permission denied", path=run)
    assert sorted(p.name for p in run.iterdir()) == before


def _limited_file_size(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_disk_full_mid_run_keeps_the_last_checkpoint_and_resumes(spread_npz, tmp_path):
    config = base_config(spread_npz, tmp_path / "runs", method={"name": "erm"}, optim={"epochs": 4})
    assert TrainingSession(config_from_dict(config), quiet=True).fit(stop_after_epoch=2) is None
    run = RunDirectory(tmp_path / "runs" / "run")
    checkpoint = run.last_checkpoint.read_bytes()
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO_SRC, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "mr2", "train", "--config", str(config_file), "--quiet"]
    # Files may not grow past the checkpoint's size less one byte: epoch 3's checkpoint cannot be
    # written (write(2) fails with EFBIG; Python ignores SIGXFSZ), everything smaller can.
    limited = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                             preexec_fn=lambda: _limited_file_size(len(checkpoint) - 1))
    assert limited.returncode == 2, limited.stderr
    assert limited.stderr == "mr2 train: error: " + DISK_FULL.format(
        file=run.checkpoints / "last.pt", reason="File too large", path=run.path
    ) + "\n"
    assert run.last_checkpoint.read_bytes() == checkpoint and not list(run.temporary_files())
    assert [r["epoch"] for r in run.read_metrics()] == [1, 2, 3]  # epoch 3's record, then its checkpoint
    # The same command, once space is free, resumes from epoch 2 to the uninterrupted run's result.
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    reference = train(config_from_dict({**config, "output_dir": str(tmp_path / "reference")}), quiet=True)
    assert json.loads(run.final.read_text())["confusion_matrix"] == reference["confusion_matrix"]
    assert [r["epoch"] for r in run.read_metrics()] == [1, 2, 3, 4]


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A small tmpfs at ``path`` (root with CAP_SYS_ADMIN only), unmounted afterwards."""
    path.mkdir()
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None or subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    ).returncode != 0:
        pytest.skip("mounting a tmpfs needs root with CAP_SYS_ADMIN (a real ENOSPC); EFBIG is tested above")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_really_full_disk_mid_run(spread_npz, tmp_path, capsys):
    with _tmpfs(tmp_path / "disk", "2m") as disk:
        config = base_config(spread_npz, disk / "runs", method={"name": "erm"}, optim={"epochs": 4})
        assert TrainingSession(config_from_dict(config), quiet=True).fit(stop_after_epoch=2) is None
        run = RunDirectory(disk / "runs" / "run")
        checkpoint = run.last_checkpoint.read_bytes()
        # Fill the disk but for half a checkpoint: the small files fit, epoch 3's checkpoint does not.
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        with open(disk / "filler", "wb") as filler:
            os.posix_fallocate(filler.fileno(), 0, free - len(checkpoint) // 2)
        message = _train(config, tmp_path, capsys)
        assert message == DISK_FULL.format(
            file=run.checkpoints / "last.pt", reason="No space left on device", path=run.path
        )
        assert run.last_checkpoint.read_bytes() == checkpoint and not list(run.temporary_files())
        (disk / "filler").unlink()
        config_file = tmp_path / "run.yaml"
        assert main(["train", "--config", str(config_file), "--quiet"]) == 0
        final = json.loads(run.final.read_text())
    reference = train(config_from_dict({**config, "output_dir": str(tmp_path / "reference")}), quiet=True)
    assert final["confusion_matrix"] == reference["confusion_matrix"]
    capsys.readouterr()
