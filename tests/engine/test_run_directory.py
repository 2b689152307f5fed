"""Run directories nothing can corrupt: one owner, safe overwrite, clean resume, best-checkpoint eval.

Each test here failed on the engine before the run-directory rules moved into ``mr2.rundir``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers import base_config, write_spread_npz
from mr2.cli.main import main
from mr2.config import config_from_dict, config_to_dict
from mr2.engine import TrainingSession, train
from mr2.engine.checkpoint import load_checkpoint, save_checkpoint
from mr2.io import atomic_write_text
from mr2.rundir import RunDirectory, RunDirectoryError

REPO_SRC = str(Path(__file__).resolve().parents[2] / "src")


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _write_config(tmp_path: Path, config: dict, name: str = "run.yaml") -> Path:
    file = tmp_path / name
    file.write_text(yaml.safe_dump(config))
    return file


def _spawn_trainer(config_file: Path, *extra: str) -> subprocess.Popen[bytes]:
    """``mr2 train`` in its own process (output in ``<config>.log`` next to the config file)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO_SRC, os.environ.get("PYTHONPATH", "")])}
    with open(config_file.with_suffix(".log"), "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "mr2", "train", "--config", str(config_file), "--quiet", *extra],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )


def _wait_for(condition, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _slow_config(npz: Path, out: Path, epochs: int = 400) -> dict:
    """Long enough to be caught running (a tiny MLP, many epochs, one checkpoint per epoch)."""
    return base_config(npz, out, method={"name": "erm"}, optim={"epochs": epochs, "warmup_epochs": 0})


def test_a_second_trainer_on_a_running_run_directory_is_refused(spread_npz, tmp_path, capsys):
    config_file = _write_config(tmp_path, _slow_config(spread_npz, tmp_path / "runs"))
    run = RunDirectory(tmp_path / "runs" / "run")
    trainer = _spawn_trainer(config_file)
    try:
        _wait_for(lambda: run.holder() == trainer.pid, what="the trainer to own its run directory")
        assert main(["train", "--config", str(config_file), "--quiet", "--set", "optim.lr=0.2"]) == 2
        err = capsys.readouterr().err
        assert f"in use by process {trainer.pid}" in err and err.count("\n") == 1
        assert main(["train", "--config", str(config_file), "--quiet", "--overwrite"]) == 2
        assert main(["eval", str(run.path)]) == 2
        assert f"in use by process {trainer.pid}" in capsys.readouterr().err
        # The refused processes wrote nothing: config.yaml is still the running trainer's.
        assert yaml.safe_load(run.config_file.read_text())["optim"]["lr"] == 0.05
    finally:
        trainer.kill()
        trainer.wait()
    assert run.holder() is None  # released by the OS when the holder dies


def test_overwrite_with_a_broken_data_root_leaves_the_old_run_byte_identical(spread_npz, tmp_path, capsys):
    config = base_config(spread_npz, tmp_path / "runs", optim={"epochs": 2})
    config_file = _write_config(tmp_path, config)
    assert main(["train", "--config", str(config_file), "--quiet"]) == 0
    assert main(["eval", str(tmp_path / "runs" / "run")]) == 0
    run_path = tmp_path / "runs" / "run"
    before = _snapshot(run_path)
    assert {"final.json", "metrics.jsonl", "checkpoints/last.pt", "eval_test.json"} <= set(before)
    code = main(["train", "--config", str(config_file), "--quiet", "--overwrite",
                 "--set", f"data.root={tmp_path / 'missing.npz'}"])
    assert code == 2 and "missing.npz" in capsys.readouterr().err
    assert _snapshot(run_path) == before


def test_overwrite_replaces_every_file_of_the_old_run(spread_npz, tmp_path):
    config = config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 2}, method={"name": "erm"}))
    train(config, quiet=True)
    assert main(["eval", str(tmp_path / "run")]) == 0
    old_events = sorted((tmp_path / "run" / "tensorboard").rglob("events.*"))
    changed = config_from_dict(
        base_config(spread_npz, tmp_path, optim={"epochs": 1, "lr": 0.2}, method={"name": "erm"})
    )
    final = train(changed, overwrite=True, quiet=True)
    run = RunDirectory(tmp_path / "run")
    assert not run.eval_file("test").exists() and not run.overwritten.exists()
    events = sorted(run.tensorboard.rglob("events.*"))
    assert events and not set(events) & set(old_events)
    assert [r["epoch"] for r in run.read_metrics()] == [1]
    assert yaml.safe_load(run.config_file.read_text())["optim"]["lr"] == 0.2
    assert json.loads(run.final.read_text())["confusion_matrix"] == final["confusion_matrix"]


