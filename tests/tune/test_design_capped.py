"""A confirmation pool smaller than the design's (issue 44: ``--confirm-seeds 3`` told a contender +2
points on every seed KEEP ERM without a word on the seeds): the advice names the pool, the design's
seeds and the seeds the gain would need at the last look's level."""

from __future__ import annotations

import math

from scipy import stats

from mr2.tune.design import Design, Plan, nominal_levels
from mr2.tune.selection import ValidationFigures
from mr2.tune.verdict import SeedFigures


def _val(label: str, seed: int) -> ValidationFigures:
    per_class = (0.5, 0.9) if label == "erm" else (0.6, 0.9)
    correct = tuple(round(a * 10) for a in per_class)
    return ValidationFigures(f"{label}@{seed}", seed, sum(per_class) / 2, per_class,
                             half_correct=(correct, correct), half_count=((10, 10), (10, 10)))


def _seeds_needed_oracle(mean: float, sd: float, level: float) -> int:
    n = 2
    while not mean * math.sqrt(n) / sd > stats.t.isf(level, n - 1):
        n += 1
    return n


def test_a_capped_confirmation_says_what_the_design_needed_and_how_many_seeds_the_gain_would_need():
    """Issue 44: with --confirm-seeds 3 a contender +2 points on every seed was told KEEP ERM without a
    word on the seeds; now the advice names the pool, the design's 14 and a planning figure."""
    from mr2.tune.design import DEFAULT_DESIGN
    from mr2.tune.text import seeds_needed, what_happened

    labels = ["erm", "a", "b"]
    # the design of issue 44, part 2 (a 2-seed screen, skipped on a pool of 3)
    design = Design(selection_looks=(1,), contenders=14, screen=2, confirmation_looks=(3, 6, 9, 12), futility=0.5)
    plan = Plan(labels, selection_seeds=[1, 2], confirmation_seeds=[10, 11, 12], design=design)
    diffs = {10: 0.02, 11: 0.01, 12: 0.03}  # +2 points on average, SD 1 point: t = 3.46 on 2 df
    while requests := plan.next_round():
        for r in requests:
            if r.phase == "selection":
                plan.record_validation(r.label, r.seed, _val(r.label, r.seed))
            else:
                gain = {"erm": 0.0, "a": diffs[r.seed], "b": 0.0}[r.label]
                plan.record_test(r.label, r.seed, SeedFigures(0.5 + 0.03 * (r.seed % 2) + gain, 0.8, 0.0))
    advice = plan.advice()
    assert not advice.adopt and advice.confirmation_pool == 3 and advice.screen_seeds == []
    kind, sentence = what_happened(advice)
    assert kind == "gain_below_level"
    last = nominal_levels([0.25, 0.5, 0.75, 1.0], 0.05, "obrien_fleming")[-1]  # 2.64 %
    needed = _seeds_needed_oracle(2.0, 1.0, last)
    # t = 2 sqrt(n): 3.46 at 3 seeds < 4.0 (2 df), 4.0 at 4 seeds > 3.1 (3 df)
    assert seeds_needed(0.02, 0.01, last) == needed == 4
    assert ("The confirmation pool had 3 seeds, fewer than the 14 the design uses (a screen of 2 and looks up "
            "to 12), so the screen was skipped and this test had 3 seeds.") in sentence
    assert "one test at 2.64% (the level of the design's last look) would need about 4 paired seeds" in sentence
    assert "--confirm-seeds 14" in sentence and "twice the stated rate" in sentence
    # with the design's whole pool nothing is added
    full = Plan(labels, selection_seeds=[1, 2], confirmation_seeds=list(range(10, 24)), design=DEFAULT_DESIGN)
    assert full.max_trainings() > 0
    from dataclasses import replace
    assert "confirmation pool" not in what_happened(replace(advice, confirmation_pool=14))[1]
    assert "confirmation pool" not in what_happened(replace(advice, confirmation_pool=0))[1]
