"""``mr2 tune`` end to end on a small .npz: selection, confirmation, recommendation.json, resume, and
proof that test numbers cannot reach the choice; bad input is exit 2 before anything is written."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers.sweeps import write_npz
from mr2.cli.main import main
from mr2.config import load_config
from mr2.config.names import BAD_NAME
from mr2.sweep import plan_sweep
from mr2.sweep.launcher import NOT_KEY_VALUE, SLURM_ONLY
from mr2.tune.run import (
    BAD_COUNT,
    BAD_SEEDS,
    MAX_SEEDS,
    MISSING_SEEDS,
    NO_VALIDATION_SPLIT,
    NOT_ACCEPTED,
    OLD_RUNS,
    OVERLAPPING_SEEDS,
    TOO_FEW_SEEDS,
    TOO_MANY_SEEDS,
    UNKNOWN_CRITERION,
    make_request,
    read_engine_runs,
    selection_spec,
)
from mr2.tune.selection import choose

#: Fields of final.json that describe the test split (everything but the validation section and the
#: run's identity).
TEST_FIELDS = ("overall_accuracy", "per_class_accuracy", "confusion_matrix", "class_statistics", "logit_margins")


def _config(tmp: Path, **data: object) -> Path:
    npz = write_npz(tmp / "data.npz", num_classes=6, dim=8, train_per_class=48, test_per_class=20)
    config = {
        "data": {"name": "arrays", "root": str(npz), "val_fraction": 0.25, "batch_size": 32,
                 "eval_batch_size": 256, **data},
        "model": {"name": "mlp", "options": {"hidden_dims": [32]}},
        "optim": {"name": "sgd", "lr": 0.05, "epochs": 3},
        "device": "cpu",
        "deterministic": True,
        "log_every": 5,
    }
    file = tmp / "run.yaml"
    file.write_text(yaml.safe_dump(config))
    return file


def _chosen(request):
    """The rule's choice, recomputed from every selection run's validation predictions."""
    return choose(read_engine_runs(plan_sweep(selection_spec(request))), "hard_tier", seeds=request.seeds)


def _groups(request) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for point in plan_sweep(selection_spec(request)):
        groups.setdefault(point.label, []).append(point.run_dir)
    return groups


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tune")
    config = _config(tmp)
    args = ["tune", "--config", str(config), "--candidates", "quick", "--seeds", "3", "--confirm-seeds", "3",
            "--workers", "2", "--output-dir", str(tmp / "out"), "--name", "t"]
    return tmp, config, args


def test_tune_selects_on_validation_confirms_on_fresh_seeds_and_records_it(tuned, capsys):
    tmp, config, args = tuned
    assert main(args) == 0
    out = capsys.readouterr().out
    directory = tmp / "out" / "t"
    record = json.loads((directory / "recommendation.json").read_text())
    # The rule is stated before anything runs, and again with the result.
    rule = record["rule"].split(".")[0]
    assert out.index("Rule: ") < out.index("== selection") < out.rindex("Rule: ")
    assert rule.split()[0] in out
    # The choice, recomputed from the validation sections, is the recorded one.
    request = make_request(load_config(config), name="t", output_dir=str(tmp / "out"), candidate_set="quick")
    choice = _chosen(request)
    assert record["selection"]["recommended"] == choice.recommended == record["label"]
    assert record["selection"]["candidates"] == [s.to_dict() for s in choice.scores]
    assert [c["label"] for c in record["selection"]["candidates"]] == [
        "erm", "mr2-paper-c1", "mr2-logit_only-c1", "mr2-distance_1d-c1"]
    assert all(len(c["runs"]) == 3 for c in record["selection"]["candidates"])
    assert record["selection"]["seeds"] == [0, 1, 2] and record["confirmation"]["seeds"] == [3, 4, 5]
    assert record["criterion"] == "hard_tier" and record["mr2_version"]
    assert choice.explanation in out
    # The ready-to-paste block and the confirmation (test split, the chosen config and ERM).
    # The verdict, from the confirmation runs' per-sample test predictions (predictions/test.npz).
    verdict = record["verdict"]
    assert verdict["seeds"] == [3, 4, 5] and verdict["hard_classes"] == record["selection"]["hard_tier_classes"]
    assert verdict["outcome"] in ("confirmed", "supported", "not confirmed", "contradicted", "nothing to confirm")
    assert f"): {verdict['outcome'].upper()}" in out
    # The ready-to-paste block only where the verdict allows it (confirmed; supported with a caveat).
    if verdict["outcome"] in ("confirmed", "supported"):
        block = out.split("Paste into your run configuration", 1)[1].split(":\n", 1)[1]
        method = yaml.safe_load(textwrap.dedent(block.split("Confirmation on fresh seeds")[0]))["method"]
        assert method == {"name": record["method"], "options": record["options"]}
        assert load_config(None, [f"method.name={method['name']}"]).method.name == method["name"]
    else:
        assert "Paste into your run configuration" not in out
    # The figures come from the confirmation sweep's result in memory: the same as its report.json.
    report_file = directory / "confirmation" / "report" / "report.json"
    report = json.loads(report_file.read_text())
    assert record["confirmation"]["report"] == str(report_file)
    assert record["confirmation"]["figures"] == {key: report[key] for key in ("reference", "tiers", "methods")}
    methods = record["confirmation"]["figures"]["methods"]
    expected = {"erm"} | {record["label"]}
    assert set(methods) == expected
    for label in expected:
        assert methods[label]["seeds"] == [3, 4, 5]
    assert "| method | seeds | overall | easy | medium | hard |" in out
    confirmation_runs = sorted(p.name for p in (directory / "confirmation").iterdir() if "__seed=" in p.name)
    assert confirmation_runs == sorted(f"{label}__seed={s}" for label in expected for s in (3, 4, 5))


def test_test_numbers_cannot_change_the_choice_and_a_rerun_reuses_every_run(tuned, capsys):
    tmp, config, args = tuned
    directory = tmp / "out" / "t"
    before = (directory / "recommendation.json").read_text()
    request = make_request(load_config(config), name="t", output_dir=str(tmp / "out"), candidate_set="quick")
    groups = _groups(request)
    choice = _chosen(request).to_dict()
    # Corrupt every test field of every selection run: make one candidate perfect on test and every
    # other one worthless, the opposite of whatever the validation split said.
    favoured = next(label for label in groups if label != choice["recommended"])
    for label, paths in groups.items():
        for path in paths:
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
            with np.load(path / "predictions" / "test.npz") as data:
                y_true = data["y_true"]
            np.savez(path / "predictions" / "test.npz", y_true=y_true,
                     y_pred=y_true if value == 1.0 else (y_true + 1) % k)
    assert _chosen(request).to_dict() == choice
    # The whole command again: every run is reused and the recommendation is byte-identical.
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "12 skipped (finished earlier)" in out and "0 run(s) trained" in out
    assert (directory / "recommendation.json").read_text() == before


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
    tune's sweeps: every selection and confirmation run is a finished submitit job, and the
    recommendation is the rule's choice from those runs' validation sections."""
    pytest.importorskip("submitit", reason="submitit is the cluster extra (pip install 'mr2[cluster]')")
    from mr2.sweep.cluster import read_jobs

    config = _config(tmp_path)
    out_dir = tmp_path / "out"
    code = main(["tune", "--config", str(config), "--candidates", "quick", "--seeds", "2", "--confirm-seeds", "2",
                 "--threads-per-run", "1", "--output-dir", str(out_dir), "--name", "t", "--launcher", "slurm",
                 "--launcher-option", "executor=local", "--launcher-option", "timeout_min=10"])
    out = capsys.readouterr().out
    assert code == 0, out
    directory = out_dir / "t"
    record = json.loads((directory / "recommendation.json").read_text())
    request = make_request(load_config(config), name="t", output_dir=str(out_dir), seeds="2", confirm_seeds="2",
                           candidate_set="quick")
    assert record["selection"]["recommended"] == _chosen(request).recommended
    for phase, count in (("selection", 4 * 2), ("confirmation", 2 * len({"erm", record["label"]}))):
        jobs = read_jobs(directory / phase)["runs"]
        assert len(jobs) == count, (phase, sorted(jobs))
        assert {entry["state"] for entry in jobs.values()} == {"done"}
        for run in jobs:
            assert (directory / phase / run / "final.json").is_file()
            assert "=== mr2 sweep (submitit job" in (directory / phase / run / "train.log").read_text()


