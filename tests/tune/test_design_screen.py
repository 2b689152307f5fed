"""The screen of :class:`mr2.tune.design.Design` (issue 44): contenders on a few fresh test seeds, one
finalist, tested at the whole alpha on the seeds after the screen, hard classes ranked again on ERM's
screen runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mr2.tune.design import FINALIST, SCREENED_OUT, Design, Plan, nominal_levels
from mr2.tune.selection import ValidationFigures
from mr2.tune.verdict import SeedFigures, VerdictError, rescored, seed_figures

K = 6
N_HALF = 10
N_TEST = 200  # test samples per class
LABELS = ["erm", "a", "b", "c"]
#: ERM's per-class test accuracy: classes 4 and 5 are the hard tier on TEST, while on validation
#: (``_val``) classes 0 and 1 are.
ERM_TEST = np.array([0.9, 0.9, 0.8, 0.8, 0.5, 0.5])


def _val(label: str, seed: int) -> ValidationFigures:
    per_class = [0.4, 0.4, 0.7, 0.7, 0.9, 0.9]
    if label == "a":  # validation ranks a, then b, then c
        per_class[0] = per_class[1] = 0.6
    elif label == "b":
        per_class[0] = per_class[1] = 0.5
    correct = tuple(round(a * N_HALF) for a in per_class)
    return ValidationFigures(f"{label}@{seed}", seed, sum(per_class) / K, tuple(per_class),
                             half_correct=(correct, correct), half_count=((N_HALF,) * K, (N_HALF,) * K))


def _test_figures(gain: dict[str, float], hard: list[int], with_classes: bool = True):
    """Per-class test accuracies on the count lattice: ERM_TEST, plus ``gain`` on classes 4 and 5,
    plus a small seed wobble; scored on ``hard()`` at record time as the driver does."""
    def figures(label: str, seed: int, scored_on: list[int]) -> SeedFigures:
        wobble = 0.01 * math.sin(1.7 * seed + 3 * len(label))
        per_class = ERM_TEST + wobble + np.where(np.arange(K) >= 4, gain.get(label, 0.0), 0.0)
        correct = np.rint(per_class * N_TEST)
        y_true = np.repeat(np.arange(K), N_TEST)
        y_pred = np.where(np.arange(N_TEST)[None, :] < correct[:, None], np.arange(K)[:, None],
                          (np.arange(K)[:, None] + 1) % K).reshape(-1)
        f = seed_figures(y_true, y_pred, scored_on, K)
        return f if with_classes else SeedFigures(f.hard_tier, f.overall, f.rounding_sd)
    return figures


def _drive(plan: Plan, test, val=_val) -> list[list[tuple[str, str, int]]]:
    rounds = []
    while requests := plan.next_round():
        rounds.append([(r.phase, r.label, r.seed) for r in requests])
        for r in requests:
            if r.phase == "selection":
                plan.record_validation(r.label, r.seed, val(r.label, r.seed))
            else:
                plan.record_test(r.label, r.seed, test(r.label, r.seed, plan.hard_classes))
    return rounds


def test_rescored_is_the_mean_accuracy_of_the_new_hard_classes():
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 5, 400)
    y_pred = np.where(rng.random(400) < 0.7, y_true, rng.integers(0, 5, 400))
    f = seed_figures(y_true, y_pred, [0, 1], 5)
    for hard in ([3], [2, 4], [0, 1, 2, 3, 4]):
        expected = np.mean([np.mean(y_pred[y_true == k] == k) for k in hard])
        counts = np.array([np.sum(y_true == k) for k in hard], dtype=np.float64)
        assert rescored(f, hard).hard_tier == pytest.approx(expected, abs=1e-15)
        assert rescored(f, hard).rounding_sd == pytest.approx(math.sqrt(np.sum(1 / (12 * counts ** 2))) / len(hard))
        assert rescored(f, hard).overall == f.overall
    with pytest.raises(VerdictError, match="no per-class accuracies"):
        rescored(SeedFigures(0.5, 0.6), [1])


def test_the_screen_picks_a_finalist_tests_it_on_fresh_seeds_at_the_whole_alpha():
    design = Design(selection_looks=(2,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    # b gains the most on the TEST hard classes (4, 5); a a little; c loses.
    rounds = _drive(plan, _test_figures({"a": 0.02, "b": 0.06, "c": -0.05}, []))
    advice = plan.advice()
    assert plan.contenders == ["a", "b", "c"]  # validation's order
    assert plan.hard_classes == [4, 5]  # ranked again on ERM's two screen runs
    assert plan.choice is not None and plan.choice.hard_classes == [0, 1]
    # selection 2 x 4; the screen: ERM and 3 contenders on seeds 10, 11; the finalist on 12-14.
    assert [len(r) for r in rounds] == [8, 8, 6]
    assert {s for _, _, s in rounds[1]} == {10, 11} and {s for _, _, s in rounds[2]} == {12, 13, 14}
    assert {label for _, label, _ in rounds[2]} == {"erm", "b"}
    decisions = [(look.contender, look.look, look.decision) for look in advice.looks]
    assert decisions == [("a", 0, SCREENED_OUT), ("b", 0, FINALIST), ("c", 0, "futility"), ("b", 1, "adopt")]
    assert (advice.adopt, advice.use, advice.chosen, advice.reason) == (True, "b", "b", "confirmed")
    assert advice.verdict is not None and advice.verdict.seeds == [12, 13, 14]
    # the finalist spends the whole alpha (no Bonferroni over the 3 contenders)
    assert advice.looks[-1].boundary == pytest.approx(nominal_levels([0.5, 1.0], 0.05, "obrien_fleming")[0])
    # its verdict's mean difference is on classes 4 and 5: +0.06
    assert advice.verdict.mean_difference == pytest.approx(0.06, abs=0.006)
    assert plan.trainings == 22 and plan.max_trainings() == 8 + 2 * 4 + 2 * 6
    assert "screened out" in advice.ruled_out["a"] and "futility at the screen" in advice.ruled_out["c"]


def test_without_per_class_figures_the_selections_hard_classes_stay():
    design = Design(selection_looks=(2,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    _drive(plan, _test_figures({"a": 0.02, "b": 0.06, "c": -0.05}, [], with_classes=False))
    assert plan.hard_classes == [0, 1]
    advice = plan.advice()
    # scored on classes 0 and 1, which nobody changes: nothing is adopted
    assert not advice.adopt and advice.reason == "inconclusive"


def test_a_screen_with_no_contender_above_the_futility_bound_keeps_erm():
    design = Design(selection_looks=(2,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    rounds = _drive(plan, _test_figures({"a": -0.03, "b": -0.04, "c": -0.05}, []))
    advice = plan.advice()
    assert [len(r) for r in rounds] == [8, 8]  # nothing after the screen
    assert not advice.adopt and advice.use == "erm"
    assert {look.decision for look in advice.looks} == {"futility"}


@pytest.mark.parametrize("contenders, pool, screened", [(1, 10, False), (3, 3, False), (3, 4, True)])
def test_the_screen_is_skipped_with_one_contender_or_a_short_pool(contenders, pool, screened):
    design = Design(selection_looks=(2,), contenders=contenders, screen=2, confirmation_looks=(3, 6),
                    futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 10 + pool)), design=design)
    rounds = _drive(plan, _test_figures({"a": 0.06, "b": 0.06, "c": 0.06}, []))
    first = rounds[1]
    labels = {label for _, label, _ in first}
    assert (len(labels) == contenders + 1 and {s for _, _, s in first} == {10, 11}) == screened
    if not screened:  # the plain confirmation: Bonferroni over the contenders
        levels = nominal_levels([n / min(6, pool) for n in sorted({min(3, pool), min(6, pool)})],
                                0.05 / contenders, "obrien_fleming")
        assert plan.advice().looks[0].boundary == pytest.approx(levels[0])


@pytest.mark.parametrize("bad, match", [({"screen": 1}, "screen 1"), ({"screen": 2, "gate": "margin"}, "gate")])
def test_invalid_screens_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        Design(**{"contenders": 1, **bad})


def test_a_useless_finalist_is_adopted_at_most_alpha_by_monte_carlo():
    """Every candidate equal to ERM (per-class accuracies binomial on 200 test samples per class,
    seed-level class noise): P(adopt) over 400 tunes stays within 3 binomial SEs of 5 %."""
    rng = np.random.default_rng(3)
    design = Design(selection_looks=(2,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=0.5)
    base = np.array([0.9, 0.85, 0.8, 0.75, 0.6, 0.55])
    adopted = 0
    reps = 400
    for _ in range(reps):
        plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
        while requests := plan.next_round():
            for r in requests:
                if r.phase == "selection":
                    correct = rng.binomial(N_HALF, base)
                    plan.record_validation(r.label, r.seed, ValidationFigures(
                        f"{r.label}@{r.seed}", r.seed, float(correct.mean() / N_HALF), tuple(correct / N_HALF),
                        half_correct=(tuple(int(c) for c in correct), tuple(int(c) for c in correct)),
                        half_count=((N_HALF,) * K, (N_HALF,) * K)))
                else:
                    p = np.clip(base + 0.02 * rng.standard_normal(K), 0, 1)
                    per_class = rng.binomial(N_TEST, p) / N_TEST
                    hard = plan.hard_classes
                    plan.record_test(r.label, r.seed, SeedFigures(
                        float(per_class[hard].mean()), float(per_class.mean()), 0.0,
                        per_class=tuple(per_class.tolist()), class_counts=(N_TEST,) * K))
        adopted += plan.advice().adopt
    rate = adopted / reps
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


def test_a_one_seed_selection_ranks_on_one_run_and_the_screen_decides():
    """selection_looks=(1,): every candidate on one seed, ERM on two (its seed SE for the guard); the
    contenders are the best by that one run; a candidate whose overall accuracy is below ERM's by more
    than ERM's seed SE is not eligible, and nobody is ruled out for having one run."""
    design = Design(selection_looks=(1,), contenders=2, screen=2, confirmation_looks=(3, 6), futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)

    def val(label: str, seed: int) -> ValidationFigures:
        f = _val(label, seed)
        if label == "a":  # the best score, but a cost in overall accuracy: not eligible
            return ValidationFigures(f.run, seed, f.overall_accuracy - 0.2, f.per_class_accuracy,
                                     half_correct=f.half_correct, half_count=f.half_count)
        return f

    rounds = _drive(plan, _test_figures({"b": 0.06}, []), val)
    assert rounds[0] == [("selection", "erm", 5), ("selection", "a", 5), ("selection", "b", 5),
                         ("selection", "c", 5), ("selection", "erm", 6)]
    assert plan.contenders == ["b", "c"]
    assert plan.choice is not None and plan.choice.score("c").eligible
    assert plan.choice.score("a").reason == "overall accuracy below ERM's by more than ERM's seed SE"
    assert plan.advice().ruled_out["a"] == "not eligible: overall accuracy below ERM's by more than ERM's seed SE"
    advice = plan.advice()
    assert (advice.adopt, advice.use) == (True, "b")
    assert plan.max_trainings() == 5 + 2 * 3 + 2 * 6


