"""``mr2.tune.tune`` (training code of your own) on simulated trials: the choice from validation
predictions only, the confirmation report and verdict, resume, executors, and every bad return of a
training function as a one-line error naming the trial."""

from __future__ import annotations

import functools
import io
import json
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from helpers.tune_trials import BASE, Y_TEST, Y_VAL, K, simulated
from helpers.tune_trials import predict as _predict
from mr2.tune import Candidate, TrialError, TrialPredictions, TuneInputError, tune
from mr2.tune.api import NO_SUBMIT, NOT_CALLABLE
from mr2.tune.design import Plan
from mr2.tune.request import (
    BAD_CANDIDATES,
    BAD_NUM_CLASSES,
    ENGINE_ONLY_CANDIDATE,
    OUTPUT_IS_FILE,
    make_request,
)
from mr2.tune.selection import TuneSelectionError, ValidationFigures, choose
from mr2.tune.trials import STALE_TRIAL, WRONG_TYPE, Y_TRUE_DIFFERS
from mr2.tune.verdict import seed_figures


def _expected_choice(seeds: list[int]):
    runs = {}
    for label in ("erm", "mr2-paper-c1", "mr2-logit_only-c1", "mr2-distance_1d-c1"):
        runs[label] = [ValidationFigures.from_predictions(f"{label}@{s}", s, Y_VAL, _predict(Y_VAL, label, s, "val"), K)
                       for s in seeds]
    return choose(runs, seeds=seeds)


def _replayed(seeds: int = 3, confirm_seeds: int = 3) -> tuple[Plan, list[tuple[str, str, int]]]:
    """The default design's plan fed the simulation directly (no tune, no files): what the tune must
    have asked for and decided. Selection trials give VALIDATION predictions, and their test
    predictions where the design's screen reuses them."""
    plan = make_request(num_classes=K, candidates="quick", seeds=seeds, confirm_seeds=confirm_seeds,
                        output_dir="unused", name="x").plan()
    asked = []
    while batch := plan.next_round():
        for item in batch:
            asked.append((item.phase, item.label, item.seed))
            if item.phase == "selection":
                y_pred = _predict(Y_VAL, item.label, item.seed, "val")
                reused = (seed_figures(Y_TEST, _predict(Y_TEST, item.label, item.seed, "test"), list(range(K)), K)
                          if plan.design.screen_reuse else None)
                plan.record_validation(item.label, item.seed, ValidationFigures.from_predictions(
                    f"{item.label}@{item.seed}", item.seed, Y_VAL, y_pred, K), test=reused)
            else:
                y_pred = _predict(Y_TEST, item.label, item.seed, "test")
                plan.record_test(item.label, item.seed, seed_figures(Y_TEST, y_pred, plan.hard_classes, K))
    return plan, asked


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("trials")
    result = tune(simulated, num_classes=K, candidates="quick", seeds=3, confirm_seeds=3, output_dir=out, name="sim",
                  class_names=[f"c{k}" for k in range(K)], stream=io.StringIO())
    return out, result


