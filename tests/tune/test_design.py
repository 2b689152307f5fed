"""The tune's design (mr2.tune.design): the state machine of a Plan and its decision rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mr2.tune.design import (
    DEFAULT_DESIGN,
    SIMULATED_CONFIRMATION_TRAININGS,
    Design,
    Plan,
    Request,
    nominal_levels,
)
from mr2.tune.selection import TuneSelectionError, ValidationFigures
from mr2.tune.verdict import SeedFigures

K = 6
N_HALF = 10  # validation samples per class and half


def _val(label: str, seed: int, hard: float, easy: float = 0.9, overall: float | None = None) -> ValidationFigures:
    """Validation figures with the given accuracy on classes 0-1 (ERM's hard tier) and on the others."""
    per_class = [hard, hard, 0.7, 0.7, easy, easy]
    correct = tuple(round(a * N_HALF) for a in per_class)
    mean = sum(per_class) / K
    return ValidationFigures(f"{label}@{seed}", seed, mean if overall is None else overall, tuple(per_class),
                             half_correct=(correct, correct), half_count=((N_HALF,) * K, (N_HALF,) * K))


def _drive(plan: Plan, validation, test, fail=frozenset()) -> list[list[Request]]:
    """Run the plan to its end; ``validation(label, seed)``, ``test(label, seed)`` give the figures,
    ``fail`` holds (phase, label, seed) to fail."""
    rounds = []
    while True:
        requests = plan.next_round()
        if not requests:
            return rounds
        rounds.append(requests)
        for r in requests:
            if (r.phase, r.label, r.seed) in fail:
                plan.record_failure(r.phase, r.label, r.seed, "boom")
            elif r.phase == "selection":
                plan.record_validation(r.label, r.seed, validation(r.label, r.seed))
            else:
                plan.record_test(r.label, r.seed, test(r.label, r.seed))


def _selection(best: str | None, lift: float = 0.3):
    """Validation: ``best`` has ``lift`` more on the hard tier; small seed noise everywhere."""
    def figures(label: str, seed: int) -> ValidationFigures:
        noise = 0.1 * ((seed * 7 + len(label)) % 3 - 1)
        return _val(label, seed, 0.4 + noise + (lift if label == best else 0.0))
    return figures


def _test(gain: dict[str, float], overall_gain: dict[str, float] | None = None, spread: float = 0.002):
    """Test figures: ERM's hard tier 0.5 (+ seed noise), each candidate ``gain`` above it."""
    overall_gain = overall_gain or {}

    def figures(label: str, seed: int) -> SeedFigures:
        noise = spread * math.sin(3.1 * seed + len(label))
        return SeedFigures(0.5 + gain.get(label, 0.0) + noise, 0.8 + overall_gain.get(label, 0.0) + noise / 10)
    return figures


LABELS = ["erm", "a", "b", "c"]
#: The procedure before issue 37 with the advice gated on ``confirmed`` (benchmarks' BASELINE_DESIGN).
BASELINE_DESIGN = Design(gate="margin", reference_alone=True)


def test_baseline_requests_are_seed_major_reference_first_and_never_repeated():
    plan = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10], design=BASELINE_DESIGN)
    assert plan.max_trainings() == 4 * 3 + 2 * 3
    rounds = _drive(plan, _selection("b"), _test({"b": 0.05}))
    assert [(r.label, r.seed) for r in rounds[0]] == [(label, s) for s in (5, 6, 7) for label in LABELS]
    assert {r.phase for r in rounds[0]} == {"selection"}
    assert [(r.phase, r.label, r.seed) for r in rounds[1]] == [
        ("confirmation", label, s) for s in (8, 9, 10) for label in ("erm", "b")]
    everything = [r for round_ in rounds for r in round_]
    assert len(everything) == len(set(everything)) == plan.trainings == 18
    assert plan.next_round() == [] and plan.next_round() == []
    assert plan.choice is not None and plan.choice.recommended == "b"
    assert plan.hard_classes == [0, 1]
    advice = plan.advice()
    assert (advice.adopt, advice.use, advice.chosen, advice.reason) == (True, "b", "b", "confirmed")
    assert advice.verdict is not None and advice.verdict.outcome == "confirmed"
    assert [look.decision for look in advice.looks] == ["adopt"]
    assert advice.to_dict()["use"] == "b"