def test_a_one_seed_selection_needs_a_screen():
    with pytest.raises(ValueError, match="unless a screen follows"):
        Design(selection_looks=(1,), contenders=2)
    with pytest.raises(ValueError, match="unless a screen follows"):
        Design(selection_looks=(1,), contenders=1, screen=2)


def test_the_advice_text_names_the_screen_the_finalist_and_where_the_hard_classes_come_from():
    from mr2.tune.candidates import candidates
    from mr2.tune.text import advice_text, design_text, what_happened

    design = Design(selection_looks=(2,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    _drive(plan, _test_figures({"a": 0.02, "b": 0.06, "c": -0.05}, []))
    advice = plan.advice()
    assert advice.screen_seeds == [10, 11] and advice.screen_tiers
    assert advice.to_dict()["screen_seeds"] == [10, 11]
    erm = next(c for c in candidates("full") if c.label == "erm")
    text = advice_text(advice, erm, "engine")
    assert "Verdict on the confirmation (test split, fresh seeds 12, 13, 14 after the screen)" in text
    assert "ranked on ERM's test accuracies on the screen's seeds 10, 11" in text
    assert "  the screen (2 seeds): b +6.0" in text and "the FINALIST: goes on alone" in text
    assert "  the screen (2 seeds): a " in text and "screened out (the finalist gained more)" in text
    assert "  look 1 (3 seeds): b " in text and ": ADOPTED" in text
    assert "A screen of 2 seeds trains ERM and every contender and adopts nothing" in design_text(design)

    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    _drive(plan, _test_figures({"a": -0.004, "b": -0.004, "c": -0.004}, []))
    kind, sentence = what_happened(plan.advice())
    assert kind == "futility"
    assert sentence.startswith("Stopped for futility at the screen (2 fresh seeds): no contender showed")


def test_a_tune_with_a_screen_reports_on_the_tiers_its_verdict_used(tmp_path):
    """End to end through mr2.tune.tune: the confirmation report's tiers are the ones ranked on ERM's
    screen runs (not the selection's), and it says so; the verdict's seeds are the finalist's."""
    import json

    from helpers.tune_trials import Y_TEST, predict, simulated
    from helpers.tune_trials import K as SIM_K
    from mr2.report.tiers import assign_tiers
    from mr2.tune import candidates as tune_candidates
    from mr2.tune import tune

    chosen = [c for c in tune_candidates("full", losses_only=True)
              if c.label in ("erm", "mr2-logit_only-c1", "mr2-logit_only-c2", "center_loss")]
    design = Design(selection_looks=(1,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=0.5,
                    selection_guard="none")
    result = tune(simulated, num_classes=SIM_K, candidates=chosen, seeds=[1, 2], confirm_seeds=list(range(10, 18)),
                  output_dir=tmp_path, design=design)
    advice = result.advice
    assert advice.screen_seeds == [10, 11] and advice.screen_tiers
    erm = np.mean([[np.mean(predict(Y_TEST, "erm", s, "test")[k == Y_TEST] == k) for k in range(SIM_K)]
                   for s in (10, 11)], axis=0)
    expected = [int(t) for t in assign_tiers(erm, 3)]
    tiers = json.loads((result.report_dir / "report.json").read_text())["tiers"]
    assert tiers["ranked_by"].startswith("ERM's runs of the confirmation's screen")
    assert tiers["members"] == {name: [k for k, t in enumerate(expected) if t == i]
                                for i, name in enumerate(("easy", "medium", "hard"))}
    assert advice.verdict is not None and advice.verdict.seeds[0] == 12
    assert advice.verdict.hard_classes == [k for k, t in enumerate(expected) if t == max(expected)]


def test_the_printed_rule_says_what_a_one_seed_selection_needs():
    from mr2.tune.design import DEFAULT_DESIGN
    from mr2.tune.text import rule_text

    assert DEFAULT_DESIGN.min_runs == 1 and Design(selection_looks=(1, 3), keep=(7,)).min_runs == 2
    one = rule_text("hard_tier", gate="best", min_runs=DEFAULT_DESIGN.min_runs)
    assert "fewer than 2 runs" not in one
    assert "not eligible if it misses a selection seed, or its mean validation overall accuracy" in one
    assert "has fewer than 2 runs, or" in rule_text("hard_tier", gate="best")


def test_a_contender_whose_screen_run_collapsed_is_not_the_finalist():
    """b gains the most on the screen (not significantly), but one of its screen runs tripped the
    collapse guard: a is the finalist (before, only a significant verdict or a collapsed selection run
    ruled a contender out)."""
    from dataclasses import replace

    design = Design(selection_looks=(2,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    base = _test_figures({"a": 0.03, "c": -0.05}, [])
    # b: +12 points on seed 10, nothing on seed 11 (collapsed): the largest mean, not significant
    spiky = {10: _test_figures({"b": 0.12}, []), 11: _test_figures({"b": 0.0}, [])}

    def test(label: str, seed: int, hard: list[int]) -> SeedFigures:
        if label == "b" and seed in spiky:
            return replace(spiky[seed](label, seed, hard), collapsed=seed == 11)
        return base(label, seed, hard)

    _drive(plan, test)
    advice = plan.advice()
    screen = {look.contender: look.decision for look in advice.looks if look.look == 0}
    assert screen == {"a": FINALIST, "b": SCREENED_OUT, "c": "futility"}
    assert advice.chosen == "a"


def test_a_contender_with_an_overall_cost_at_the_screen_is_screened_out_and_says_why():
    """b gains the most on the hard tier but costs overall accuracy on the screen's seeds: not the
    finalist, and its reason says so; when every contender above the bound costs overall accuracy,
    there is no finalist and the advice names each one's reason (it said 'futility' before)."""
    from dataclasses import replace

    from mr2.tune.text import what_happened

    def costly(gain: dict[str, float], cost: set[str]):
        base = _test_figures(gain, [])

        def test(label: str, seed: int, hard: list[int]) -> SeedFigures:
            figures = base(label, seed, hard)
            return replace(figures, overall=figures.overall - 0.1) if label in cost else figures
        return test

    design = Design(selection_looks=(2,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=0.5)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    _drive(plan, costly({"a": 0.03, "b": 0.06, "c": -0.05}, {"b"}))
    advice = plan.advice()
    assert advice.chosen == "a"
    assert advice.ruled_out["b"] == ("screened out: overall accuracy below ERM's by more than ERM's seed SE "
                                     "on the screen's 2 fresh seeds")

    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    rounds = _drive(plan, costly({"a": 0.03, "b": 0.06, "c": -0.05}, {"a", "b"}))
    advice = plan.advice()
    assert len(rounds) == 2 and not advice.adopt
    kind, sentence = what_happened(advice)
    assert kind == "futility"
    assert sentence.startswith("No finalist at the screen (2 fresh seeds), so nothing went on to be tested: a: "
                               "screened out: overall accuracy below")
    assert "c: futility at the screen (2 fresh seeds)" in sentence


def test_the_confirmed_design_is_the_default():
    """The OC benchmark's design whose confirmation passed the rule of issue 44, part 4
    (``s1-scr1r-m16-L4,8,12,16-noguard``) is exactly DEFAULT_DESIGN; the searched screen of part 2 is
    the benchmark's SCREEN_DESIGN, which it replaced."""
    import sys
    from pathlib import Path

    from helpers import load_script
    from mr2.tune.design import DEFAULT_DESIGN

    root = Path(__file__).resolve().parents[2] / "benchmarks"
    try:
        search = load_script(root / "tune_design_search.py", "tune_design_search_under_test")
        assert search.OC.DESIGNS["s1-scr1r-m16-L4,8,12,16-noguard"][0] == DEFAULT_DESIGN == search.OC.REUSE_DESIGN
        assert search.OC.DESIGNS["default"][0] == DEFAULT_DESIGN
        assert search.designs()["s1k-scr2-m14-L3,6,9,12"] == search.OC.SCREEN_DESIGN != DEFAULT_DESIGN
        assert search.designs()["racing"] == search.OC.RACING_DESIGN != DEFAULT_DESIGN
    finally:
        sys.modules.pop("tune_design_search_under_test", None)
        sys.modules.pop("tune_oc_search", None)


def test_a_finalist_worse_on_its_fresh_seeds_is_contradicted():
    """The reason speaks of the finalist (b, second on validation), not of the validation's first
    contender, which the screen dropped (before: 'inconclusive', from a's screen verdict)."""
    design = Design(selection_looks=(2,), contenders=3, screen=2, confirmation_looks=(3, 6), futility=None)
    plan = Plan(LABELS, selection_seeds=[5, 6], confirmation_seeds=list(range(10, 20)), design=design)
    screen = _test_figures({"a": 0.02, "b": 0.06, "c": -0.05}, [])
    after = _test_figures({"b": -0.05}, [])
    _drive(plan, lambda label, seed, hard: (screen if seed < 12 else after)(label, seed, hard))
    advice = plan.advice()
    assert plan.contenders[0] == "a" and advice.chosen == "b"
    assert (advice.adopt, advice.reason) == (False, "contradicted")