def test_the_python_api_chooses_on_validation_and_records_report_and_verdict(tuned):
    out, result = tuned
    directory = out / "sim"
    record = json.loads((directory / "recommendation.json").read_text())
    plan, asked = _replayed()
    expected = plan.choice
    advice = plan.advice()
    assert expected is not None and advice.chosen == "mr2-logit_only-c1"  # the simulation's lift is found
    assert record["chosen"]["label"] == advice.chosen and record["advice"] == json.loads(json.dumps(
        advice.to_dict()))
    assert record["trainings"] == len(asked)
    # Confirmed on fresh seeds: adopted, and the configuration to use is the chosen one.
    assert record["adopt"] is True and record["reason"] == "confirmed" and result.adopt
    assert record["label"] == record["use"]["label"] == advice.chosen and not record["recommendation_is_erm"]
    assert record["selection"]["candidates"] == [s.to_dict() for s in expected.scores]
    assert record["loss_spec"] == {"method": "mr2", "options": {"variant": "logit_only", "c_bar": 1.0}, "num_classes": K}
    assert record["source"] == {"kind": "python"} and record["num_classes"] == K
    assert record["base_config"] is None and record["mr2_version"]
    # The same fields as the engine path's record, plus loss_spec, source, num_classes, verdict.
    engine_fields = {"method", "options", "label", "recommendation_is_erm", "criterion", "rule", "candidate_set",
                     "selection", "confirmation", "base_config", "mr2_version", "git_commit"}
    assert engine_fields <= set(record)
    # Confirmation: ERM and the contenders on fresh seeds, reported from test predictions.
    methods = record["confirmation"]["figures"]["methods"]
    assert set(methods) == {"erm", *advice.contenders} and "mr2-logit_only-c1" in methods
    confirmed = {(label, seed) for phase, label, seed in asked if phase == "confirmation"}
    assert all(set(methods[m]["seeds"]) == {s for label, s in confirmed if label == m} for m in methods)
    assert Path(record["confirmation"]["report"]).is_file()
    assert ",c3," in (directory / "confirmation" / "report" / "per_class.csv").read_text()  # the class names
    # The verdict, from the confirmation's test predictions (an independent recomputation).
    verdict = record["verdict"]
    hard = plan.hard_classes
    erm_hard = [float(np.mean([(_predict(Y_TEST, "erm", s, "test") == Y_TEST)[k == Y_TEST].mean() for k in hard]))
                for s in (3, 4, 5)]
    seeds = verdict["seeds"]
    assert verdict["hard_classes"] == hard and set(seeds) <= {3, 4, 5} and len(seeds) >= 2
    assert verdict["hard_tier"]["reference"] == pytest.approx([erm_hard[s - 3] for s in seeds], abs=1e-12)
    assert verdict["outcome"] == result.verdict.outcome == "confirmed"
    # Trials on disk in the predictions format of `mr2 report --predictions`.
    from mr2.report.predictions import read_predictions

    stored = read_predictions(directory / "trials" / "selection" / "erm" / "seed=0" / "val.npz")
    assert np.array_equal(stored.y_true, Y_VAL) and stored.y_pred.dtype == np.int64


def test_the_python_dry_run_describes_the_plan_writes_nothing_and_sees_finished_trials(tuned, tmp_path):
    from mr2.tune import describe_tune

    fresh = describe_tune(simulated, num_classes=K, candidates="quick", seeds=3, confirm_seeds=3,
                          output_dir=tmp_path, name="sim")
    assert list(tmp_path.iterdir()) == []  # nothing written
    plan = make_request(num_classes=K, candidates="quick", seeds=3, confirm_seeds=3, output_dir=tmp_path,
                        name="sim").plan()
    first = plan.next_round()
    assert f"at most {plan.max_trainings()};" in fresh and f"first round ({len(first)} trials):" in fresh
    assert fresh.count(" to run") == len(first) and "finished" not in fresh
    assert "your train_fn runs the losses" in fresh
    out, _ = tuned  # the same tune, run: its first round is on disk
    done = describe_tune(simulated, num_classes=K, candidates="quick", seeds=3, confirm_seeds=3, output_dir=out,
                         name="sim")
    assert done.count(" finished") == len(first) and " to run" not in done
    with pytest.raises(TuneInputError, match="seeds"):
        describe_tune(simulated, num_classes=K, seeds=[1, 1], output_dir=tmp_path, name="x")


def test_test_predictions_of_selection_trials_cannot_change_the_choice_and_a_rerun_resumes(tuned, capsys):
    out, _ = tuned
    directory = out / "sim"
    before = (directory / "recommendation.json").read_text()
    # Make one other candidate perfect on every selection trial's TEST split and all others worthless
    # (but the first selection seed's: the default design's screen counts those, test_design_reuse.py).
    favoured = "mr2-paper-c1"
    for path in (directory / "trials" / "selection").glob("*/seed=*/test.npz"):
        if path.parent.name == "seed=0":
            continue
        label = path.parent.parent.name
        y_pred = Y_TEST if label == favoured else (Y_TEST + 1) % K
        np.savez(path, y_true=Y_TEST, y_pred=y_pred)
    calls = []

    @functools.wraps(simulated)  # the same training function, counted: its trials are reused
    def counting(candidate, seed):
        calls.append((candidate.label, seed))
        return simulated(candidate, seed)

    tune(counting, num_classes=K, candidates="quick", seeds=3, confirm_seeds=3, output_dir=out, name="sim",
         class_names=[f"c{k}" for k in range(K)])
    assert calls == []  # every trial reused
    assert (directory / "recommendation.json").read_text() == before
    trainings = json.loads(before)["trainings"]
    # the default design: 1 selection seed per candidate, ERM on 2; a confirmation look of ERM and the
    # 3 contenders at least
    assert capsys.readouterr().out.count("(finished earlier)") == trainings >= 5 + 4