def test_supported_is_not_adopted():
    """A positive but not significant change (the old ``supported``) keeps ERM."""
    plan = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10], design=BASELINE_DESIGN)
    _drive(plan, _selection("a"), _test({"a": 0.001}, spread=0.02))
    advice = plan.advice()
    assert advice.verdict is not None and advice.verdict.mean_difference > 0
    assert advice.verdict.outcome != "confirmed" and advice.verdict.p_greater > 0.05
    assert (advice.adopt, advice.use, advice.chosen, advice.reason) == (False, "erm", "a", "inconclusive")


def test_a_significant_gain_that_costs_overall_accuracy_is_not_adopted():
    plan = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10], design=BASELINE_DESIGN)
    _drive(plan, _selection("a"), _test({"a": 0.05}, {"a": -0.02}))
    advice = plan.advice()
    assert (advice.adopt, advice.use, advice.reason) == (False, "erm", "overall_cost")
    assert advice.verdict is not None and advice.verdict.p_greater < 0.05 and advice.verdict.overall_cost


def test_a_significantly_worse_choice_is_contradicted():
    plan = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10], design=BASELINE_DESIGN)
    _drive(plan, _selection("a"), _test({"a": -0.05}))
    advice = plan.advice()
    assert (advice.adopt, advice.use, advice.reason) == (False, "erm", "contradicted")


def test_erm_chosen_baseline_trains_erm_alone_and_default_skips_the_confirmation():
    baseline = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10], design=BASELINE_DESIGN)
    rounds = _drive(baseline, _selection(None), _test({}))
    assert baseline.choice is not None and baseline.choice.is_reference
    assert [(r.label, r.seed) for r in rounds[1]] == [("erm", 8), ("erm", 9), ("erm", 10)]
    advice = baseline.advice()
    assert (advice.adopt, advice.use, advice.chosen, advice.reason) == (False, "erm", None, "erm_chosen")
    assert advice.verdict is not None and advice.verdict.outcome == "nothing to confirm"
    skipping = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10],
                    design=Design(gate="margin", reference_alone=False))
    rounds = _drive(skipping, _selection(None), _test({}))
    assert len(rounds) == 1 and skipping.trainings == 12
    assert skipping.advice().reason == "erm_chosen" and skipping.advice().verdict is None


def test_a_failed_candidate_gets_no_more_requests_and_is_ruled_out():
    plan = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10],
                design=Design(selection_looks=(2, 3), keep=(2,), contenders=2, confirmation_looks=(3,)))
    rounds = _drive(plan, _selection("c"), _test({"c": 0.05}), fail={("selection", "a", 5)})
    assert [(r.label, r.seed) for r in rounds[0]] == [(label, s) for s in (5, 6) for label in LABELS]
    later = [r.label for round_ in rounds[1:] for r in round_]
    assert "a" not in later
    assert [(r.label, r.seed) for r in rounds[1]] == [("erm", 7), ("b", 7), ("c", 7)]
    advice = plan.advice()
    assert advice.ruled_out["a"] == "failed (boom)"
    assert advice.contenders == ["c", "b"] and advice.use == "c" and advice.adopt


def test_a_contender_failing_in_the_confirmation_is_ruled_out():
    plan = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10], design=BASELINE_DESIGN)
    _drive(plan, _selection("a"), _test({"a": 0.05}), fail={("confirmation", "a", 9)})
    advice = plan.advice()
    assert (advice.adopt, advice.use, advice.reason) == (False, "erm", "failed")
    assert advice.ruled_out["a"] == "failed (boom)"


@pytest.mark.parametrize("phase", ["selection", "confirmation"])
def test_a_failed_reference_is_an_error(phase):
    plan = Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10], design=BASELINE_DESIGN)
    with pytest.raises(TuneSelectionError, match="the reference 'erm' failed"):
        _drive(plan, _selection("a"), _test({"a": 0.05}), fail={(phase, "erm", 5 if phase == "selection" else 8)})


