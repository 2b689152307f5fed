"""``--overwrite`` replaces runs, nothing else: a directory holding anything a run does not write is
refused (exit 2) and left byte for byte as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers import base_config
from mr2.cli.main import main
from mr2.config import RunConfig, config_to_dict
from mr2.rundir import RunDirectory, RunDirectoryError, layout
from mr2.rundir.layout import NOT_A_RUN_DIRECTORY


def _tree(path: Path) -> dict[str, bytes | None]:
    """Every entry under ``path``: files with their bytes, directories as None."""
    return {
        str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))
    }


def _train(config: dict, tmp_path: Path, *extra: str) -> int:
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    return main(["train", "--config", str(config_file), "--quiet", *extra])


def test_overwrite_refuses_a_directory_of_other_files_and_touches_nothing(spread_npz, tmp_path, capsys):
    out = tmp_path / "runs"
    stuff = out / "stuff"
    (stuff / "sub").mkdir(parents=True)
    (stuff / "important.txt").write_text("precious")
    (stuff / "sub" / "data.csv").write_text("a,b\n1,2\n")
    (stuff / "config.yaml").write_text("mine: true\n")  # a layout name does not make it a run
    before = _tree(out)
    config = base_config(spread_npz, out, name="stuff", optim={"epochs": 1})
    assert _train(config, tmp_path, "--overwrite") == 2
    err = capsys.readouterr().err
    assert err == "mr2 train: error: " + NOT_A_RUN_DIRECTORY.format(
        path=stuff, entries="'important.txt', 'sub/'"
    ) + "\n"
    assert _tree(out) == before  # not even a .lock


def test_the_message_names_the_first_five_unexpected_entries(tmp_path):
    run = RunDirectory(tmp_path / "photos")
    run.path.mkdir()
    for i in range(7):
        (run.path / f"img{i}.jpg").write_bytes(b"x")
    (run.path / "final.json").write_text("{}")
    with pytest.raises(RunDirectoryError) as caught:
        run.check_overwritable()
    assert str(caught.value) == NOT_A_RUN_DIRECTORY.format(
        path=run.path, entries="'img0.jpg', 'img1.jpg', 'img2.jpg', 'img3.jpg', 'img4.jpg' and 2 more"
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda p: (p / "checkpoints").mkdir() or (p / "checkpoints" / "model.ckpt").write_bytes(b"x"),
        lambda p: (p / "final.json").mkdir(),  # a layout name of the wrong kind
        lambda p: (p / "checkpoints").write_text("x"),
        lambda p: (p / "tensorboard").symlink_to(p.parent),  # rmtree or a move would follow it away
        lambda p: (p / ".notes.tmp").write_text("x"),  # not the temporary file of a run's file
        lambda p: (p / "eval_test.json.bak").write_text("x"),
    ],
    ids=["foreign-checkpoint", "final-json-dir", "checkpoints-file", "symlink", "foreign-tmp", "eval-bak"],
)
def test_entries_outside_the_layout_are_refused(make, tmp_path):
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    (run.path / "config.yaml").write_text("name: run\n")
    make(run.path)
    with pytest.raises(RunDirectoryError, match="is not a run directory of mr2"):
        run.check_overwritable()


def _saved_config(path: Path) -> None:
    """config.yaml as `mr2 train` saves it: the resolved configuration, every setting present."""
    path.write_text(yaml.safe_dump(config_to_dict(RunConfig()), sort_keys=False))


def test_every_entry_of_the_layout_is_accepted(tmp_path):
    run = RunDirectory(tmp_path / "run")
    for d in ("checkpoints", "tensorboard/steps", "predictions", ".overwritten/checkpoints"):
        (run.path / d).mkdir(parents=True)
    for f in ("metrics.jsonl", "final.json", "train.log", ".lock", "eval_test.json",
              "eval_val.json", "checkpoints/last.pt", "checkpoints/best.pt", "checkpoints/.last.pt.k2j_x9a1.tmp",
              ".final.json.abc123.tmp", ".eval_val.json.zz9_1234.tmp", "tensorboard/events.out.tfevents.1.vm",
              "tensorboard/steps/events.out.tfevents.2.vm.77.0", "predictions/test.npz", "predictions/val.npz",
              "predictions/.val.npz.ab12_x.tmp", ".overwritten/final.json"):
        (run.path / f).write_text("x")
    _saved_config(run.config_file)
    run.check_overwritable()
    RunDirectory(tmp_path / "absent").check_overwritable()
    (tmp_path / "empty").mkdir()
    RunDirectory(tmp_path / "empty").check_overwritable()


def test_overwrite_of_an_empty_directory_and_of_a_real_run_still_works(spread_npz, tmp_path, capsys):
    out = tmp_path / "runs"
    (out / "run").mkdir(parents=True)
    config = base_config(spread_npz, out, method={"name": "erm"}, optim={"epochs": 1})
    assert _train(config, tmp_path, "--overwrite") == 0
    run = RunDirectory(out / "run")
    (run.path / "train.log").write_text("sweep output\n")
    (run.path / "predictions").mkdir(exist_ok=True)  # a run writes its predictions there
    (run.path / "predictions" / "test.npz").write_bytes(b"x")
    assert main(["eval", str(run.path)]) == 0
    assert _train({**config, "seed": 1}, tmp_path, "--overwrite") == 0
    assert yaml.safe_load(run.config_file.read_text())["seed"] == 1
    assert (run.path / "predictions" / "test.npz").read_bytes() != b"x" and not run.eval_file("test").exists()
    assert (run.path / "train.log").read_text() == "sweep output\n"  # kept: a sweep may hold it open
    capsys.readouterr()


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ("predictions/notes.txt", "predictions/notes.txt"),
        ("predictions/mine.npz", "predictions/mine.npz"),
        ("predictions/old/", "predictions/old/"),
        ("tensorboard/plot.png", "tensorboard/plot.png"),
        ("tensorboard/steps/log.csv", "tensorboard/steps/log.csv"),
        ("tensorboard/mine/", "tensorboard/mine/"),
    ],
)
def test_user_files_inside_the_layout_directories_are_refused(tmp_path, entry, named):
    # Every layout directory's children are inspected, not only checkpoints/'s: --overwrite used to
    # delete a user's files inside predictions/ and tensorboard/.
    run = RunDirectory(tmp_path / "run")
    (run.path / "predictions").mkdir(parents=True)
    (run.path / "tensorboard" / "steps").mkdir(parents=True)
    _saved_config(run.config_file)
    target = run.path / entry
    if entry.endswith("/"):
        target.mkdir()
    else:
        target.write_text("mine")
    with pytest.raises(RunDirectoryError) as caught:
        run.check_overwritable()
    assert str(caught.value) == NOT_A_RUN_DIRECTORY.format(path=run.path, entries=repr(named))


def test_overwrite_keeps_a_user_file_in_predictions(spread_npz, tmp_path, capsys):
    out = tmp_path / "runs"
    config = base_config(spread_npz, out, method={"name": "erm"}, optim={"epochs": 1})
    assert _train(config, tmp_path) == 0
    run = RunDirectory(out / "run")
    mine = run.path / "predictions" / "mine.npz"
    mine.write_bytes(b"my own predictions")
    before = _tree(run.path)
    capsys.readouterr()
    assert _train({**config, "seed": 1}, tmp_path, "--overwrite") == 2
    assert capsys.readouterr().err == "mr2 train: error: " + NOT_A_RUN_DIRECTORY.format(
        path=run.path, entries="'predictions/mine.npz'"
    ) + "\n"
    assert _tree(run.path) == before
    assert mine.read_bytes() == b"my own predictions"


@pytest.mark.parametrize(
    ("config_text", "problem"),
    [
        (None, layout.NO_SAVED_CONFIG),
        ("name: run\nseed: 0\n", None),  # a user's own config: not every resolved setting
        ("[unclosed\n", None),
        ("- a list\n", None),
    ],
    ids=["no-config", "users-config", "not-yaml", "not-a-mapping"],
)
def test_a_directory_not_written_by_mr2_train_is_refused(spread_npz, tmp_path, capsys, config_text, problem):
    # A user's own config.yaml + metrics.jsonl (layout names, but not a run) used to count as a run.
    out = tmp_path / "runs"
    mine = out / "run"
    mine.mkdir(parents=True)
    if config_text is not None:
        (mine / "config.yaml").write_text(config_text)
    (mine / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    before = _tree(out)
    config = base_config(spread_npz, out, optim={"epochs": 1})
    assert _train(config, tmp_path, "--overwrite") == 2
    err = capsys.readouterr().err
    assert err.startswith("mr2 train: error: " + layout.NOT_WRITTEN_BY_TRAIN.split("{problem}")[0].format(
        path=mine, entries="'config.yaml', 'metrics.jsonl'" if config_text is not None else "'metrics.jsonl'"
    ))
    assert err.count("\n") == 1
    if problem is not None:
        assert problem in err
    if config_text == "name: run\nseed: 0\n":
        assert "lacks 'output_dir', 'deterministic', 'device'" in err
    assert _tree(out) == before
    with pytest.raises(RunDirectoryError):
        RunDirectory(mine).check_overwritable()


def test_a_directory_of_a_sweeps_log_only_is_still_overwritable(tmp_path):
    # The sweep writes train.log (and the lock) before the trainer writes config.yaml.
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    (run.path / "train.log").write_text("starting\n")
    (run.path / ".lock").write_text("")
    run.check_overwritable()