def test_a_failed_candidate_is_ruled_out_and_a_rerun_retries_it_with_an_executor(tmp_path):
    calls = []
    failing = [True]

    def failing_once(candidate, seed):
        calls.append((candidate.label, seed))
        if candidate.label == "mr2-logit_only-c1" and seed == 0 and failing[0]:
            raise RuntimeError("node lost\nout of memory")
        return simulated(candidate, seed)

    stream = io.StringIO()
    first = tune(failing_once, num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path,
                 name="t", stream=stream)
    # Seed-major: every candidate's first seed before any second seed, ERM first.
    assert calls[:4] == [("erm", 0), ("mr2-paper-c1", 0), ("mr2-logit_only-c1", 0), ("mr2-distance_1d-c1", 0)]
    assert first.failed == {"mr2-logit_only-c1": "RuntimeError: out of memory"}
    record = json.loads(first.recommendation_file.read_text())
    assert record["failed"]["mr2-logit_only-c1"]["reason"] == "RuntimeError: out of memory"
    assert record["failed"]["mr2-logit_only-c1"]["phase"] == "selection"
    assert "mr2-logit_only-c1 is not eligible: failed (RuntimeError: out of memory)" in stream.getvalue()
    scores = {c["label"]: c for c in record["selection"]["candidates"]}
    assert "mr2-logit_only-c1" not in scores or not scores["mr2-logit_only-c1"]["eligible"]
    assert first.choice is not None and first.choice.recommended != "mr2-logit_only-c1"
    calls.clear()
    failing[0] = False
    with ThreadPoolExecutor(2) as pool:
        result = tune(failing_once, num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path,
                      name="t", executor=pool, stream=io.StringIO())
    assert ("mr2-logit_only-c1", 0) in calls and ("erm", 0) not in calls  # finished trials are reused
    assert result.failed == {}
    assert result.choice is not None and result.choice.recommended == _expected_choice([0, 1]).recommended


def test_erm_failing_ends_the_tune(tmp_path):
    def erm_fails(candidate, seed):
        if candidate.is_reference:
            raise RuntimeError("CUDA error")
        return simulated(candidate, seed)

    with pytest.raises(TuneSelectionError, match=r"the reference 'erm' failed .selection, seed 0: RuntimeError: "
                                                 "CUDA error.; there is nothing to compare the candidates with"):
        tune(erm_fails, num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path, name="t",
             stream=io.StringIO())
    assert not (tmp_path / "t" / "recommendation.json").exists()


def _returning(value):
    def train_fn(candidate, seed):
        return value(candidate, seed) if callable(value) else value

    return train_fn


def _split(y, **kwargs):
    return {"y_true": y, **kwargs}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda c, s: {"val": 1}, WRONG_TYPE.format(trial="selection/erm@0", kind="dict", log="")),
        (lambda c, s: TrialPredictions(val=_split(Y_VAL, logits=np.zeros((Y_VAL.size, K + 1))),
                                       test=_split(Y_TEST, y_pred=Y_TEST)),
         f"trial selection/erm@0, val split: logits have {K + 1} columns but num_classes is {K} (wrong K"),
        (lambda c, s: TrialPredictions(val=_split(Y_VAL, y_pred=Y_VAL),
                                       test=_split(Y_TEST, y_pred=Y_TEST + 1)),
         f"trial selection/erm@0, test split: y_pred holds class ids from 1 to {K}, outside [0, {K}) (wrong K?)"),
        (lambda c, s: TrialPredictions(val=_split(Y_VAL, y_pred=Y_VAL, logits=np.zeros((Y_VAL.size, K))),
                                       test=_split(Y_TEST, y_pred=Y_TEST)),
         "give exactly one of y_pred"),
        (lambda c, s: TrialPredictions(val=_split(Y_VAL.astype(float), y_pred=Y_VAL),
                                       test=_split(Y_TEST, y_pred=Y_TEST)),
         "y_true must hold integer class ids; got dtype float64"),
        (lambda c, s: TrialPredictions(val={"y_true": Y_VAL, "preds": Y_VAL}, test=_split(Y_TEST, y_pred=Y_TEST)),
         "a dict of y_true and y_pred or logits is expected; got keys ['preds', 'y_true']"),
    ],
    ids=["wrong-type", "wrong-k-logits", "wrong-k-ids", "both", "float-labels", "typo-key"],
)
def test_a_bad_return_of_the_first_trial_is_one_line_and_writes_nothing(tmp_path, make, message):
    with pytest.raises(TrialError) as caught:
        tune(_returning(make), num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path / "out", name="t",
             stream=io.StringIO())
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out" / "t" / "trials").exists()


