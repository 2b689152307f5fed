"""``mr2 tune --config`` end to end on a small .npz: selection, confirmation, recommendation.json, resume, and
proof that test numbers cannot reach the choice; a failed candidate is ruled out and the tune goes on, ERM
failing ends it; bad input is exit 2 before anything is written.

Every test runs alone: the module's tune is run by its fixture (:func:`tuned`), and the tests that change
a tune directory work on a copy of it (:func:`_finished_copy`)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers.tune_trials import ENGINE_CLASSES as NUM_CLASSES
from helpers.tune_trials import engine_config as _config
from mr2.cli.main import main
from mr2.config import load_config
from mr2.config.names import BAD_NAME
from mr2.sweep.launcher import NOT_KEY_VALUE, SLURM_ONLY
from mr2.tune.design import Plan
from mr2.tune.driver import PREVIOUS_FILE, PREVIOUS_MOVED
from mr2.tune.engine_source import BAD_COUNT, NO_PREDICTIONS, NO_VALIDATION_SPLIT, phase_spec
from mr2.tune.request import (
    BAD_SEEDS,
    MAX_SEEDS,
    OVERLAPPING_SEEDS,
    TOO_FEW_SEEDS,
    TOO_MANY_SEEDS,
    UNKNOWN_CRITERION,
    TuneRequest,
    make_request,
)
from mr2.tune.selection import Choice, ValidationFigures
from mr2.tune.text import choice_explanation
from mr2.tune.verdict import seed_figures

#: Fields of final.json that describe the test split (everything but the validation section and the
#: run's identity).
TEST_FIELDS = ("overall_accuracy", "per_class_accuracy", "confusion_matrix", "class_statistics", "logit_margins")
QUICK = ["erm", "mr2-paper-c1", "mr2-logit_only-c1", "mr2-distance_1d-c1"]
ERM_KEPT = "KEEP ERM (plain cross-entropy training, the reference)."


def _request(out_dir: Path, seeds: str = "3", confirm_seeds: str = "3") -> TuneRequest:
    return make_request(output_dir=str(out_dir), name="t", candidates="quick", losses_only=False, seeds=seeds,
                        confirm_seeds=confirm_seeds)


def _load(file: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(file) as data:
        return data["y_true"].astype(np.int64), data["y_pred"].astype(np.int64)


def _replay(request: TuneRequest, *, selection_only: bool = False) -> tuple[Plan, list[tuple[str, str, int]]]:
    """The request's plan fed the finished runs' own predictions: the selection trials' VALIDATION
    predictions (predictions/val.npz; with a design whose screen reuses them, their test predictions
    too), the confirmation trials' test predictions; the plan and the trials it asked for ``(phase,
    label, seed)``. ``selection_only``: stop where the confirmation starts (no test figure is used
    before it)."""
    plan = request.plan()
    trials = []
    while batch := plan.next_round():
        if selection_only and batch[0].phase == "confirmation":
            break
        for item in batch:
            trials.append((item.phase, item.label, item.seed))
            predictions = request.directory / item.phase / f"{item.label}__seed={item.seed}" / "predictions"
            if item.phase == "selection":
                y_true, y_pred = _load(predictions / "val.npz")
                figures = ValidationFigures.from_predictions(f"{item.label}@{item.seed}", item.seed, y_true,
                                                             y_pred, NUM_CLASSES)
                reused = None
                if plan.design.screen_reuse:
                    y_test, y_test_pred = _load(predictions / "test.npz")
                    reused = seed_figures(y_test, y_test_pred, list(range(NUM_CLASSES)), NUM_CLASSES)
                plan.record_validation(item.label, item.seed, figures, test=reused)
            else:
                y_true, y_pred = _load(predictions / "test.npz")
                plan.record_test(item.label, item.seed, seed_figures(y_true, y_pred, plan.hard_classes,
                                                                     NUM_CLASSES))
    return plan, trials


def _choice(request: TuneRequest) -> Choice:
    """The rule's choice, recomputed from the selection runs' validation predictions alone."""
    choice = _replay(request, selection_only=True)[0].choice
    assert choice is not None
    return choice


def _json(value: object) -> object:
    return json.loads(json.dumps(value))


@dataclass
class Tuned:
    tmp: Path
    config: Path
    args: list[str]
    code: int
    out: str
    err: str

    @property
    def directory(self) -> Path:
        return self.tmp / "out" / "t"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Tuned:
    """The module's tune (quick candidates, 3 + 3 seeds), run once; its printout."""
    tmp = tmp_path_factory.mktemp("tune")
    config = _config(tmp)
    args = ["tune", "--config", str(config), "--candidates", "quick", "--seeds", "3", "--confirm-seeds", "3",
            "--workers", "2", "--output-dir", str(tmp / "out"), "--name", "t"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return Tuned(tmp, config, args, code, out.getvalue(), err.getvalue())


def _finished_copy(tuned: Tuned, tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of the module's finished tune directory and the arguments that tune it in place."""
    assert tuned.code == 0, tuned.out + tuned.err
    shutil.copytree(tuned.directory, tmp_path / "out" / "t")
    copied = [*tuned.args]
    copied[copied.index("--output-dir") + 1] = str(tmp_path / "out")
    return tmp_path / "out" / "t", copied


def _paste_block(out: str) -> dict:
    """The YAML block printed at the very end (the configuration to use)."""
    return yaml.safe_load(textwrap.dedent(out.rstrip().rsplit(":\n\n", 1)[1]))


def test_tune_selects_on_validation_confirms_on_fresh_seeds_and_records_it(tuned):
    assert tuned.code == 0, tuned.out + tuned.err
    out, directory = tuned.out, tuned.directory
    record = json.loads((directory / "recommendation.json").read_text())
    # The rule is stated before anything runs, and again with the result.
    assert out.index("Rule: ") < out.index("== selection") < out.rindex("Rule: ")
    assert record["rule"].split()[0] in out
    # The choice, recomputed from the selection runs' validation predictions, is the recorded one.
    request = _request(tuned.tmp / "out")
    plan, trials = _replay(request)
    choice = plan.choice
    assert choice is not None
    figures = {key: value for key, value in _json(choice.to_dict()).items()  # type: ignore[union-attr]
               if key not in ("recommended", "recommendation_is_reference")}  # the old margin rule's pick
    assert record["selection"] == {"seeds": [0, 1, 2], "split": "validation", "candidates_against_erm": 3,
                                   **figures, "sent_to_confirmation": plan.contenders,
                                   "explanation": choice_explanation(choice, plan.contenders)}
    assert ("(to the confirmation)" in out) == bool(plan.contenders)
    assert "it is recommended" not in out and "(recommended)" not in out
    assert [c["label"] for c in record["selection"]["candidates"]] == QUICK
    # The default design ranks every candidate on its first seed, ERM on two.
    assert [len(c["runs"]) for c in record["selection"]["candidates"]] == [
        2 if c["label"] == "erm" else 1 for c in record["selection"]["candidates"]]
    assert record["criterion"] == "hard_tier" and record["mr2_version"] and record["candidate_set"] == "quick"
    assert record["source"] == {"kind": "engine"} and record["num_classes"] == NUM_CLASSES
    assert record["base_config"]["optim"]["lr"] == 0.05
    assert choice_explanation(choice, plan.contenders) in out
    # The advice is the plan's, replayed on the same predictions; the record keeps adopt, use and chosen apart.
    advice = plan.advice()
    assert record["advice"] == _json(advice.to_dict())
    assert record["design"] == request.design.to_dict()
    assert (record["adopt"], record["reason"]) == (advice.adopt, advice.reason)
    assert record["recommendation_is_erm"] is (not advice.adopt)
    assert record["label"] == record["use"]["label"] == advice.use
    assert (record["adopt"] or record["label"] == "erm") and (record["label"] != "erm" or not record["adopt"])
    assert {key: record[key] for key in ("label", "method", "options", "loss_spec")} == record["use"]
    assert (record["chosen"] or {}).get("label") == advice.chosen
    assert record["verdict"] == (None if advice.verdict is None else _json(advice.verdict.to_dict()))
    assert record["failed"] == {} and "is not eligible: failed" not in out
    assert record["trainings"] == len(trials) == plan.trainings
    # The advice is printed last: ADOPT with the block to paste, or KEEP ERM with ERM's block.
    if record["adopt"]:
        assert f"ADOPT {record['label']}: " in out and ERM_KEPT not in out
        advice_at = out.rindex(f"ADOPT {record['label']}: ")
    else:
        assert "ADOPT " not in out
        advice_at = out.rindex(ERM_KEPT)
    assert advice_at > out.rindex("recommendation: ")
    method = _paste_block(out[advice_at:])["method"]
    assert method == {"name": record["method"], "options": record["options"]}
    assert load_config(None, [f"method.name={method['name']}"]).method.name == method["name"]
    assert "SUPPORTED" not in out.upper() and "Note:" not in out
    # The confirmation: the trials the plan asked for, on the confirmation seeds, nothing else.
    confirmed = sorted(f"{label}__seed={seed}" for phase, label, seed in trials if phase == "confirmation")
    confirmation_dir = directory / "confirmation"
    on_disk = sorted(p.name for p in confirmation_dir.glob("*__seed=*"))
    assert on_disk == confirmed
    assert all(int(name.split("=")[1]) in (3, 4, 5) for name in confirmed)
    screen = bool(advice.screen_seeds)  # the default design screens on a pool of 3 (1 fresh seed)
    went_on = not screen or any(look.look >= 1 for look in advice.looks)  # the finalist's looks (0: the screen)
    if advice.chosen is not None:  # a screen's contenders and ERM on its seed, then ERM and the finalist
        screened = {f"{label}__seed={s}" for label in ("erm", *advice.contenders) for s in advice.screen_seeds}
        tested = {f"{label}__seed={s}" for label in ("erm", advice.chosen) for s in (3, 4, 5)} if went_on else set()
        assert confirmed == sorted(tested | screened) and (went_on or screened)
    if not confirmed:
        assert record["confirmation"]["report"] is None
        return
    # The figures come from the confirmation's report (in memory): the same as its report.json, whose
    # tiers are the verdict's (fixed by the selection): one hard tier on the screen.
    report_file = confirmation_dir / "report" / "report.json"
    report = json.loads(report_file.read_text())
    assert record["confirmation"]["report"] == str(report_file)
    assert record["confirmation"]["seeds"] == sorted({int(n.split("=")[1]) for n in confirmed})
    assert record["confirmation"]["figures"] == {key: report[key] for key in ("reference", "tiers", "methods")}
    if not screen:
        assert report["tiers"]["members"]["hard"] == record["selection"]["hard_tier_classes"] == choice.hard_classes
    assert record["verdict"]["hard_classes"] == report["tiers"]["members"]["hard"]
    methods = record["confirmation"]["figures"]["methods"]
    assert set(methods) == {name.split("__")[0] for name in confirmed}
    for label in methods:
        on_every_seed = went_on and label in ("erm", advice.chosen)
        assert methods[label]["seeds"] == ([3, 4, 5] if on_every_seed or not screen else [3])
    if screen:  # the verdict covers the finalist's seeds after the screen only, the report every run
        # (the screen's reporting: tests/tune/test_design_screen.py, test_design_reuse.py)
        return
    # ... and its hard-tier column is the verdict's figure, run by run.
    verdict = record["verdict"]
    assert methods["erm"]["values"]["tier:hard"] == pytest.approx(verdict["hard_tier"]["reference"])
    if verdict["chosen"] != "erm":
        chosen_values = methods[verdict["chosen"]]["values"]["tier:hard"]
        assert chosen_values == pytest.approx(verdict["hard_tier"]["chosen"])
        assert methods[verdict["chosen"]]["difference"]["tier:hard"] == pytest.approx(
            verdict["hard_tier"]["mean_difference"])
    assert "| method | seeds | overall | easy | medium | hard |" in out


def test_test_numbers_cannot_change_the_choice_and_a_rerun_reuses_every_run(tuned, tmp_path, capsys):
    """The selection runs' test numbers never change the validation choice; with the default design
    those of the first selection seed are the screen's first seed (tests/tune/test_design_reuse.py),
    so the advice stays the same when every OTHER selection run's test numbers are corrupted."""
    directory, args = _finished_copy(tuned, tmp_path)
    before = json.loads((directory / "recommendation.json").read_text()
                        .replace(str(tuned.tmp / "out"), str(tmp_path / "out")))
    request = _request(tmp_path / "out")
    choice = _choice(request).to_dict()
    _plan, trials = _replay(request)
    reused = request.seeds[0] if request.design.screen_reuse else None
    # Corrupt every test field of every selection run (but the screen's): make one candidate perfect
    # on test and every other one worthless, the opposite of whatever the validation split said.
    favoured = next(label for label in QUICK if label != choice["recommended"])
    for phase, label, seed in trials:
        if phase == "selection" and seed != reused:
            path = directory / "selection" / f"{label}__seed={seed}"
            file = path / "final.json"
            final = json.loads(file.read_text())
            value = 1.0 if label == favoured else 0.0
            k = len(final["per_class_accuracy"])
            final["overall_accuracy"] = value
            final["per_class_accuracy"] = [value] * k
            final["confusion_matrix"] = [[7 if i == j or value == 0.0 else 0 for j in range(k)] for i in range(k)]
            final["class_statistics"] = {"garbage": [value] * k}
            final["logit_margins"] = {"mean": [value * 99] * k}
            assert set(TEST_FIELDS) <= set(final)
            file.write_text(json.dumps(final))
            # ... and the per-sample test predictions.
            y_true, _ = _load(path / "predictions" / "test.npz")
            np.savez(path / "predictions" / "test.npz", y_true=y_true,
                     y_pred=y_true if value == 1.0 else (y_true + 1) % k)
    assert _choice(request).to_dict() == choice
    # The whole command again: every run is reused and the recommendation is the same.
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("(finished earlier)") == len(trials) and "running " not in out and "] done " not in out
    after = json.loads((directory / "recommendation.json").read_text())
    for record in (before, after):
        record.pop("git_commit")  # other commits may land on the checkout meanwhile
    assert after == before


@pytest.mark.parametrize(
    ("changes", "extra", "message"),
    [
        ({"val_fraction": 0.0}, [], NO_VALIDATION_SPLIT),
        ({}, ["--criterion", "best"], UNKNOWN_CRITERION.format(value="best",
                                                               choices="hard_tier, worst_class, overall")),
        ({}, ["--candidates", "all"], "unknown candidate set 'all'; choose quick, full, or a comma-separated list"),
        ({}, ["--seeds", "0,1,2", "--confirm-seeds", "2,3"],
         OVERLAPPING_SEEDS.format(selection=[0, 1, 2], confirmation=[2, 3], common=[2])),
        ({}, ["--seeds", "1"], TOO_FEW_SEEDS.format(flag="--seeds", count=1)),
        ({}, ["--confirm-seeds", "a,b"], BAD_SEEDS.format(flag="--confirm-seeds", minimum=2, value="a,b")),
        ({"batch_sise": 3}, [], "unknown config key 'data.batch_sise'"),
        ({}, ["--set", "model.name=resnet_9000"], "unknown model 'resnet_9000'"),
        ({}, ["--set", "data.root=/nonexistent/data.npz"], "/nonexistent/data.npz"),
        ({}, ["--launcher-option", "partition=gpu"], SLURM_ONLY.format(key="partition")),
        ({}, ["--launcher", "slurm", "--launcher-option", "partitoin=gpu"],
         "unknown config key 'launcher.partitoin'"),
        ({}, ["--launcher", "slurm", "--launcher-option", "timeout_min=0"], "'launcher.timeout_min' must be >= 1"),
        ({}, ["--launcher", "slurm", "--launcher-option", "gpus"], NOT_KEY_VALUE.format(value="gpus")),
    ],
    ids=["no-validation", "criterion", "candidates", "overlap", "one-seed", "bad-seeds", "config-key",
         "model-name", "data-root", "slurm-key-local", "launcher-key", "launcher-range", "launcher-syntax"],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, changes, extra, message):
    config = _config(tmp_path, **changes)
    out_dir = tmp_path / "out"
    code = main(["tune", "--config", str(config), "--output-dir", str(out_dir), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("mr2 tune: error: ") and message in err and err.count("\n") == 1
    assert not out_dir.exists()


@pytest.mark.slow
def test_tune_through_the_slurm_launcher_runs_every_run_as_a_submitit_job(tmp_path, capsys):
    """``--launcher slurm`` (submitit's ``local`` executor: real jobs, no cluster) reaches both of
    tune's sweeps: every selection and confirmation run the plan asked for is a finished submitit job,
    and the record is the plan's advice on those runs' predictions."""
    pytest.importorskip("submitit", reason="submitit is the cluster extra (pip install 'mr2[cluster]')")
    from mr2.sweep.cluster import read_jobs

    config = _config(tmp_path)
    out_dir = tmp_path / "out"
    code = main(["tune", "--config", str(config), "--candidates", "quick", "--seeds", "2", "--confirm-seeds", "2",
                 "--threads-per-run", "1", "--output-dir", str(out_dir), "--name", "t", "--launcher", "slurm",
                 "--launcher-option", "executor=local", "--launcher-option", "timeout_min=10"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    directory = out_dir / "t"
    record = json.loads((directory / "recommendation.json").read_text())
    request = _request(out_dir, seeds="2", confirm_seeds="2")
    plan, trials = _replay(request)
    assert record["selection"]["best_other"] == _choice(request).best
    assert record["advice"] == _json(plan.advice().to_dict())
    for phase in ("selection", "confirmation"):
        expected = sorted(f"{label}__seed={seed}" for p, label, seed in trials if p == phase)
        assert expected or phase == "confirmation"
        jobs = read_jobs(directory / phase)["runs"] if expected else {}
        assert sorted(jobs) == expected, phase
        assert {entry["state"] for entry in jobs.values()} <= {"done"}
        for run in jobs:
            assert (directory / phase / run / "final.json").is_file()
            assert "=== mr2 sweep (submitit job" in (directory / phase / run / "train.log").read_text()


def test_a_rerun_with_another_configuration_stops_at_erms_refused_run(tuned, tmp_path, capsys):
    """Rerun a finished tune with ``--set optim.lr=0.07``: its sweep refuses ERM's first selection
    run (finished with lr 0.05), which runs alone first; ERM failing ends the tune (exit 1, nothing to
    compare with) before any other run is tried, and the recommendation made at lr 0.05 stays."""
    directory, args = _finished_copy(tuned, tmp_path)
    before = (directory / "recommendation.json").read_text()
    confirmation = sorted(p.name for p in (directory / "confirmation").glob("*"))
    capsys.readouterr()
    assert main([*args, "--set", "optim.lr=0.07"]) == 1
    captured = capsys.readouterr()
    out = captured.out
    refused = [line for line in out.splitlines() if "FAILED " in line]
    assert len(refused) == 1 and "erm__seed=0" in refused[0]
    assert "holds a finished run with a different configuration (differs in: optim.lr)" in refused[0]
    assert "erm is not eligible" not in out and "failed (failed" not in captured.err  # the reference: said once, below
    assert captured.err.startswith("mr2 tune: no recommendation: the reference 'erm' failed (selection, seed 0")
    assert "== confirmation" not in out and "] done " not in out and "skipped" not in out
    # No advice this time: the previous recommendation is moved aside (not left looking current), and
    # the error says where.
    assert not (directory / "recommendation.json").exists()
    assert (directory / PREVIOUS_FILE).read_text() == before
    assert captured.err.rstrip().endswith(PREVIOUS_MOVED.format(path=directory / PREVIOUS_FILE))
    assert json.loads(before)["base_config"]["optim"]["lr"] == 0.05
    assert sorted(p.name for p in (directory / "confirmation").glob("*")) == confirmation


def test_a_selection_run_locked_elsewhere_fails_its_trial_and_rules_its_candidate_out(tuned, tmp_path, capsys):
    """A selection run owned by another process (its lock held) is not scored, even if it finishes
    meanwhile: its trial failed, so its candidate is ruled out (listed in ``failed`` with the reason and
    the log) and the tune goes on to its advice (exit 0)."""
    from mr2.rundir import RunLock

    directory, args = _finished_copy(tuned, tmp_path)
    label = "mr2-logit_only-c1"
    run_dir = directory / "selection" / f"{label}__seed=0"  # every candidate's first racing stage
    (run_dir / "final.json").unlink()
    capsys.readouterr()
    with RunLock(run_dir):
        code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{label} is not eligible: failed (running elsewhere: " in out
    record = json.loads((directory / "recommendation.json").read_text())
    failed = record["failed"]
    assert list(failed) == [label]
    assert (failed[label]["phase"], failed[label]["seed"]) == ("selection", 0)
    assert failed[label]["reason"].startswith("running elsewhere: ")
    assert failed[label]["log"] == str(run_dir / "train.log")
    assert record["label"] != label and (record["chosen"] or {}).get("label") != label
    assert record["advice"]["ruled_out"][label].startswith("failed (running elsewhere: ")
    scores = {c["label"]: c for c in record["selection"]["candidates"]}
    assert label not in scores  # no run of it was scored
    assert all(len(c["runs"]) == (2 if name == "erm" else 1) for name, c in scores.items() if c["eligible"])


@pytest.mark.parametrize(
    ("label", "code"),
    [("mr2-paper-c1", 0), ("erm", 1)],
    ids=["candidate", "erm"],
)
def test_runs_of_an_older_mr2_without_predictions_are_failed_trials(tuned, tmp_path, capsys, label, code):
    """A run finished by an older mr2 (no predictions/val.npz) cannot be scored: its trial failed, naming
    the file. A candidate's is ruled out and the tune goes on; ERM's ends the tune (exit 1), the
    previous recommendation kept."""
    directory, args = _finished_copy(tuned, tmp_path)
    before = (directory / "recommendation.json").read_text()
    run_dir = directory / "selection" / f"{label}__seed=0"
    shutil.rmtree(run_dir / "predictions")
    capsys.readouterr()
    assert main(args) == code
    captured = capsys.readouterr()
    message = NO_PREDICTIONS.format(run=run_dir, file="predictions/val.npz")
    if code == 1:
        assert f"{message} (log: {run_dir / 'train.log'})" in captured.err
        assert "erm is not eligible" not in captured.out
        assert captured.err.startswith("mr2 tune: no recommendation: the reference 'erm' failed")
        assert (directory / PREVIOUS_FILE).read_text() == before
        assert not (directory / "recommendation.json").exists()
        return
    record = json.loads((directory / "recommendation.json").read_text())
    assert record["failed"] == {label: {"phase": "selection", "seed": 0, "reason": message,
                                        "log": str(run_dir / "train.log")}}
    assert record["label"] != label and label not in {c["label"] for c in record["selection"]["candidates"]}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "0"], BAD_COUNT.format(flag="--workers", value=0)),
        (["--workers", "-2"], BAD_COUNT.format(flag="--workers", value=-2)),
        (["--threads-per-run", "0"], BAD_COUNT.format(flag="--threads-per-run", value=0)),
        (["--seeds", "100000000"], TOO_MANY_SEEDS.format(flag="--seeds", count=100000000, maximum=MAX_SEEDS)),
        (["--confirm-seeds", "1001"], TOO_MANY_SEEDS.format(flag="--confirm-seeds", count=1001,
                                                            maximum=MAX_SEEDS)),
        (["--seeds", "9" * 5000], TOO_MANY_SEEDS.format(flag="--seeds", count="9" * 12 + "...",
                                                        maximum=MAX_SEEDS)),
        (["--seeds", ",".join(str(s) for s in range(1001))],
         TOO_MANY_SEEDS.format(flag="--seeds", count=1001, maximum=MAX_SEEDS)),
        (["--name", ".."], BAD_NAME.format(what="name", value="'..'",
                                           problem="'.' and '..' name directories, not runs")),
        (["--name", "a\nb"], "it contains a control character"),
    ],
    ids=["workers-0", "workers-negative", "threads-0", "seeds-huge", "confirm-seeds-1001", "seeds-digits",
         "seeds-list", "name-dotdot", "name-newline"],
)
def test_names_and_counts_out_of_range_are_refused_like_the_sweep_refuses_them(tmp_path, capsys, extra, message):
    config = _config(tmp_path)
    out_dir = tmp_path / "out"
    code = main(["tune", "--config", str(config), "--output-dir", str(out_dir), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("mr2 tune: error: ") and message in err and err.count("\n") == 1
    assert not out_dir.exists()


def test_the_phase_specs_are_every_candidate_on_the_phases_seed_pool(tuned):
    """The two sweeps behind the engine source: every candidate x the phase's seeds, no report of their
    own (tune writes the confirmation's, on the verdict's tiers)."""
    from mr2.sweep import plan_sweep

    request = _request(tuned.tmp / "out")
    config = load_config(tuned.config)
    for phase, seeds in (("selection", [0, 1, 2]), ("confirmation", [3, 4, 5])):
        spec = phase_spec(request, config, phase, workers=2)
        assert (spec.name, spec.workers, spec.output_dir) == (phase, 2, str(request.directory))
        points = plan_sweep(spec)
        assert sorted((p.label, p.seed) for p in points) == sorted((c, s) for c in QUICK for s in seeds)


def test_the_engine_path_and_the_python_path_make_the_same_choice_on_the_same_trials(tuned, tmp_path):
    """The Python API fed the engine runs' own predictions (a train_fn that returns each selection and
    confirmation run's predictions/val.npz and test.npz) chooses and advises what --config did, with the
    same scores, tiers and verdict: one driver."""
    from mr2.tune import TrialPredictions, tune

    assert tuned.code == 0, tuned.out + tuned.err
    directory = tuned.directory
    engine = json.loads((directory / "recommendation.json").read_text())

    def replay(candidate, seed):
        phase = "selection" if seed in (0, 1, 2) else "confirmation"
        run = directory / phase / f"{candidate.label}__seed={seed}" / "predictions"
        splits = {}
        for split in ("val", "test"):
            y_true, y_pred = _load(run / f"{split}.npz")
            splits[split] = {"y_true": y_true, "y_pred": y_pred}
        return TrialPredictions(val=splits["val"], test=splits["test"])

    result = tune(replay, num_classes=NUM_CLASSES, candidates="quick", seeds=3, confirm_seeds=3,
                  output_dir=tmp_path, name="p", stream=io.StringIO())
    python = result.record.to_dict()
    assert set(python) == set(engine)
    for key in ("adopt", "label", "method", "options", "loss_spec", "recommendation_is_erm", "use", "chosen",
                "reason", "criterion", "rule", "design", "failed", "verdict", "advice", "trainings"):
        assert python[key] == engine[key], key
    assert python["selection"] == engine["selection"]
    assert python["confirmation"]["seeds"] == engine["confirmation"]["seeds"]
    assert python["confirmation"]["figures"] == engine["confirmation"]["figures"]
    assert python["source"] == {"kind": "python"} and python["base_config"] is None
