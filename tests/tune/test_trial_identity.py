"""A trial records what produced it (issue 43 item 1): a rerun whose command, script file, training
function or ``version`` differs from the stored trials' is refused before any trial runs, with one line
naming the difference and the way out (another name, or ``--retrain`` / ``retrain=True``); it never
reuses them silently, and ``--retrain`` trains them again."""

from __future__ import annotations

import functools
import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from mr2.cli.main import main
from mr2.tune import Candidate, TrialError, TrialPredictions, TuneInputError, describe_tune, tune
from mr2.tune.command import command_identity
from mr2.tune.source import FUNCTION_WAY_OUT, function_identity
from mr2.tune.trials import PRODUCER_DIFFERS

SCRIPT = Path(__file__).with_name("command_script.py")
K = 6


def _command(lr: str, script: str | Path = SCRIPT) -> str:
    # An environment assignment stands for a hyperparameter the command sets (the script ignores it).
    return f"FAKE_LR={lr} {sys.executable} {script} --loss-json {{loss}} --seed {{seed}} --out {{out}}"


def _args(out: Path, command: str, *extra: str) -> list[str]:
    return ["tune", "--command", command, "--num-classes", str(K), "--candidates", "erm,mr2-paper-c1",
            "--seeds", "2", "--confirm-seeds", "2", "--output-dir", str(out), "--name", "c", *extra]


def _one_line(err: str) -> str:
    assert err.startswith("mr2 tune: error: ") and err.count("\n") == 1, err
    return err


def test_a_rerun_with_a_changed_command_is_refused_before_any_trial(tmp_path, capsys, monkeypatch):
    """Today's bug: the rerun with another learning rate listed the old trials as finished and
    credited them to the new command."""
    out = tmp_path / "out"
    assert main(_args(out, _command("0.1"))) == 0
    record = out / "c" / "recommendation.json"
    before = record.read_text()
    counter = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_COUNTER", str(counter))
    capsys.readouterr()
    for dry in ((), ("--dry-run",)):
        assert main(_args(out, _command("0.2"), *dry)) == 2
        err = _one_line(capsys.readouterr().err)
        assert "another command" in err and "FAKE_LR=0.1" in err and "FAKE_LR=0.2" in err, err
        assert "--name" in err and "--retrain" in err
    assert not counter.exists()  # no trial ran
    assert record.read_text() == before
    # The same command resumes: every trial reused, nothing runs.
    assert main(_args(out, _command("0.1"))) == 0
    assert not counter.exists()


def test_a_partial_tune_rerun_with_another_command_is_refused(tmp_path, capsys, monkeypatch):
    """A tune that stopped after ERM's first trial (the second trial's test labels differ: invalid
    input stops the tune, the finished trial stays) must not be finished by another command."""
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_MODE", "labels")
    assert main(_args(out, _command("0.1"))) == 2
    assert (out / "c" / "trials" / "selection" / "erm" / "seed=0" / "trial.json").is_file()
    monkeypatch.delenv("FAKE_MODE")
    counter = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_COUNTER", str(counter))
    capsys.readouterr()
    assert main(_args(out, _command("0.2"))) == 2
    err = _one_line(capsys.readouterr().err)
    assert "selection/erm@0" in err and "another command" in err
    assert not counter.exists() and not (out / "c" / "recommendation.json").exists()


def test_a_changed_script_file_is_refused_and_retrain_trains_again(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(SCRIPT, tmp_path / "train.py")
    command = _command("0.1", "train.py")
    out = tmp_path / "out"
    assert main(_args(out, command)) == 0
    first = json.loads((out / "c" / "trials" / "selection" / "erm" / "seed=0" / "trial.json").read_text())
    assert first["producer"] == command_identity(command)
    assert set(first["producer"]["files"]) >= {"train.py"}
    with open(tmp_path / "train.py", "a") as handle:
        handle.write("# lr = 0.2\n")
    counter = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_COUNTER", str(counter))
    capsys.readouterr()
    assert main(_args(out, command)) == 2
    err = _one_line(capsys.readouterr().err)
    assert "train.py changed" in err and "--retrain" in err, err
    assert not counter.exists()
    # --retrain: the stored trials are trained again with the new script; then they are its own.
    assert main(_args(out, command, "--retrain")) == 0
    trained = counter.read_text().splitlines()
    assert "erm@0" in trained and "mr2-paper-c1@0" in trained
    counter.unlink()
    assert main(_args(out, command)) == 0
    assert not counter.exists()


def test_command_identity_hashes_the_existing_files_it_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "data.csv").write_text("1,2\n")
    (tmp_path / "folder").mkdir()
    identity = command_identity("python train.py --data=data.csv --dir folder --loss {loss} {seed} {out} 'x y'")
    assert identity["kind"] == "command" and set(identity["files"]) == {"train.py", "data.csv"}
    import hashlib

    assert identity["files"]["train.py"] == hashlib.sha256(b"print(1)\n").hexdigest()
    # Unbalanced quotes: the shell will say so in the first trial's log; the command alone is recorded.
    assert command_identity("python train.py '{loss} {seed} {out}")["files"] == {}


