"""``Design.screen_reuse`` (issue 44, part 4): the screen's first seed is the selection runs' test
figures (a selection trial predicts both splits), so a screen of 2 seeds trains 1 fresh seed; the
finalist is still tested on fresh seeds only."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mr2.tune.design import FINALIST, SCREENED_OUT, Design, Plan, nominal_levels
from mr2.tune.selection import TuneSelectionError, ValidationFigures
from mr2.tune.verdict import SeedFigures, seed_figures

K = 6
N_HALF = 10
N_TEST = 200
LABELS = ["erm", "a", "b", "c"]
ERM_TEST = np.array([0.9, 0.9, 0.8, 0.8, 0.5, 0.5])  # classes 4, 5: the test hard tier
DESIGN = Design(selection_looks=(1,), contenders=3, screen=1, screen_reuse=True, confirmation_looks=(3, 6),
                futility=0.5, selection_guard="none")


def _val(label: str, seed: int) -> ValidationFigures:
    per_class = [0.4, 0.4, 0.7, 0.7, 0.9, 0.9]
    correct = tuple(round(a * N_HALF) for a in per_class)
    return ValidationFigures(f"{label}@{seed}", seed, sum(per_class) / K, tuple(per_class),
                             half_correct=(correct, correct), half_count=((N_HALF,) * K, (N_HALF,) * K))


def _per_class(label: str, seed: int, gain: dict[str, dict[int, float]]) -> np.ndarray:
    """A run's per-class test accuracy: ERM_TEST, a seed wobble, and ``gain[label][seed]`` (or
    ``gain[label][-1]`` for any seed) on classes 4 and 5."""
    wobble = 0.01 * math.sin(1.7 * seed + 3 * len(label))
    extra = gain.get(label, {})
    g = extra.get(seed, extra.get(-1, 0.0))
    return np.rint((ERM_TEST + wobble + np.where(np.arange(K) >= 4, g, 0.0)) * N_TEST) / N_TEST


def _figures(per_class: np.ndarray, hard: list[int]) -> SeedFigures:
    correct = np.rint(per_class * N_TEST)
    y_true = np.repeat(np.arange(K), N_TEST)
    y_pred = np.where(np.arange(N_TEST)[None, :] < correct[:, None], np.arange(K)[:, None],
                      (np.arange(K)[:, None] + 1) % K).reshape(-1)
    return seed_figures(y_true, y_pred, hard, K)


def _drive(plan: Plan, gain: dict[str, dict[int, float]]) -> list[list[tuple[str, str, int]]]:
    rounds = []
    while requests := plan.next_round():
        rounds.append([(r.phase, r.label, r.seed) for r in requests])
        for r in requests:
            if r.phase == "selection":  # as the driver does: the run's test split on every class
                plan.record_validation(r.label, r.seed, _val(r.label, r.seed),
                                       test=_figures(_per_class(r.label, r.seed, gain), list(range(K))))
            else:
                plan.record_test(r.label, r.seed, _figures(_per_class(r.label, r.seed, gain), plan.hard_classes))
    return rounds


def test_the_screen_counts_the_selection_seeds_test_runs_and_trains_one_fresh_seed():
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=DESIGN)
    # On the selection seed 5, c gains +0.10 (only there); b gains +0.04 on every seed; a nothing.
    gain = {"b": {-1: 0.04}, "c": {5: 0.10}}
    rounds = _drive(plan, gain)
    advice = plan.advice()
    # selection: 4 runs on seed 5 and ERM on 6; the screen: 1 fresh seed (10) for ERM and 3 contenders;
    # the finalist on the seeds after it, 11-13.
    assert [len(r) for r in rounds[:3]] == [5, 4, 6]
    assert {s for _, _, s in rounds[1]} == {10}
    assert {s for _, _, s in rounds[2]} == {11, 12, 13} and {label for _, label, _ in rounds[2]} == {"erm", "c"}
    screen = {look.contender: look for look in advice.looks if look.look == 0}
    assert screen["c"].seeds == [5, 10] and screen["b"].seeds == [5, 10]
    # the float64 oracle of the screen's mean changes, on the hard tier ranked on ERM's screen runs
    erm = np.mean([_per_class("erm", s, gain) for s in (5, 10)], axis=0)
    hard = [4, 5]
    assert sorted(int(k) for k in np.argsort(erm)[:2]) == hard == plan.hard_classes
    for label in ("a", "b", "c"):
        expected = np.mean([_per_class(label, s, gain)[hard].mean() - _per_class("erm", s, gain)[hard].mean()
                            for s in (5, 10)])
        assert screen[label].mean_difference == pytest.approx(expected, abs=1e-12)
    # c's mean over the screen (+0.05) beats b's (+0.04): c is the finalist, and on its fresh seeds
    # it gains nothing, so it is not adopted: the selection seed's luck does not reach the test
    assert screen["c"].decision == FINALIST and screen["b"].decision == SCREENED_OUT
    assert advice.verdict is not None and advice.verdict.seeds[0] == 11 and 5 not in advice.verdict.seeds
    assert not advice.adopt
    assert advice.reused_seeds == [5] and advice.screen_seeds == [10]
    assert "the first selection seed's among them" in advice.ruled_out["b"]


def test_a_finalist_that_gains_on_every_seed_is_adopted_at_the_whole_alpha():
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=DESIGN)
    rounds = _drive(plan, {"b": {-1: 0.06}})
    advice = plan.advice()
    assert (advice.adopt, advice.use) == (True, "b")
    assert advice.verdict is not None and advice.verdict.seeds == [11, 12, 13]
    assert {label for _, label, _ in rounds[2]} == {"erm", "b"}
    assert advice.looks[-1].boundary == pytest.approx(nominal_levels([0.5, 1.0], 0.05, "obrien_fleming")[0])
    # 5 selection + 4 screen + 2 x 3 finalist; at most 5 + 4 + 2 x 6
    assert plan.trainings == 15 and plan.max_trainings() == 5 + 4 + 2 * 6


def test_only_the_first_selection_seeds_test_figures_are_needed():
    """The screen reuses the first selection seed's runs: a trial of that seed without its test figures
    is refused; ERM's second selection seed needs none (nothing reads them)."""
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=DESIGN)
    requests = plan.next_round()
    first = next(r for r in requests if r.seed == 5)
    with pytest.raises(TuneSelectionError, match="reuses the selection runs' test figures"):
        plan.record_validation(first.label, first.seed, _val(first.label, first.seed))
    for r in requests:
        test = _figures(_per_class(r.label, r.seed, {}), list(range(K))) if r.seed == 5 else None
        plan.record_validation(r.label, r.seed, _val(r.label, r.seed), test=test)
    assert any(r.seed == 6 for r in requests)
    assert {r.seed for r in plan.next_round()} == {10}  # the screen's round is out