def test_y_true_differing_between_trials_names_both_trials(tmp_path):
    def shuffled(candidate, seed):
        result = simulated(candidate, seed)
        if candidate.label == "mr2-paper-c1" and seed == 0:  # its one selection seed
            return TrialPredictions(val=result.val, test={"y_true": Y_TEST[::-1], "y_pred": Y_TEST})
        return result

    with pytest.raises(TrialError) as caught:
        tune(shuffled, num_classes=K, candidates="quick", seeds=2, confirm_seeds=2, output_dir=tmp_path, name="t",
             stream=io.StringIO())
    differ = int((Y_TEST[::-1] != Y_TEST).sum())
    assert str(caught.value) == Y_TRUE_DIFFERS.format(trial="selection/mr2-paper-c1@0", split="test",
                                                      first="selection/erm@0",
                                                      detail=f"{differ} of {Y_TEST.size} labels differ", log="")
    assert not (tmp_path / "t" / "trials" / "selection" / "mr2-paper-c1" / "seed=0").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 1}, BAD_NUM_CLASSES.format(maximum=100_000, value=1)),
        ({"num_classes": 10**9}, BAD_NUM_CLASSES.format(maximum=100_000, value=10**9)),
        ({"candidates": "all"}, "unknown candidate set 'all'"),
        ({"candidates": [Candidate("mr2-x", "mr2")]}, BAD_CANDIDATES.format(value=[Candidate("mr2-x", "mr2")])),
        ({"candidates": [Candidate("erm", "erm"), Candidate("jtt", "jtt")]},
         ENGINE_ONLY_CANDIDATE.format(label="jtt", method="jtt")),
        ({"seeds": 1}, "seeds needs at least 2 seeds"),
        ({"seeds": 5000}, "seeds asks for 5000 seeds; at most 1000"),
        ({"seeds": [0, 1], "confirm_seeds": [1, 2]}, "overlap in [1]"),
        ({"name": ".."}, "is not a usable name"),
        ({"criterion": "best"}, "unknown criterion 'best'"),
        ({"class_names": ["a", "a", "b", "c", "d", "e"]}, "class_names must be 6 distinct non-empty strings"),
        ({"train_fn": 3}, NOT_CALLABLE.format(kind="int")),
        ({"executor": object()}, NO_SUBMIT.format(kind="object")),
        ({"output_dir": Path(__file__)}, OUTPUT_IS_FILE.format(path=Path(__file__))),
    ],
    ids=["k-1", "k-huge", "set", "no-erm", "engine-only", "one-seed", "many-seeds", "overlap", "name", "criterion",
         "class-names", "not-callable", "executor", "output-is-a-file"],
)
def test_bad_arguments_are_one_line_and_write_nothing(tmp_path, kwargs, message):
    arguments = {"num_classes": K, "output_dir": tmp_path / "out", "name": "t", **kwargs}
    train_fn = arguments.pop("train_fn", simulated)
    with pytest.raises(TuneInputError) as caught:
        tune(train_fn, **arguments)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_the_seed_pools_default_to_the_designs_as_the_docstring_says(tmp_path):
    """tune's docstring names the default design's seed pools (it said 3 and 9 after the design had
    moved to 2 and 14); the dry run is what the call would plan."""
    from mr2.tune import describe_tune
    from mr2.tune.design import DEFAULT_DESIGN

    doc = " ".join((tune.__doc__ or "").split())
    assert f"``design.selection_seeds``: {DEFAULT_DESIGN.selection_seeds} for the default design" in doc
    assert f"``design.confirmation_seeds``: {DEFAULT_DESIGN.confirmation_seeds} for the default design" in doc
    request = make_request(num_classes=K, output_dir=tmp_path, name="t")
    assert (len(request.seeds), len(request.confirm_seeds)) == (DEFAULT_DESIGN.selection_seeds,
                                                                DEFAULT_DESIGN.confirmation_seeds)
    assert describe_tune(simulated, num_classes=K, output_dir=tmp_path, name="t") == describe_tune(
        simulated, num_classes=K, output_dir=tmp_path, name="t", seeds=request.seeds,
        confirm_seeds=request.confirm_seeds)