def simulated(candidate: Candidate, seed: int) -> TrialPredictions:
    from helpers.tune_trials import simulated as draw

    return draw(candidate, seed)


def other(candidate: Candidate, seed: int) -> TrialPredictions:
    return simulated(candidate, seed)


ARGUMENTS = {"num_classes": K, "candidates": "erm,mr2-paper-c1", "seeds": 2, "confirm_seeds": 2, "name": "t"}


def _counting(calls: list[tuple[str, int]]):
    @functools.wraps(simulated)  # the same function, counted: its identity is simulated's
    def counting(candidate: Candidate, seed: int) -> TrialPredictions:
        calls.append((candidate.label, seed))
        return simulated(candidate, seed)

    return counting


def test_python_a_rerun_with_another_version_or_function_is_refused(tmp_path):
    tune(simulated, **ARGUMENTS, output_dir=tmp_path, version="lr=0.1", stream=io.StringIO())
    record = tmp_path / "t" / "recommendation.json"
    before = record.read_text()
    calls: list[tuple[str, int]] = []
    with pytest.raises(TrialError) as caught:
        tune(_counting(calls), **ARGUMENTS, output_dir=tmp_path, version="lr=0.2", stream=io.StringIO())
    message = str(caught.value)
    assert "\n" not in message and "another train_fn" in message
    assert "'lr=0.1'" in message and "'lr=0.2'" in message and "retrain=True" in message and "name=" in message
    with pytest.raises(TrialError, match=r"test_trial_identity\.other"):
        tune(other, **ARGUMENTS, output_dir=tmp_path, version="lr=0.1", stream=io.StringIO())
    assert calls == [] and record.read_text() == before
    # The dry run with train_fn given sees it too.
    with pytest.raises(TrialError, match="another train_fn"):
        describe_tune(**ARGUMENTS, output_dir=tmp_path, train_fn=simulated, version="lr=0.2")
    # The same function and version: resumed, nothing trains.
    tune(_counting(calls), **ARGUMENTS, output_dir=tmp_path, version="lr=0.1", stream=io.StringIO())
    assert calls == []
    # retrain=True trains the stored trials again under the new version.
    tune(_counting(calls), **ARGUMENTS, output_dir=tmp_path, version="lr=0.2", retrain=True, stream=io.StringIO())
    assert ("erm", 0) in calls and ("mr2-paper-c1", 0) in calls


def test_python_by_default_the_functions_name_and_source_are_recorded(tmp_path):
    tune(simulated, **ARGUMENTS, output_dir=tmp_path, stream=io.StringIO())
    stored = json.loads((tmp_path / "t" / "trials" / "selection" / "erm" / "seed=0" / "trial.json").read_text())
    assert stored["producer"] == function_identity(simulated) == {
        "kind": "python", "function": f"{__name__}.simulated", "source": stored["producer"]["source"],
        "version": None}
    assert len(stored["producer"]["source"]) == 64

    def edited(candidate: Candidate, seed: int) -> TrialPredictions:  # simulated's name, another body
        return simulated(candidate, seed)

    edited.__qualname__, edited.__module__ = simulated.__qualname__, simulated.__module__
    with pytest.raises(TrialError, match="its source changed"):
        tune(edited, **ARGUMENTS, output_dir=tmp_path, stream=io.StringIO())