@pytest.mark.parametrize("bad, match", [
    ({"screen": 1}, "screen 1 must be 0"),
    ({"screen": 0, "screen_reuse": True}, "screen_reuse needs"),
    ({"screen": 1, "screen_reuse": True, "selection_looks": (2,)}, "screen_reuse needs"),
    ({"screen": 1, "screen_reuse": True, "screen_tiers": False}, "screen_reuse needs"),
])
def test_invalid_reuse_designs_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        Design(**{"selection_looks": (1,), "contenders": 3, **bad})


def test_the_printed_rule_and_the_advice_say_where_the_screens_seeds_come_from():
    from mr2.tune.text import design_text, what_happened

    text = design_text(DESIGN)
    assert ("A screen of 2 seeds (the test figures of the first selection seed's runs and 1 fresh seed on "
            "which ERM and every contender are trained) adopts nothing") in text
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=DESIGN)
    _drive(plan, {"a": {-1: -0.004}, "b": {-1: -0.004}, "c": {-1: -0.004}})
    kind, sentence = what_happened(plan.advice())
    assert kind == "futility"
    assert sentence.startswith("Stopped for futility at the screen (2 seeds: the selection seed 5's runs "
                               "and 1 fresh)")


def test_a_tune_reuses_the_selection_runs_test_predictions_end_to_end(tmp_path):
    """Through mr2.tune.tune: the driver passes each selection trial's test predictions, the screen's
    verdicts count the first selection seed, and the tiers are ranked on ERM's runs of the selection
    seed and the fresh screen seed (float64 oracle)."""
    from helpers.tune_trials import Y_TEST, predict, simulated
    from helpers.tune_trials import K as SIM_K
    from mr2.report.tiers import assign_tiers
    from mr2.tune import candidates as tune_candidates
    from mr2.tune import tune

    chosen = [c for c in tune_candidates("full", losses_only=True)
              if c.label in ("erm", "mr2-logit_only-c1", "mr2-logit_only-c2", "center_loss")]
    result = tune(simulated, num_classes=SIM_K, candidates=chosen, seeds=[1, 2], confirm_seeds=list(range(10, 18)),
                  output_dir=tmp_path, design=DESIGN)
    advice = result.advice
    assert advice.reused_seeds == [1] and advice.screen_seeds == [10]
    assert {tuple(look.seeds) for look in advice.looks if look.look == 0} == {(1, 10)}
    erm = np.mean([[np.mean(predict(Y_TEST, "erm", s, "test")[k == Y_TEST] == k) for k in range(SIM_K)]
                   for s in (1, 10)], axis=0)
    tiers = [int(t) for t in assign_tiers(erm, 3)]
    hard = [k for k, t in enumerate(tiers) if t == max(tiers)]
    screen = [look for look in advice.looks if look.look == 0]
    for look in screen:
        expected = np.mean([np.mean([np.mean(predict(Y_TEST, look.contender, s, "test")[k == Y_TEST] == k)
                                     - np.mean(predict(Y_TEST, "erm", s, "test")[k == Y_TEST] == k)
                                     for k in hard]) for s in (1, 10)])
        assert look.mean_difference == pytest.approx(expected, abs=1e-12)
    if advice.verdict is not None and advice.chosen is not None:
        assert advice.verdict.seeds[0] == 11 and 1 not in advice.verdict.seeds


