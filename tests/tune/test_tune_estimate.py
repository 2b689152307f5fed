"""A time estimate for your own code: a tune prints the expected and the most time left after ERM's first
trial, and ``mr2 tune --command ... --dry-run --time-one-trial`` runs ERM's first trial once, in a
temporary directory, to print the same before the tune (it said "time estimate: none")."""

from __future__ import annotations

import math
import re
import sys
import tempfile
from pathlib import Path

import pytest

from mr2.cli.main import main
from mr2.tune.estimate import NO_ESTIMATE_COMMAND, TIMED_TRIAL_FAILED, remaining_text
from mr2.tune.request import make_request
from mr2.tune.source import format_seconds

SCRIPT = Path(__file__).with_name("command_script.py")
COMMAND = f"{sys.executable} {SCRIPT} --loss-json {{loss}} --seed {{seed}} --out {{out}}"
K = 6
ESTIMATE = re.compile(
    r"time estimate \((?P<what>ERM's (?:first|timed) trial) took (?P<took>.+?)\): about (?P<expected>.+) for "
    r"the (?P<left>[0-9.]+) trainings expected still to run, at most (?P<most>.+) for the (?P<most_left>\d+) the "
    r"plan may still run \((?P<workers>\d+) at a time, each timed as that trial; not included: the candidates' "
    r"extra cost per trial over ERM\)")


def _args(out: Path, *extra: str) -> list[str]:
    return ["tune", "--command", COMMAND, "--num-classes", str(K), "--candidates", "quick", "--seeds", "2",
            "--confirm-seeds", "2", "--output-dir", str(out), "--name", "c", *extra]


@pytest.mark.parametrize(("seconds", "done", "expected", "most", "workers"),
                         [(30.0, 1, 55.1, 77, 2), (7.0, 1, 12.0, 12, 1), (100.0, 3, 3.0, 3, 4), (0.5, 1, 9.5, 20, 3)])
def test_the_remaining_time_is_the_remaining_trainings_shared_among_the_workers(seconds, done, expected, most,
                                                                                 workers):
    text = remaining_text(seconds, done, expected, most, workers)
    match = ESTIMATE.fullmatch(text)
    assert match is not None, text
    # Oracle: each worker runs its share of the trainings left, one after the other.
    rounds_expected = math.ceil((expected - done) / workers)
    rounds_most = math.ceil((most - done) / workers)
    assert match["expected"] == format_seconds(rounds_expected * seconds)
    assert match["most"] == format_seconds(rounds_most * seconds)
    assert float(match["left"]) == pytest.approx(expected - done, abs=0.05)
    assert int(match["most_left"]) == most - done and int(match["workers"]) == workers


@pytest.mark.slow
def test_a_tune_prints_the_time_left_right_after_erms_first_trial(tmp_path, capsys):
    assert main(_args(tmp_path / "out")) == 0
    lines = capsys.readouterr().out.splitlines()
    estimates = [i for i, line in enumerate(lines) if line.startswith("time estimate (")]
    assert len(estimates) == 1
    at = estimates[0]
    # Right after ERM's first trial, before any other trial finished.
    assert "selection/erm@0 done in" in lines[at - 1] or "selection/erm@0 done in" in lines[at - 2]
    assert not any(" done in " in line for line in lines[:at] if "selection/erm@0" not in line)
    match = ESTIMATE.fullmatch(lines[at])
    assert match is not None and match["what"] == "ERM's first trial"
    plan = make_request(num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path,
                        name="c").plan()
    assert float(match["left"]) == pytest.approx(plan.expected_trainings() - 1, abs=0.05)
    assert int(match["most_left"]) == plan.max_trainings() - 1
    # A rerun reuses every trial: nothing is timed, no estimate.
    assert main(_args(tmp_path / "out")) == 0
    assert "time estimate (" not in capsys.readouterr().out


def _scratch_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("mr2-tune-timing-*")}


@pytest.mark.slow
def test_the_dry_run_times_one_trial_on_request_and_writes_nothing(tmp_path, capsys):
    before = _scratch_dirs()
    assert main(_args(tmp_path / "out", "--dry-run", "--time-one-trial")) == 0
    printed = capsys.readouterr().out
    assert NO_ESTIMATE_COMMAND not in printed
    assert "timing one trial: selection/erm@0 (in " in printed
    line = printed.strip().splitlines()[-1]
    match = ESTIMATE.fullmatch(line)
    assert match is not None and match["what"] == "ERM's timed trial", line
    plan = make_request(num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path,
                        name="c").plan()
    assert float(match["left"]) == pytest.approx(plan.expected_trainings(), abs=0.05)
    assert int(match["most_left"]) == plan.max_trainings()
    assert match["took"].endswith(" s") and 0 < float(match["took"].removesuffix(" s")) < 60
    assert not (tmp_path / "out").exists()  # the tune directory is not touched
    assert _scratch_dirs() == before  # the temporary directory is removed


@pytest.mark.slow
def test_a_failing_timed_trial_says_so_keeps_its_log_and_exits_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "exit3")
    assert main(_args(tmp_path / "out", "--dry-run", "--time-one-trial")) == 1
    line = capsys.readouterr().out.strip().splitlines()[-1]
    prefix = TIMED_TRIAL_FAILED.split("{failure}")[0]
    assert line.startswith(prefix) and "exited with code 3" in line, line
    kept = Path(line.rsplit("its directory ", 1)[1].removesuffix(" is kept"))
    assert kept.is_dir() and any(kept.rglob("train.log"))
    assert not (tmp_path / "out").exists()
    import shutil

    shutil.rmtree(kept)


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--time-one-trial"], "--time-one-trial applies to --dry-run"),
     ],
)
def test_time_one_trial_outside_a_command_dry_run_is_one_line_exit_2(tmp_path, capsys, extra, message):
    assert main(_args(tmp_path / "out", *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("mr2 tune: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
    config = tmp_path / "run.yaml"
    config.write_text("name: x\n")
    assert main(["tune", "--config", str(config), "--dry-run", "--time-one-trial"]) == 2
    err = capsys.readouterr().err
    assert "--time-one-trial applies to --command" in err and err.count("\n") == 1