def test_overwrite_killed_before_its_first_checkpoint_gives_the_old_run_back(spread_npz, tmp_path):
    out = tmp_path / "runs"
    old = base_config(spread_npz, out, method={"name": "erm"}, optim={"epochs": 1})
    assert main(["train", "--config", str(_write_config(tmp_path, old, "old.yaml")), "--quiet"]) == 0
    run = RunDirectory(out / "run")
    before = _snapshot(run.path)
    # A new run whose first epoch is long (12,800 steps of batch 1: tens of seconds; 128 steps lost the
    # race on a loaded machine, its first checkpoint written before the check below): killed while the
    # old run is staged aside.
    big = write_spread_npz(tmp_path / "big.npz", train_per_class=4000)
    slow = base_config(big, out, method={"name": "erm"},
                       data={"batch_size": 1}, optim={"epochs": 400, "warmup_epochs": 0})
    trainer = _spawn_trainer(_write_config(tmp_path, slow, "new.yaml"), "--overwrite")
    try:
        _wait_for(lambda: run.overwritten.is_dir() and run.holder() == trainer.pid, what="the staged overwrite")
        assert not run.last_checkpoint.exists() and not run.final.exists()
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    # The next owner of the directory finds the old run whole again, and it refuses to train over it.
    assert main(["train", "--config", str(tmp_path / "old.yaml"), "--quiet"]) == 2
    after = _snapshot(run.path)
    after.pop(".lock", None), before.pop(".lock", None)
    assert after == before


def test_resume_cuts_metrics_back_to_the_checkpoint_and_removes_temporary_files(spread_npz, tmp_path):
    def config(name: str):
        return config_from_dict(base_config(spread_npz, tmp_path, name=name, optim={"epochs": 4}))

    expected = train(config("whole"), quiet=True)
    assert TrainingSession(config("split"), quiet=True).fit(stop_after_epoch=2) is None
    run = RunDirectory(tmp_path / "split")
    # What a kill right after appending epoch 3's record (before its checkpoint) leaves, and what a
    # kill during the checkpoint write leaves: a checkpoint-sized temporary file.
    records = run.read_metrics()
    with run.metrics.open("a") as handle:
        handle.write(json.dumps({**records[-1], "epoch": 3}) + "\n")
    leftover = run.checkpoints / ".last.pt.abc123.tmp"
    leftover.write_bytes(run.last_checkpoint.read_bytes()[:1000])
    resumed = TrainingSession(config("split"), quiet=True).fit()
    assert resumed is not None and resumed["confusion_matrix"] == expected["confusion_matrix"]
    assert [r["epoch"] for r in run.read_metrics()] == [1, 2, 3, 4]
    assert not leftover.exists() and not list(run.temporary_files())
    whole = RunDirectory(tmp_path / "whole").read_metrics()
    for a, b in zip(whole, run.read_metrics(), strict=True):
        assert a["train_loss"] == b["train_loss"] and a["val_accuracy"] == b["val_accuracy"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "optim"),
    [
        ({"name": "mr2"}, {}),
        ({"name": "center_loss"}, {}),  # centres in the checkpoint
        ({"name": "supcon"}, {}),  # projection head
        # stage 1 = round(0.2 * 30) = 6 epochs: killed inside stage 1, at its boundary and after it
        ({"name": "hbr", "options": {"estimator": "loss"}}, {}),
        ({"name": "erm"}, {"sam": {"rho": 0.05, "adaptive": True}}),  # SAM's two passes
    ],
    ids=["mr2", "center_loss", "supcon", "hbr", "erm+asam"],
)
def test_kill_9_of_a_real_trainer_then_resume_has_each_epoch_once(spread_npz, tmp_path, method, optim):
    out = tmp_path / "runs"
    config = base_config(spread_npz, out, method=method, optim={"epochs": 30, "warmup_epochs": 0, **optim})
    config_file = _write_config(tmp_path, config)
    run = RunDirectory(out / "run")
    for kills in range(3):
        trainer = _spawn_trainer(config_file)
        target = 3 * (kills + 1)
        _wait_for(lambda t=target: len(run.read_metrics()) >= t, what=f"epoch {target}")
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    assert main(["train", "--config", str(config_file), "--quiet"]) == 0
    epochs = [r["epoch"] for r in run.read_metrics()]
    assert epochs == list(range(1, 31))
    assert not list(run.temporary_files())
    reference = config_from_dict({**config, "output_dir": str(tmp_path / "reference")})
    assert train(reference, quiet=True)["confusion_matrix"] == json.loads(run.final.read_text())["confusion_matrix"]
    # Every epoch's training loss and validation accuracy as in the uninterrupted run (exact floats).
    uninterrupted = RunDirectory(tmp_path / "reference" / "run").read_metrics()
    for key in ("train_loss", "val_accuracy"):
        assert [r[key] for r in run.read_metrics()] == [r[key] for r in uninterrupted], key


