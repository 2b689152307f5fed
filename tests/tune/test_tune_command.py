"""``mr2 tune --command``: trials of a user's own command (a NumPy stand-in script here, so a trial
is quick): the same choice as the Python API on the same trials, resume, test predictions that cannot
reach the choice, and every failing or misbehaving command as a one-line error naming the trial and
its log file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.tune_command import COMMAND
from mr2.cli.main import main
from mr2.sweep.launcher import SLURM_ONLY
from mr2.tune import tune
from mr2.tune.command import (
    EXIT_CODE,
    FORMAT_SPEC,
    MISSING_PLACEHOLDER,
    NO_MR2_INTERPRETER,
    QUOTED_PLACEHOLDER,
    TIMED_OUT,
    UNKNOWN_PLACEHOLDER,
    command_source,
    interpreter_warning,
)
from mr2.tune.design import Request
from mr2.tune.driver import TUNE_LOCKED, describe
from mr2.tune.request import OUTPUT_IS_FILE, make_request

K = 6


def _args(out: Path, *extra: str, command: str = COMMAND) -> list[str]:
    return ["tune", "--command", command, "--num-classes", str(K), "--candidates", "quick", "--seeds", "2",
            "--confirm-seeds", "2", "--output-dir", str(out), "--name", "c", *extra]


@pytest.fixture(scope="module")
def commanded(tmp_path_factory):
    out = tmp_path_factory.mktemp("command")
    return out, _args(out, "--workers", "2")


def test_the_command_source_makes_the_python_apis_choice_on_the_same_trials(commanded, capsys, tmp_path):
    from helpers.tune_trials import simulated

    out, args = commanded
    assert main(args) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    record = json.loads((out / "c" / "recommendation.json").read_text())
    assert record["source"] == {"kind": "command", "command": COMMAND}
    assert record["chosen"]["label"] == "mr2-logit_only-c1"
    assert record["chosen"]["loss_spec"] == {"method": "mr2", "options": {"variant": "logit_only", "c_bar": 1.0},
                                             "num_classes": K}
    # The stand-in script is deterministic: logit_only's gain on 2 fresh seeds is below the level.
    assert (record["verdict"]["outcome"], record["confirmation"]["what_happened"], record["adopt"]) == (
        "inconclusive", "gain_below_level", False)
    # The record's configuration to use agrees with the advice printed last.
    assert record["label"] == (record["chosen"]["label"] if record["adopt"] else "erm")
    last = printed.rstrip().splitlines()[-1].strip()
    assert last == "loss_spec: " + json.dumps(record["loss_spec"], separators=(",", ":"))
    assert Path(record["confirmation"]["report"]).is_file() and "Report: " in printed
    # Each trial's command line and output are in its log.
    log = out / "c" / "trials" / "selection" / "erm" / "seed=1" / "train.log"
    assert "--seed 1" in log.read_text().splitlines()[0] and "training erm seed 1" in log.read_text()
    # The Python API on the same simulated trials: the same selection record.
    python = tune(simulated, num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path,
                  name="c")
    assert python.record.selection == record["selection"]
    assert python.record.verdict == record["verdict"]


def test_selection_test_predictions_cannot_change_the_choice_and_a_rerun_runs_no_command(
        commanded, capsys, tmp_path, monkeypatch):
    out, args = commanded
    directory = out / "c"
    if not (directory / "recommendation.json").is_file():
        assert main(args) == 0
    before = (directory / "recommendation.json").read_text()
    for path in (directory / "trials" / "selection").glob("*/seed=*/test.npz"):
        with np.load(path) as data:
            y_true = data["y_true"]
        y_pred = y_true if path.parent.parent.name == "mr2-paper-c1" else (y_true + 1) % K
        np.savez(path, y_true=y_true, y_pred=y_pred)
    counter = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_COUNTER", str(counter))
    capsys.readouterr()
    assert main(args) == 0
    assert not counter.exists()  # no command ran: every trial was reused
    assert (directory / "recommendation.json").read_text() == before


def test_dry_run_lists_the_trials_their_commands_and_the_cost_and_writes_nothing(tmp_path, capsys):
    assert main(_args(tmp_path / "out", "--dry-run")) == 0
    printed = capsys.readouterr().out
    request = make_request(num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path / "out",
                           name="c")
    plan = request.plan()
    assert (f"trainings: {plan.expected_trainings():.1f} expected (by simulation), at most {plan.max_trainings()}"
            in printed)
    command = ("--loss-json '{\"method\":\"mr2\",\"options\":{\"variant\":\"paper\",\"c_bar\":1.0},"
               "\"num_classes\":6}' --seed 0")
    assert printed.count(command) == 1  # each trial's command once
    assert "not run by this source" not in printed  # quick has no engine-only candidate
    assert not (tmp_path / "out").exists()
    full = make_request(num_classes=K, candidates="full", output_dir=tmp_path, name="c")
    text = describe(full, command_source(COMMAND, full))
    assert "not run by this source (two-stage procedures need mr2 tune --config: jtt, hbr)" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--command", "python t.py --loss-json {loss} --out {out}"], MISSING_PLACEHOLDER.format(names="{seed}")),
        (["--command", "python t.py --loss-json {loss} --seed {seed}"], MISSING_PLACEHOLDER.format(names="{out}")),
        (["--command", "python t.py --seed {seed} --out {out}"], MISSING_PLACEHOLDER.format(names="{loss}")),
        (["--command", "python t.py {loss} {seed} {out} {epochs}"], UNKNOWN_PLACEHOLDER.format(name="epochs")),
        (["--command", "python t.py {loss} {seed} {out} {"], "is not a valid template"),
        (["--command", "  "], "--command is empty"),
        (["--command", COMMAND], "--command needs --num-classes K"),
        (["--command", COMMAND, "--num-classes", "1"], "num_classes must be an integer from 2 to 100000"),
        (["--command", COMMAND, "--num-classes", "6", "--set", "optim.lr=0.1"], "--set applies to --config"),
        (["--command", COMMAND, "--num-classes", "6", "--launcher-option", "partition=gpu"],
         SLURM_ONLY.format(key="partition")),
        (["--command", COMMAND, "--num-classes", "6", "--workers", "0"], "--workers must be an integer >= 1; got 0"),
        (["--command", COMMAND, "--num-classes", "6", "--candidates", "erm,jtt"], "need mr2's engine"),
        (["--command", COMMAND, "--num-classes", "6", "--candidates", "mr2-paper-c1"], "unknown candidate set"),
        (["--command", COMMAND, "--num-classes", "6", "--candidates", "erm,erm"],
         "--candidates lists erm more than once"),
        (["--command", COMMAND, "--num-classes", "6", "--candidates", "erm,mr2-pape-c1"],
         "--candidates names unknown candidate(s) mr2-pape-c1; the labels are: erm, mr2-paper-c0.5"),
        (["--command", COMMAND, "--num-classes", "6", "--seeds", "2000"], "at most 1000"),
        (["--command", COMMAND, "--num-classes", "6", "--name", "."], "is not a usable name"),
        (["--command", COMMAND, "--num-classes", "6", "--class-names", "/nonexistent/names.txt"],
         "/nonexistent/names.txt"),
        (["--config", "run.yaml", "--num-classes", "6"], "--num-classes applies to --command"),
    ],
    ids=["no-seed", "no-out", "no-loss", "unknown", "brace", "empty", "no-k", "k-1", "set", "launcher", "workers",
         "engine-only", "no-erm", "repeated", "typo", "many-seeds", "name", "class-names", "k-with-config"],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, message):
    out_dir = tmp_path / "out"
    code = main(["tune", *args, "--output-dir", str(out_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("mr2 tune: error: ") and message in err and err.count("\n") == 1, err
    assert not out_dir.exists()


def test_config_and_command_together_are_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["tune", "--config", "run.yaml", "--command", COMMAND, "--output-dir", str(tmp_path / "out")])
    assert caught.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("mode", "trial", "message"),
    [
        ("wrong_k", "selection/erm@0",
         "trial selection/erm@0, val split: logits have 7 columns but num_classes is 6 (wrong K: one column per "
         "class) (log: {log})"),
        ("labels", "selection/mr2-paper-c1@0",
         "trial selection/mr2-paper-c1@0, test split: y_true differs from trial selection/erm@0's (360 of 360 labels "
         "differ); every trial must predict the same test samples in the same order (log: {log})"),
    ],
    ids=["wrong-k", "labels-differ"],
)
def test_predictions_tune_cannot_use_are_one_line_exit_2(tmp_path, capsys, monkeypatch, mode, trial, message):
    monkeypatch.setenv("FAKE_MODE", mode)
    out_dir = tmp_path / "out"
    code = main(_args(out_dir))
    err = capsys.readouterr().err
    phase, rest = trial.split("/")
    label, seed = rest.split("@")
    trial_dir = out_dir / "c" / "trials" / phase / label / f"seed={seed}"
    expected = message.format(log=trial_dir / "train.log", out=trial_dir / "output")
    assert code == 2
    assert err.startswith("mr2 tune: error: ") and expected in err and err.count("\n") == 1, err
    assert (trial_dir / "train.log").is_file()
    assert not (trial_dir / "trial.json").exists() and not (out_dir / "c" / "recommendation.json").exists()


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("exit3", EXIT_CODE.format(trial="selection/erm@0", code=3, log="{log}") + "; last lines of its log: "
         "training erm seed 0 | CUDA error: out of memory"),
        ("nothing", "trial selection/erm@0: the command wrote no predictions: {out}/val.npz is missing"),
        ("nan", "trial selection/erm@0: predictions file {out}/val.npz"),
    ],
    ids=["exit-code", "no-predictions", "nan-logits"],
)
def test_erm_failing_is_exit_1_naming_the_trial_and_its_log(tmp_path, capsys, monkeypatch, mode, message):
    monkeypatch.setenv("FAKE_MODE", mode)
    out_dir = tmp_path / "out"
    code = main(_args(out_dir))
    err = capsys.readouterr().err
    trial_dir = out_dir / "c" / "trials" / "selection" / "erm" / "seed=0"
    expected = message.format(log=trial_dir / "train.log", out=trial_dir / "output")
    assert code == 1
    assert err.startswith("mr2 tune: no recommendation: the reference 'erm' failed (selection, seed 0: ")
    assert expected in err and err.count("\n") == 1, err
    assert not (out_dir / "c" / "recommendation.json").exists()


def test_a_failing_candidate_and_a_diverged_one_are_ruled_out_and_the_tune_finishes(tmp_path, capsys, monkeypatch):
    """Issue 36: one candidate's script exits non-zero, another writes NaN logits: exit 0, a
    recommendation, and both listed as failed with their log paths."""
    monkeypatch.setenv("FAKE_FAIL", "mr2-paper-c1:exit3,mr2-distance_1d-c1:nan")
    out_dir = tmp_path / "out"
    assert main(_args(out_dir)) == 0
    printed = capsys.readouterr().out
    record = json.loads((out_dir / "c" / "recommendation.json").read_text())
    trials = out_dir / "c" / "trials" / "selection"
    assert set(record["failed"]) == {"mr2-paper-c1", "mr2-distance_1d-c1"}
    for label, part in (("mr2-paper-c1", "exited with code 3"), ("mr2-distance_1d-c1", "non-finite value")):
        failure = record["failed"][label]
        assert failure["phase"] == "selection" and failure["seed"] == 0 and part in failure["reason"]
        assert failure["log"] == str(trials / label / "seed=0" / "train.log")
        assert f"{label} is not eligible: failed (" in printed and failure["log"] in printed
    assert record["chosen"]["label"] == "mr2-logit_only-c1"  # the tune went on with the others
    assert printed.rstrip().splitlines()[-1].strip().startswith("loss_spec: ")


@pytest.mark.slow
def test_the_command_source_runs_every_trial_as_a_submitit_job(tmp_path, capsys):
    """``--launcher slurm`` (submitit's ``local`` executor: real jobs, no cluster): every trial is a
    job, and the choice is the same as with the local pool."""
    pytest.importorskip("submitit", reason="submitit is the cluster extra (pip install 'mr2[cluster]')")
    code = main(_args(tmp_path, "--launcher", "slurm", "--launcher-option", "executor=local",
                      "--launcher-option", "timeout_min=10"))
    assert code == 0, capsys.readouterr()
    record = json.loads((tmp_path / "c" / "recommendation.json").read_text())
    assert record["chosen"]["label"] == "mr2-logit_only-c1"
    jobs = list((tmp_path / "c" / "submitit").glob("*/*_result.pkl"))
    assert len(jobs) == record["trainings"]  # every selection and confirmation trial ran as a job


def _wait_for(condition, seconds: float = 120.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_stops_the_running_commands(tmp_path, workers):
    """SIGTERM to ``mr2 tune --command``: the running trial's command (its whole process group) is
    stopped, tune exits 128 + 15, and nothing of the trial is stored as finished."""
    import os
    import signal
    import subprocess

    command = ": {loss} {seed}; echo $$ > {out}/pid; exec sleep 600"
    process = subprocess.Popen([sys.executable, "-m", "mr2", "tune", "--command", command, "--num-classes", "3",
                                "--candidates", "quick", "--seeds", "2", "--confirm-seeds", "2", "--output-dir", str(tmp_path), "--name", "s",
                                "--workers", workers],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pid_file = tmp_path / "s" / "trials" / "selection" / "erm" / "seed=0" / "output" / "pid"
    try:
        assert _wait_for(lambda: pid_file.is_file() and pid_file.read_text().strip().isdigit())
        child = int(pid_file.read_text())
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "interrupted (SIGTERM)" in err

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return Path(f"/proc/{child}/stat").read_text().split(")")[1].split()[0] == "Z"

    assert _wait_for(gone)
    assert not (pid_file.parent.parent / "trial.json").exists()


def _start_tune(tmp_path: Path, command: str, *extra: str, name: str = "s"):
    import subprocess

    return subprocess.Popen([sys.executable, "-m", "mr2", "tune", "--command", command, "--num-classes", "3",
                             "--candidates", "erm,mr2-paper-c1", "--seeds", "2", "--confirm-seeds", "2",
                             "--output-dir", str(tmp_path), "--name", name, *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().split(")")[1].split()[0] == "Z")


#: A trial whose Python child (not the shell) traps SIGTERM, writes its own pid and hangs.
_TRAPPING = (f"{sys.executable} -c \"import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "open(sys.argv[1] + '/pid', 'w').write(str(os.getpid())); time.sleep(600)\" {out} {loss} {seed}")


def _child_pid(tmp_path: Path, name: str = "s") -> int:
    pid_file = tmp_path / name / "trials" / "selection" / "erm" / "seed=0" / "output" / "pid"
    assert _wait_for(lambda: pid_file.is_file() and pid_file.read_text().strip().isdigit())
    return int(pid_file.read_text())


def test_kill_9_of_tune_leaves_no_trial_command_running(tmp_path):
    """Issue 38: tune killed with SIGKILL (no handler runs): its trial command, a child of the shell
    that ignores SIGTERM, is gone 3 s later (the group leader gets the death signal and kills the group)."""
    import signal
    import time

    process = _start_tune(tmp_path, _TRAPPING)
    try:
        child = _child_pid(tmp_path)
        assert _alive(child)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
        time.sleep(3.0)
        assert not _alive(child)
    finally:
        process.kill()
        process.communicate()


def test_sigterm_stops_a_trial_that_traps_sigterm(tmp_path):
    import signal

    process = _start_tune(tmp_path, _TRAPPING)
    try:
        child = _child_pid(tmp_path)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert _wait_for(lambda: not _alive(child), 5.0)


def test_a_second_tune_into_the_same_directory_is_refused_naming_the_first(tmp_path, capsys):
    import signal

    process = _start_tune(tmp_path, _TRAPPING)
    try:
        _child_pid(tmp_path)
        code = main(["tune", "--command", _TRAPPING, "--num-classes", "3", "--candidates", "erm,mr2-paper-c1",
                     "--seeds", "2", "--confirm-seeds", "2", "--output-dir", str(tmp_path), "--name", "s"])
        err = capsys.readouterr().err
        assert code == 2
        assert err.strip() == ("mr2 tune: error: " + TUNE_LOCKED.format(path=tmp_path / "s", pid=process.pid))
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)


def test_a_trial_over_the_timeout_fails_and_its_candidate_is_ruled_out(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "mr2-paper-c1:hang")
    out_dir = tmp_path / "out"
    assert main(_args(out_dir, "--trial-timeout", "2")) == 0
    record = json.loads((out_dir / "c" / "recommendation.json").read_text())
    log = out_dir / "c" / "trials" / "selection" / "mr2-paper-c1" / "seed=0" / "train.log"
    assert record["failed"]["mr2-paper-c1"]["reason"].startswith(
        TIMED_OUT.format(trial="selection/mr2-paper-c1@0", seconds=2, log=log))
    assert "--trial-timeout" in capsys.readouterr().out


@pytest.mark.parametrize(("command", "message"), [
    ("python t.py --loss-json '{loss}' --seed {seed} --out {out}", QUOTED_PLACEHOLDER.format(name="loss")),
    ('python t.py --loss-json {loss} --seed {seed} --out "{out}"', QUOTED_PLACEHOLDER.format(name="out")),
    ("python t.py {loss} {seed:>2000000000} {out}", FORMAT_SPEC.format(shown="{seed:>2000000000}", name="seed")),
    ("python t.py {loss!r} {seed} {out}", FORMAT_SPEC.format(shown="{loss!r}", name="loss")),
], ids=["single-quoted-loss", "double-quoted-out", "format-spec", "conversion"])
def test_quoted_placeholders_and_format_specs_are_refused_before_any_trial(tmp_path, capsys, command, message):
    for dry in ((), ("--dry-run",)):
        code = main(["tune", "--command", command, "--num-classes", "6", "--output-dir", str(tmp_path / "out"), *dry])
        err = capsys.readouterr().err
        assert code == 2 and err == f"mr2 tune: error: {message}\n"
    assert not (tmp_path / "out").exists()


def test_out_is_an_absolute_path_that_cannot_read_as_an_option(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    request = make_request(num_classes=K, candidates="quick", output_dir="-o", name="c")
    source = command_source("t {loss} {seed} {out}", request)
    trial = request.trial(Request("selection", "erm", 0))
    assert source.command(trial).endswith(f" {tmp_path}/-o/c/trials/selection/erm/seed=0/output")


def test_a_python_that_cannot_import_mr2_is_warned_about(tmp_path, capsys):
    """Issue 39: run from outside .venv, `python` is an interpreter without mr2 and every trial fails
    with "exited with code 1"; tune says so before the first trial."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'mr2'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    command = f"{fake} t.py --loss-json {{loss}} --seed {{seed}} --out {{out}}"
    warning = interpreter_warning(command)
    assert warning == NO_MR2_INTERPRETER.format(word=str(fake), path=str(fake),
                                                error="ModuleNotFoundError: No module named 'mr2'",
                                                suggestion=sys.executable)
    assert interpreter_warning(COMMAND) is None  # this interpreter has mr2
    assert interpreter_warning("torchrun --nproc-per-node 2 t.py {loss} {seed} {out}") is None
    assert interpreter_warning(_TRAPPING) is None  # quotes that hold a ';' are one word
    assert main(["tune", "--command", command, "--num-classes", "6", "--output-dir", str(tmp_path / "o"),
                 "--dry-run"]) == 0
    assert warning in capsys.readouterr().err


def test_an_output_dir_that_is_a_file_is_refused_before_any_trial(tmp_path, capsys):
    """Issue 39: it used to fail at the first trial with an impossible log path."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    code = main(["tune", "--command", COMMAND, "--num-classes", "6", "--output-dir", str(a_file)])
    err = capsys.readouterr().err
    assert code == 2 and err == f"mr2 tune: error: {OUTPUT_IS_FILE.format(path=a_file)}\n"
    assert a_file.read_text() == "mine"


def test_a_k_whose_confirmation_report_cannot_fit_is_refused_before_any_trial(tmp_path, capsys):
    """Issue 38: --num-classes 100000 ran every trial, then failed on an 80 GB allocation."""
    code = main(["tune", "--command", COMMAND, "--num-classes", "100000", "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    # the default design's most confirmation runs: the screen's (ERM and the 15 loss candidates, all
    # contenders, on 1 fresh seed) and the finalist's and ERM's on 16 seeds after it: 16 + 2 x 16
    assert err.startswith("mr2 tune: error: num_classes 100000: the confirmation report would hold 48 trials'")
    assert "more than this process can allocate now" in err
    assert not (tmp_path / "o").exists()


def test_a_second_sigterm_during_the_shutdown_does_not_cut_it_short(tmp_path):
    """Issue 38: a second SIGTERM while tune stopped its trials was a traceback, and could leave the
    trial running."""
    import signal
    import time

    process = _start_tune(tmp_path, _TRAPPING)
    try:
        child = _child_pid(tmp_path)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # inside the 2 s grace of the trial that traps SIGTERM
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "interrupted (SIGTERM)" in err
    assert _wait_for(lambda: not _alive(child), 5.0)