def test_a_bad_version_is_one_line(tmp_path):
    with pytest.raises(TuneInputError, match="version must be a string"):
        tune(simulated, **ARGUMENTS, output_dir=tmp_path, version=3)  # type: ignore[arg-type]
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("content", ["{", "[1, 2]", '{"phase": "selection"'])
def test_a_damaged_trial_record_is_trained_again_not_another_tunes(tmp_path, content):
    """Issue 43: a corrupt trial.json read as 'a finished trial of another tune (phase: None ...)'."""
    tune(simulated, **ARGUMENTS, output_dir=tmp_path, stream=io.StringIO())
    (tmp_path / "t" / "trials" / "selection" / "erm" / "seed=0" / "trial.json").write_text(content)
    calls: list[tuple[str, int]] = []
    stream = io.StringIO()
    tune(_counting(calls), **ARGUMENTS, output_dir=tmp_path, stream=stream)
    assert calls == [("erm", 0)]
    assert "selection/erm@0: its record" in stream.getvalue() and "training it again" in stream.getvalue()


def test_a_record_without_a_producer_is_refused(tmp_path):
    """A trial stored by an mr2 that recorded no producer cannot be vouched for."""
    tune(simulated, **ARGUMENTS, output_dir=tmp_path, stream=io.StringIO())
    for path in (tmp_path / "t" / "trials").glob("*/*/seed=*/trial.json"):
        record = json.loads(path.read_text())
        del record["producer"]
        path.write_text(json.dumps(record))
    with pytest.raises(TrialError) as caught:
        tune(simulated, **ARGUMENTS, output_dir=tmp_path, stream=io.StringIO())
    assert str(caught.value) == PRODUCER_DIFFERS.format(
        directory=tmp_path / "t", trial="selection/erm@0", what="train_fn",
        difference="its record names no producer (written by an earlier mr2, which did not record one)",
        way_out=FUNCTION_WAY_OUT)


def test_retrain_in_a_dry_run_lists_the_stale_trials_to_run_and_removes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_args(out, _command("0.1"))) == 0
    records = sorted((out / "c" / "trials").glob("*/*/seed=*/trial.json"))
    before = {path: path.read_text() for path in records}
    capsys.readouterr()
    assert main(_args(out, _command("0.2"), "--retrain", "--dry-run")) == 0
    printed = capsys.readouterr().out
    assert " finished" not in printed and "selection/erm@0" in printed and " to run" in printed
    assert {path: path.read_text() for path in records} == before  # a dry run writes nothing


def test_retrain_with_config_is_one_line(tmp_path, capsys):
    code = main(["tune", "--config", str(tmp_path / "run.yaml"), "--retrain", "--output-dir", str(tmp_path / "o")])
    err = _one_line(capsys.readouterr().err)
    assert code == 2 and "--retrain applies to --command" in err and not (tmp_path / "o").exists()


def test_a_partials_bound_arguments_are_part_of_the_record():
    def train(candidate, seed, lr, data=None):
        raise AssertionError("not called")

    first = function_identity(functools.partial(train, lr=0.1, data=object()))
    assert first["function"].endswith("train(data=<object>, lr=0.1)")
    assert first == function_identity(functools.partial(train, lr=0.1, data=object()))  # no memory address
    assert first["function"] != function_identity(functools.partial(train, lr=0.2, data=object()))["function"]
    assert function_identity(functools.partial(functools.partial(train, 1), lr=(1, "a")))["function"].endswith(
        "train(1, lr=(1, 'a'))")


def test_a_plan_request_becomes_a_trial_in_one_place_and_back(tmp_path):
    """design.Request (the pure plan's phase, label, seed) and trials.Trial (the same, bound to its
    Candidate): TuneRequest.trial is the one conversion, and Trial.request goes back."""
    from mr2.tune.design import Request
    from mr2.tune.request import make_request

    request = make_request(num_classes=3, output_dir=tmp_path, name="t")
    first = request.plan().next_round()
    assert first and len({item.label for item in first}) == len(request.candidates)
    for item in first:
        trial = request.trial(item)
        assert trial.request == item
        assert trial.candidate.label == item.label and trial.candidate.num_classes == 3
        assert trial.name == f"{item.phase}/{item.label}@{item.seed}"
    assert request.trial(Request("confirmation", "erm", 99)).key == "confirmation/erm/seed=99"