def test_the_printed_selection_rule_says_there_is_no_guard_and_what_the_screen_reads():
    """The default design has no overall-accuracy guard in the selection and its screen reads the first
    selection seed's test predictions: the rule printed before anything runs says both (it said the
    guard applied and that only the validation split is read)."""
    from mr2.tune.design import DEFAULT_DESIGN
    from mr2.tune.driver import _rule
    from mr2.tune.request import make_request
    from mr2.tune.text import rule_text

    request = make_request(num_classes=K, output_dir="unused", name="x")
    assert request.design == DEFAULT_DESIGN
    text = _rule(request)
    assert "or has no score (no overall-accuracy guard here: the test split judges it)" in text
    assert "below ERM's by more than" not in text
    assert "the screen (the design) also reads the test predictions of the first selection seed's runs" in text
    assert "Only the validation split is read here" not in text
    old = rule_text("hard_tier", gate="best", min_runs=1)
    assert "overall accuracy is below ERM's by more than ERM's seed standard error" in old
    assert "Only the validation split is read here" in old


def test_a_tune_that_ends_at_the_screen_says_its_verdict_is_the_screens_on_the_reused_and_fresh_seed():
    """No finalist: the verdict printed is the screen's, on the selection seed's runs and 1 fresh seed;
    it is not called the confirmation's "fresh seeds ... after the screen", and it has no level (the
    screen adopts nothing). With a finalist the verdict is on the fresh seeds after the screen."""
    from mr2.tune.candidates import candidates
    from mr2.tune.text import advice_text

    erm = next(c for c in candidates("full") if c.label == "erm")
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=DESIGN)
    _drive(plan, {"a": {-1: -0.05}, "b": {-1: -0.05}, "c": {-1: -0.05}})
    advice = plan.advice()
    assert not advice.adopt and advice.verdict is not None and advice.verdict.seeds == [5, 10]
    text = advice_text(advice, erm, "engine")
    assert ("Verdict on the screen (test split, seeds 5, 10: the selection seed 5's runs and 1 fresh; "
            "the screen adopts nothing)") in text
    assert "after the screen" not in text and "(level " not in text
    assert "for a gain, p = " in text

    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=DESIGN)
    _drive(plan, {"b": {-1: 0.04}})
    text = advice_text(plan.advice(), erm, "engine")
    assert "Verdict on the confirmation (test split, fresh seeds 11, 12, 13 after the screen)" in text
    assert "for a gain (level " in text and "Verdict on the screen" not in text


def test_a_finalist_stopped_for_futility_is_said_to_be_the_finalist_not_that_there_was_none():
    """The screen picks b (it gains on the screen's seeds only); at look 1 it shows nothing and is
    stopped for futility: KEEP ERM says so, naming the finalist and its look, and does not say that
    there was no finalist (the track record's cnn-n100 re-run printed that)."""
    from mr2.tune.candidates import candidates
    from mr2.tune.text import advice_text, what_happened

    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=DESIGN)
    _drive(plan, {"b": {5: 0.08, 10: 0.08, -1: -0.004}})
    advice = plan.advice()
    looks = [(look.contender, look.look, look.decision) for look in advice.looks]
    assert ("b", 0, FINALIST) in looks and ("b", 1, "futility") in looks and not advice.adopt
    kind, sentence = what_happened(advice)
    assert kind == "futility"
    assert "No finalist" not in sentence and "nothing went on to be tested" not in sentence
    assert sentence.startswith("The finalist b (+")
    assert " points, the largest gain on the screen's 2 seeds: the selection seed 5's runs and 1 fresh) " in sentence
    assert "was stopped for futility at look 1 (3 fresh seeds after the screen): " in sentence
    erm = next(c for c in candidates("full") if c.label == "erm")
    assert sentence in advice_text(advice, erm, "engine")
