"""A killed ``--overwrite`` leaves the previous run in ``.overwritten/``; ``mr2 eval`` and ``mr2 report``
put it back (the same :meth:`~mr2.rundir.RunDirectory.recover` as the next ``mr2 train``) or, when
they cannot take the run's lock, say where it is and how to restore it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import base_config, read_only
from mr2.cli.main import main
from mr2.config import config_from_dict, config_to_dict
from mr2.engine import TrainingSession, train
from mr2.report.exceptions import RunDirectoryError as ReportRunDirectoryError
from mr2.report.run_dir import load_run
from mr2.rundir import RunDirectory, RunLock
from mr2.rundir.layout import OVERWRITE_IN_PROGRESS, OVERWRITE_NOT_RESTORED


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture
def killed_overwrite(spread_npz, tmp_path) -> tuple[RunDirectory, dict[str, bytes], dict]:
    """A finished run, then what ``mr2 train --overwrite`` leaves when killed before the new run's
    first checkpoint: the old run staged in ``.overwritten/``, the new config.yaml, no lock holder."""
    config = base_config(spread_npz, tmp_path, method={"name": "erm"}, optim={"epochs": 1})
    final = train(config_from_dict(config), quiet=True)
    run = RunDirectory(tmp_path / "run")
    before = _files(run.path)
    run.lock()
    run.open_for_training(config_to_dict(config_from_dict({**config, "seed": 7})), overwrite=True)
    run.unlock()
    assert run.overwritten.is_dir() and not run.final.exists() and run.holder() is None
    return run, before, final


def test_eval_puts_the_previous_run_back_and_evaluates_it(killed_overwrite, capsys):
    run, before, final = killed_overwrite
    assert main(["eval", str(run.path)]) == 0
    assert json.loads(run.eval_file("test").read_text())["confusion_matrix"] == final["confusion_matrix"]
    after = _files(run.path)
    assert after.pop("eval_test.json") and after == before and not run.overwritten.exists()
    capsys.readouterr()


def test_report_puts_the_previous_run_back(killed_overwrite, tmp_path, capsys):
    run, before, final = killed_overwrite
    record = load_run(run.path)
    assert record.confusion.tolist() == final["confusion_matrix"] and record.seed == 0
    assert _files(run.path) == before and not run.overwritten.exists()
    assert run.holder() is None  # the report let the lock go
    # and through the command line
    run.lock()
    run.open_for_training(json.loads(json.dumps(record.config)) | {"seed": 7}, overwrite=True)
    run.unlock()
    code = main(["report", str(run.path), "--out", str(tmp_path / "report"), "--bootstrap", "0", "--no-plots"])
    assert code == 0 and _files(run.path) == before
    capsys.readouterr()


def test_a_new_run_with_its_first_checkpoint_is_kept(spread_npz, tmp_path, capsys):
    """Killed after the new run's first checkpoint: the old run is dropped (as mr2 train does)."""
    config = base_config(spread_npz, tmp_path, method={"name": "erm"}, optim={"epochs": 3})
    train(config_from_dict(config), quiet=True)
    run = RunDirectory(tmp_path / "run")
    shutil.copytree(run.path, tmp_path / "old", ignore=shutil.ignore_patterns(".lock"))
    session = TrainingSession(config_from_dict({**config, "seed": 7}), overwrite=True, quiet=True)
    assert session.fit(stop_after_epoch=1) is None
    # What a kill between the new run's first checkpoint and the deletion of the old run leaves.
    shutil.copytree(tmp_path / "old", run.overwritten)
    assert run.last_checkpoint.is_file() and not run.final.exists()
    assert main(["eval", str(run.path)]) == 0
    assert not run.overwritten.exists() and not run.final.exists()
    assert json.loads(run.eval_file("test").read_text())["checkpoint"] == "last.pt"
    assert [r["epoch"] for r in run.read_metrics()] == [1]
    capsys.readouterr()


def test_while_the_overwriting_trainer_holds_the_lock_the_message_says_where_the_old_run_is(
    killed_overwrite, capsys
):
    run = killed_overwrite[0]
    expected = OVERWRITE_IN_PROGRESS.format(path=run.path, pid=os.getpid(), staged=run.overwritten)
    with RunLock(run.path):
        assert main(["eval", str(run.path)]) == 2
        assert capsys.readouterr().err == f"mr2 eval: error: {expected}\n"
        with pytest.raises(ReportRunDirectoryError) as caught:
            load_run(run.path)
        assert str(caught.value) == expected
    assert (run.overwritten / "final.json").is_file()  # untouched while locked


def test_when_it_cannot_be_put_back_the_message_says_how_to_restore_it(killed_overwrite, capsys):
    run = killed_overwrite[0]
    staged = _files(run.overwritten)
    with read_only(run.path):
        with pytest.raises(ReportRunDirectoryError) as caught:
            load_run(run.path)
        assert main(["eval", str(run.path)]) == 2
        err = capsys.readouterr().err
    reason = "Operation not permitted" if os.geteuid() == 0 else "Permission denied"
    expected = OVERWRITE_NOT_RESTORED.format(path=run.path, staged=run.overwritten, error=reason)
    assert str(caught.value) == expected and err == f"mr2 eval: error: {expected}\n"
    assert _files(run.overwritten) == staged  # nothing lost