def test_a_trial_directory_of_another_tune_is_refused_not_reused(tmp_path):
    tune(simulated, num_classes=K, candidates="erm,mr2-paper-c1", seeds=2, confirm_seeds=2, output_dir=tmp_path,
         name="t", stream=io.StringIO())
    record = tmp_path / "t" / "recommendation.json"
    before = record.read_text()
    with pytest.raises(TrialError) as caught:
        tune(simulated, num_classes=K + 1, candidates="erm,mr2-paper-c1", seeds=2, confirm_seeds=2,
             output_dir=tmp_path, name="t", stream=io.StringIO())
    assert str(caught.value) == STALE_TRIAL.format(path=tmp_path / "t" / "trials" / "selection" / "erm" / "seed=0",
                                                   key="loss_spec",
                                                   found={"method": "erm", "options": {}, "num_classes": K},
                                                   expected={"method": "erm", "options": {}, "num_classes": K + 1})
    assert record.read_text() == before


def _drifting(candidate: Candidate, seed: int) -> TrialPredictions:
    """ERM's hard classes move between the selection seeds (classes 4 and 5 hardest) and the
    confirmation seeds (classes 0 and 1 hardest); logit_only lifts whichever classes are hard then."""
    base = BASE if seed < 3 else BASE[::-1].copy()
    lift = 0.25 * (base < 0.7) if candidate.label == "mr2-logit_only-c1" else 0.0

    def draw(y: np.ndarray, split: str) -> np.ndarray:
        rng = np.random.default_rng([zlib.crc32(candidate.label.encode()), seed, len(split)])
        p = np.clip(base + lift, 0, 1)[y]
        return np.where(rng.random(y.size) < p, y, (y + 1) % K)

    return TrialPredictions(val={"y_true": Y_VAL, "y_pred": draw(Y_VAL, "val")},
                            test={"y_true": Y_TEST, "y_pred": draw(Y_TEST, "test")})


def test_the_confirmation_table_uses_the_verdicts_hard_tier(tmp_path):
    """The verdict's hard classes are fixed at selection (ERM's selection runs); the confirmation
    report uses the same tiers, so its hard column is the verdict's hard tier even when the
    confirmation's own ERM runs would rank other classes hardest (they did: the old report ranked on
    them and needed a note)."""
    stream = io.StringIO()
    result = tune(_drifting, num_classes=K, candidates="erm,mr2-logit_only-c1", seeds=3, confirm_seeds=3,
                  output_dir=tmp_path, name="drift", stream=stream)
    assert result.verdict is not None and sorted(result.verdict.hard_classes) == [4, 5]
    report = json.loads((tmp_path / "drift" / "confirmation" / "report" / "report.json").read_text())
    assert report["tiers"]["members"]["hard"] == [4, 5]
    assert "Note:" not in stream.getvalue()
    # The table's hard-tier figure of each method is the verdict's per-seed hard tier, averaged.
    methods = report["methods"]
    erm_hard = np.mean(result.verdict.reference_hard)
    assert methods["erm"]["mean"]["tier:hard"] == pytest.approx(erm_hard, abs=1e-12)
    assert methods["mr2-logit_only-c1"]["mean"]["tier:hard"] == pytest.approx(np.mean(result.verdict.chosen_hard),
                                                                              abs=1e-12)


def test_a_finished_trial_whose_predictions_are_damaged_is_trained_again(tmp_path):
    """Issue 38: resume over a finished trial whose val.npz is missing or corrupt used to be a
    traceback; the trial is trained again, saying so."""
    arguments = {"num_classes": K, "candidates": "erm,mr2-paper-c1", "seeds": 2, "confirm_seeds": 2,
                 "output_dir": tmp_path, "name": "t"}
    tune(simulated, **arguments, stream=io.StringIO())
    trials = tmp_path / "t" / "trials" / "selection"
    (trials / "erm" / "seed=0" / "val.npz").write_bytes(b"not a zip archive")
    (trials / "mr2-paper-c1" / "seed=0" / "test.npz").unlink()
    calls = []

    @functools.wraps(simulated)  # the same training function, counted: its trials are reused
    def counting(candidate, seed):
        calls.append((candidate.label, seed))
        return simulated(candidate, seed)

    stream = io.StringIO()
    result = tune(counting, **arguments, stream=stream)
    assert sorted(calls) == [("erm", 0), ("mr2-paper-c1", 0)]
    printed = stream.getvalue()
    assert "selection/erm@0 finished earlier but its stored predictions in" in printed
    assert "cannot be read (" in printed and "training it again" in printed
    assert result.recommendation_file.is_file()