def _finished_copy(tuned, tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of the module's finished tune directory (every run finished) and the arguments that tune
    it in place."""
    import shutil

    tmp, _config_file, args = tuned
    if not (tmp / "out" / "t" / "recommendation.json").is_file():
        assert main(args) == 0
    shutil.copytree(tmp / "out" / "t", tmp_path / "out" / "t")
    copied = [*args]
    copied[copied.index("--output-dir") + 1] = str(tmp_path / "out")
    return tmp_path / "out" / "t", copied


def test_a_rerun_with_another_configuration_scores_none_of_the_refused_runs(tuned, tmp_path, capsys):
    """Rerun a finished tune with ``--set optim.lr=0.07``: its sweep refuses every
    selection run (finished with lr 0.05), so none is scored, nothing is confirmed at lr 0.07 and the
    recommendation made at lr 0.05 stays as it was."""
    directory, args = _finished_copy(tuned, tmp_path)
    before = (directory / "recommendation.json").read_text()
    confirmation = sorted(p.name for p in (directory / "confirmation").iterdir())
    capsys.readouterr()
    assert main([*args, "--set", "optim.lr=0.07"]) == 1
    out = capsys.readouterr().out
    refused = [line for line in out.splitlines() if line.startswith("FAILED ")]
    assert len(refused) == 12 and all("holds a finished run with a different configuration" in line
                                      for line in refused)
    assert "no recommendation: " in out and "== confirmation" not in out
    assert NOT_ACCEPTED.format(count=12) in out
    assert (directory / "recommendation.json").read_text() == before
    assert json.loads(before)["base_config"]["optim"]["lr"] == 0.05
    assert sorted(p.name for p in (directory / "confirmation").iterdir()) == confirmation


def test_a_selection_run_locked_elsewhere_is_not_scored_and_its_candidate_is_not_eligible(
        tuned, tmp_path, capsys):
    """A selection run owned by another process (its lock held) is not scored, even
    if it finishes meanwhile; its candidate lacks that seed, so it is not eligible, and the record says
    which seed is missing."""
    from mr2.rundir import RunLock

    directory, args = _finished_copy(tuned, tmp_path)
    label = "mr2-logit_only-c1"
    run_dir = directory / "selection" / f"{label}__seed=1"
    (run_dir / "final.json").unlink()
    capsys.readouterr()
    with RunLock(run_dir):
        code = main(args)
    out = capsys.readouterr().out
    assert code == 1
    assert f"RUNNING ELSEWHERE {label}__seed=1" in out
    record = json.loads((directory / "recommendation.json").read_text())
    assert record["selection"]["missing_seeds"] == {label: [1]}
    entry = next(c for c in record["selection"]["candidates"] if c["label"] == label)
    assert entry["eligible"] is False and entry["runs"] == [f"{label}__seed=0", f"{label}__seed=2"]
    assert record["label"] != label
    assert MISSING_SEEDS.format(label=label, seeds=[1]) in out
    others = [c for c in record["selection"]["candidates"] if c["label"] != label]
    assert all(len(c["runs"]) == 3 for c in others)


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
        (["--name", ".."], BAD_NAME.format(what="--name", value="'..'",
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


def test_the_engine_path_and_the_python_path_make_the_same_choice_on_the_same_trials(tuned, tmp_path):
    """The Python API fed the engine runs' own predictions (a train_fn that returns each
    selection and confirmation run's predictions/val.npz and test.npz) chooses what --config chose, with
    the same scores, tiers and verdict."""
    import io

    from mr2.tune import TrialPredictions, tune

    tmp, _config_file, args = tuned
    directory = tmp / "out" / "t"
    if not (directory / "recommendation.json").is_file():
        assert main(args) == 0
    engine = json.loads((directory / "recommendation.json").read_text())

    def replay(candidate, seed):
        phase = "selection" if seed in (0, 1, 2) else "confirmation"
        run = directory / phase / f"{candidate.label}__seed={seed}" / "predictions"
        splits = {}
        for split in ("val", "test"):
            with np.load(run / f"{split}.npz") as data:
                splits[split] = {"y_true": data["y_true"].astype(np.int64), "y_pred": data["y_pred"].astype(np.int64)}
        return TrialPredictions(val=splits["val"], test=splits["test"])

    python = tune(replay, num_classes=6, candidates="quick", seeds=3, confirm_seeds=3, output_dir=tmp_path, name="p",
                  stream=io.StringIO()).record
    assert python["label"] == engine["label"]
    for key in ("recommended", "tiers", "split_tiers", "hard_tier_classes", "margin", "threshold", "tier_rule"):
        assert python["selection"].get(key) == engine["selection"].get(key), key
    assert [(c["label"], c["scores"], c["eligible"]) for c in python["selection"]["candidates"]] == [
        (c["label"], c["scores"], c["eligible"]) for c in engine["selection"]["candidates"]]
    assert python["verdict"] == engine["verdict"]


def test_runs_of_an_older_mr2_without_predictions_fall_back_and_say_so(tuned, tmp_path, capsys):
    """Runs finished before the engine wrote predictions/: the selection ranks and scores on the same
    validation samples (final.json's per-class figures) and says so; the confirmation gets no verdict,
    and the record says which run lacks its test predictions."""
    import shutil

    directory, args = _finished_copy(tuned, tmp_path)
    for predictions in directory.glob("*/*__seed=*/predictions"):
        shutil.rmtree(predictions)
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert OLD_RUNS in out
    record = json.loads((directory / "recommendation.json").read_text())
    assert record["selection"]["tier_rule"] == "same_samples" and "same samples" in record["rule"]
    assert record["verdict"] is None and record["verdict_error"].endswith(
        "has no predictions/test.npz (finished by an older mr2); delete it and rerun the tune for a verdict")