def test_protocol_errors():
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=[8, 9], design=BASELINE_DESIGN)
    first = plan.next_round()
    with pytest.raises(TuneSelectionError, match="not finished"):
        plan.next_round()
    with pytest.raises(TuneSelectionError, match="was not requested"):
        plan.record_validation("a", 8, _val("a", 8, 0.5))
    with pytest.raises(TuneSelectionError, match="unknown candidate"):
        plan.record_validation("zz", 5, _val("zz", 5, 0.5))
    with pytest.raises(TuneSelectionError, match="unknown phase"):
        plan.record_failure("training", "a", 5, "x")
    plan.record_validation("a", 5, _val("a", 5, 0.5))
    with pytest.raises(TuneSelectionError, match="already recorded"):
        plan.record_validation("a", 5, _val("a", 5, 0.5))
    with pytest.raises(TuneSelectionError, match="not finished"):
        plan.advice()
    assert len(first) == 8
    with pytest.raises(TuneSelectionError, match="disjoint"):
        Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=[6, 7])
    with pytest.raises(TuneSelectionError, match="not among"):
        Plan(["a", "b"], selection_seeds=[5, 6], confirmation_seeds=[8, 9])
    with pytest.raises(ValueError, match="invalid design"):
        Design(selection_looks=(0, 3), keep=(2,))
    with pytest.raises(ValueError, match="invalid design"):
        Design(selection_looks=(1,))


def test_a_one_seed_first_stage_gives_the_reference_two_seeds():
    design = Design(selection_looks=(1, 3), keep=(2,), contenders=1, confirmation_looks=(3,))
    plan = Plan(LABELS, selection_seeds=[1, 2, 3], confirmation_seeds=[8, 9, 10], design=design)
    assert plan.max_trainings() == 3 + 3 * 1 + 2 * 2 + 2 * 3
    rounds = _drive(plan, _selection("c"), _test({"c": 0.05}))
    assert [(r.label, r.seed) for r in rounds[0]] == [("erm", 1), ("a", 1), ("b", 1), ("c", 1), ("erm", 2)]
    # Seed 2 only for the two kept (ERM has it), then seed 3 with ERM first.
    assert [(r.label, r.seed) for r in rounds[1]] == [("a", 2), ("c", 2), ("erm", 3), ("a", 3), ("c", 3)]
    assert plan.trainings == plan.max_trainings()
    advice = plan.advice()
    assert advice.adopt and advice.use == "c"


def test_pools_cap_the_looks_and_the_trainings():
    design = Design(selection_looks=(2, 4), keep=(1,), contenders=1, confirmation_looks=(3, 6))
    plan = Plan(LABELS, selection_seeds=[1, 2, 3], confirmation_seeds=[8, 9, 10, 11], design=design)
    # Selection: 4 x 2 + (1 + 1) x 1; confirmation: 2 x 4.
    assert plan.max_trainings() == 8 + 2 + 8
    rounds = _drive(plan, _selection("b"), _test({"b": 0.0}, spread=0.02))
    assert [len(r) for r in rounds] == [8, 2, 6, 2]
    assert plan.trainings == sum(len(r) for r in rounds) <= plan.max_trainings()


# ---------------------------------------------------------------------------------------------
# The decision rule against slow, obvious oracles
# ---------------------------------------------------------------------------------------------

def test_nominal_levels_of_one_look_and_of_bonferroni():
    # One look is the fixed-sample test; Bonferroni splits the level evenly.
    assert nominal_levels([1.0], 0.05, "pocock") == pytest.approx([0.05])
    assert nominal_levels([1 / 3, 2 / 3, 1], 0.05, "bonferroni") == pytest.approx([0.05 / 3] * 3)


def test_default_design_is_valid():
    assert 0 < DEFAULT_DESIGN.alpha <= 0.05
    Plan(LABELS, selection_seeds=[5, 6, 7], confirmation_seeds=[8, 9, 10])