def test_an_attempt_killed_before_its_first_checkpoint_refuses_another_config(spread_npz, tmp_path):
    first = config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 2}))
    run = RunDirectory(tmp_path / "run")
    run.lock()  # what a killed first attempt leaves: its config and one epoch's record
    run.open_for_training(config_to_dict(first), overwrite=False)
    run.append_metrics({"epoch": 1, "train_loss": 9.0})
    run.unlock()
    other = config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 2, "lr": 0.3}))
    with pytest.raises(RunDirectoryError, match=r"holds files of a run with a different configuration \(differs in: optim\.lr\)"):
        TrainingSession(other, quiet=True)
    # The same configuration starts afresh: the stale record is gone, each epoch appears once.
    train(first, quiet=True)
    assert [r["epoch"] for r in run.read_metrics()] == [1, 2]
    assert run.read_metrics()[0]["train_loss"] != 9.0


def test_eval_uses_the_checkpoint_final_json_came_from(spread_npz, tmp_path, capsys):
    config = config_from_dict(base_config(spread_npz, tmp_path, select="best_val", optim={"epochs": 3}))
    final = train(config, quiet=True)
    run = RunDirectory(tmp_path / "run")
    assert run.best_checkpoint.exists()
    # Make last.pt's model different from best.pt's, so evaluating the wrong one shows.
    payload = load_checkpoint(run.last_checkpoint)
    payload["model"] = {k: torch.zeros_like(v) if v.is_floating_point() else v for k, v in payload["model"].items()}
    save_checkpoint(run.last_checkpoint, payload)
    assert main(["eval", str(run.path)]) == 0
    again = json.loads(run.eval_file("test").read_text())
    assert again["checkpoint"] == "best.pt" and again["confusion_matrix"] == final["confusion_matrix"]
    assert "best.pt" in capsys.readouterr().out
    assert main(["eval", str(run.path), "--checkpoint", "last"]) == 0
    assert json.loads(run.eval_file("test").read_text())["confusion_matrix"] != final["confusion_matrix"]


def test_eval_on_val_without_a_validation_split_is_a_clear_error(spread_npz, tmp_path, capsys):
    config = config_from_dict(base_config(spread_npz, tmp_path, data={"val_fraction": 0.0}, optim={"epochs": 1}))
    train(config, quiet=True)
    assert main(["eval", str(tmp_path / "run"), "--split", "val"]) == 2
    err = capsys.readouterr().err
    assert "has no validation split (data.val_fraction is 0)" in err and err.count("\n") == 1
    assert not (tmp_path / "run" / "eval_val.json").exists()


def test_result_files_honour_the_umask(spread_npz, tmp_path):
    previous = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(previous)
    os.umask(0o022)
    try:
        train(config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 1})), quiet=True)
    finally:
        os.umask(previous)
    for name in ("final.json", "config.yaml", "metrics.jsonl", "checkpoints/last.pt"):
        assert (tmp_path / "run" / name).stat().st_mode & 0o777 == 0o644, name