@pytest.mark.parametrize("looks", [(3, 6), (2, 4, 8)])
@pytest.mark.parametrize("rule", ["obrien_fleming", "pocock", "bonferroni"])
def test_union_boundaries_hold_their_level_with_t_tests_by_monte_carlo(rule, looks):
    """Paired t-tests of normal differences at each look, rejecting below the union nominal levels:
    the rejection rate over all looks stays at or below the level (slow, obvious loop over looks)."""
    from scipy import stats

    alpha = 0.025
    levels = nominal_levels([n / looks[-1] for n in looks], alpha, rule)
    assert sum(levels) == pytest.approx(alpha)
    rng = np.random.default_rng(1)
    reps = 100_000
    x = rng.standard_normal((reps, looks[-1]))
    rejected = np.zeros(reps, dtype=bool)
    for n, level in zip(looks, levels):
        t = x[:, :n].mean(1) / (x[:, :n].std(1, ddof=1) / math.sqrt(n))
        rejected |= stats.t.sf(t, n - 1) < level
    assert rejected.mean() <= alpha + 3 * math.sqrt(alpha / reps)
    # Not vacuous: the rate is close to the level (the looks overlap little).
    assert rejected.mean() >= 0.8 * alpha


def test_the_default_design_in_numbers():
    """The rule stated in the module docstring: every candidate on 1 selection seed (ERM on 2), the 16
    best (no overall guard) screened on the first selection seed's test figures and 1 fresh seed, the
    finalist tested alone at looks 4, 8, 12 and 16 seeds after the screen with O'Brien-Fleming-type
    levels spending the whole 0.05."""
    assert DEFAULT_DESIGN.selection_looks == (1,) and DEFAULT_DESIGN.keep == ()
    assert DEFAULT_DESIGN.contenders == 16 and DEFAULT_DESIGN.screen == 1 and DEFAULT_DESIGN.screen_tiers
    assert DEFAULT_DESIGN.screen_reuse and DEFAULT_DESIGN.selection_guard == "none"
    assert DEFAULT_DESIGN.confirmation_looks == (4, 8, 12, 16) and DEFAULT_DESIGN.futility == 0.5
    assert (DEFAULT_DESIGN.selection_seeds, DEFAULT_DESIGN.confirmation_seeds) == (2, 17)
    from scipy.stats import norm

    levels = nominal_levels([1 / 4, 2 / 4, 3 / 4, 1], DEFAULT_DESIGN.alpha, "obrien_fleming")
    # Lan-DeMets O'Brien-Fleming-type spending, alpha(t) = 2 (1 - Phi(z_{1 - alpha / 2} / sqrt(t))),
    # its increments as the nominal levels (union bound).
    spent = [2 * (1 - norm.cdf(norm.ppf(1 - 0.05 / 2) / math.sqrt(t))) for t in (0.25, 0.5, 0.75, 1.0)]
    assert levels == pytest.approx(np.diff([0.0, *spent]), rel=1e-9)
    assert sum(levels) == pytest.approx(0.05, rel=1e-9)
    plan = Plan(["erm", *[f"c{i}" for i in range(17)]], selection_seeds=[1, 2],
                confirmation_seeds=list(range(10, 27)))
    # ERM 2 + 17 x 1 selection runs; the screen (1 + 16) x 1 fresh seed; the finalist and ERM 2 x 16 at most.
    assert plan.max_trainings() == 19 + 17 + 32
    assert 19 < plan.expected_trainings() == 19 + SIMULATED_CONFIRMATION_TRAININGS <= plan.max_trainings()


def test_a_sequential_confirmation_stops_at_the_first_look_that_passes():
    """Hand-built test figures: a clean +5 point gain passes at 6 seeds (t far above the 0.22 %
    level), not at 3 (level 0.0015 %); a useless contender is dropped for futility."""
    design = Design(selection_looks=(2,), contenders=2, confirmation_looks=(3, 6, 9), futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 19)), design=design)
    rounds = _drive(plan, _selection("b", 0.3), _test({"b": 0.05, "a": -0.05, "c": -0.05}, spread=0.03))
    advice = plan.advice()
    assert (advice.adopt, advice.use, advice.reason) == (True, "b", "confirmed")
    decisions = [(look.contender, look.look, look.decision) for look in advice.looks]
    other = advice.contenders[1]
    assert decisions == [("b", 0, "continue"), (other, 0, "futility"), ("b", 1, "adopt")]
    assert [len(r) for r in rounds] == [8, 9, 6]
    assert advice.verdict is not None and advice.verdict.seeds == list(range(10, 16))
    assert advice.looks[-1].boundary == pytest.approx(nominal_levels([1 / 3, 2 / 3, 1], 0.025, "obrien_fleming")[1])


def test_a_first_stage_candidate_left_out_by_the_overall_guard_says_so():
    """At a first racing stage (1 seed) a candidate is ranked on its single run; one left out says why
    (its overall accuracy), not choose's 'fewer than 2 runs', which every candidate has there."""
    plan = Plan(["erm", "a", "b"], selection_seeds=[0, 1, 2], confirmation_seeds=[3, 4, 5],
                design=Design(selection_looks=(1, 3), keep=(2,), contenders=1))

    def validation(label: str, seed: int) -> ValidationFigures:
        overall = 0.2 if label == "b" else None  # b: far below ERM's overall accuracy
        noise = 0.01 * seed
        return _val(label, seed, 0.4 + noise, overall=overall if overall is None else overall + noise)

    _drive(plan, validation, lambda label, seed: SeedFigures(0.5, 0.9))
    assert plan.advice().ruled_out["b"] == ("not eligible: overall accuracy below ERM's by more than ERM's seed SE "
                                            "(at selection stage 1, 1 seed(s))")


def test_contradicted_is_said_of_the_best_contender_only():
    """A contender other than the best one being significantly worse (seen on mlp-n1000's v2 tune: the
    additive margin at -0.61, dropped by futility) does not make the advice 'contradicted'."""
    plan = Plan(["erm", "a", "b"], selection_seeds=[0, 1, 2], confirmation_seeds=[3, 4, 5],
                design=Design(contenders=2))
    best_first = {"a": 0.3, "b": 0.1}  # a is the best contender on validation

    def validation(label: str, seed: int) -> ValidationFigures:
        noise = 0.01 * ((seed * 7 + len(label)) % 3)
        return _val(label, seed, 0.4 + noise + best_first.get(label, 0.0))

    def test(label: str, seed: int) -> SeedFigures:
        wobble = 0.002 * (seed % 2)
        hard = {"erm": 0.70, "a": 0.70 + wobble, "b": 0.60 - wobble}[label]
        return SeedFigures(hard, 0.9)

    _drive(plan, validation, test)
    advice = plan.advice()
    assert advice.contenders[0] == "a" and not advice.adopt
    assert advice.reason == "inconclusive"


def test_the_adopt_line_states_its_condition_scope_and_what_the_seeds_rule_out():
    """Issue 44, item 5: the ADOPT advice says the 5 % assumes roughly normal per-seed differences and
    is about the user's test split, and what n fresh seeds without a failure rule out (3/n); the
    verdict's line prints the look's level next to the p-value."""
    from mr2.tune.candidates import candidates
    from mr2.tune.text import advice_text

    labels = [c.label for c in candidates("quick")]
    chosen = labels[2]
    design = Design(selection_looks=(2,), contenders=2, confirmation_looks=(3, 6, 9), futility=0.5)
    plan = Plan(labels, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 19)), design=design)
    _drive(plan, _selection(chosen, 0.3), _test({chosen: 0.05}, spread=0.03))
    advice = plan.advice()
    assert advice.adopt and advice.use == chosen and advice.verdict is not None
    n = len(advice.verdict.seeds)
    text = advice_text(advice, next(c for c in candidates("quick") if c.label == chosen), "engine")
    assert "per-seed differences from ERM are roughly normal" in text
    assert "your test split" in text
    assert f"None of its {n} fresh seeds collapsed" in text and f"3/{n} = {100 * 3 / n:.0f}%" in text
    level = advice.verdict.alpha
    assert f"for a gain (level {100 * level:.3g}%)" in text
