"""``boundaries="binding"`` of benchmarks/tune_research_design.py's ``ResearchDesign`` (issue 44, part 3,
measured and not shipped): the levels of one-sided paired t-tests at the looks' seed counts with the
futility stop counted on, so that a useless contender is adopted with probability alpha, not alpha minus
what the futility stops and the looks' overlap take from the union bound; and the shipped ``Plan``
compares each look with them when given such a design."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from helpers import load_script
from mr2.tune.design import Plan, nominal_levels
from mr2.tune.selection import ValidationFigures
from mr2.tune.verdict import SeedFigures

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_research_design.py"
LOOKS = (3, 6, 9, 12)
REPS = 200_000


@pytest.fixture(scope="module")
def rd():
    """The research module, under the name the benchmark scripts import it by (shared with them)."""
    return sys.modules.get("tune_research_design") or load_script(SCRIPT, "tune_research_design")


def _paths(delta: float, seed: int, looks=LOOKS, reps=REPS) -> np.ndarray:
    """The oracle: t statistics of ``reps`` sequences of N(delta, 1) paired differences at ``looks``,
    each look's t computed from scratch in float64 (mean, ``ddof=1`` SD) -- no cumulative sums."""
    x = np.random.default_rng(seed).standard_normal((reps, looks[-1])) + delta
    return np.stack([x[:, :n].mean(axis=1) / (x[:, :n].std(axis=1, ddof=1) / math.sqrt(n)) for n in looks],
                    axis=1)


def _reject_rate(paths: np.ndarray, levels, futility: float | None, looks=LOOKS) -> float:
    """The plan's rule, look by look: reject when the p-value is below the look's level; stop when t
    is at or below ``futility`` at an interim look."""
    alive = np.ones(paths.shape[0], dtype=bool)
    rejected = np.zeros_like(alive)
    for j, (n, level) in enumerate(zip(looks, levels, strict=True)):
        p = stats.t.sf(paths[:, j], n - 1)
        hit = alive & (p < level)
        rejected |= hit
        alive &= ~hit
        if futility is not None and j < len(looks) - 1:
            alive &= paths[:, j] > futility
    return float(rejected.mean())


@pytest.fixture(scope="module")
def null_paths() -> np.ndarray:
    return _paths(0.0, seed=2026)


@pytest.mark.parametrize("rule", ["obrien_fleming", "pocock", "bonferroni"])
@pytest.mark.parametrize("futility", [0.5, 0.0, None])
def test_binding_levels_spend_the_whole_alpha_on_independent_null_draws(rd, null_paths, rule, futility):
    levels = rd.binding_levels(LOOKS, 0.05, rule, futility)
    rate = _reject_rate(null_paths, levels, futility)
    se = math.sqrt(0.05 * 0.95 / REPS)
    assert abs(rate - 0.05) < 4 * se + 3e-4  # + the levels' own Monte Carlo error (~1.6e-4)
    # the union bound's levels, with the same futility stop, leave much of alpha unspent
    fractions = [n / LOOKS[-1] for n in LOOKS]
    union = _reject_rate(null_paths, nominal_levels(fractions, 0.05, rule), futility)
    assert union < rate - 0.004


def test_binding_levels_are_exact_at_the_first_look_and_never_below_the_union_levels(rd):
    union = nominal_levels([n / 12 for n in LOOKS], 0.05, "obrien_fleming")
    binding = rd.binding_levels(LOOKS, 0.05, "obrien_fleming", 0.5)
    assert binding[0] == pytest.approx(union[0], rel=1e-12)
    assert all(b >= u - 1e-9 for b, u in zip(binding, union, strict=True))
    assert binding[-1] > 2 * union[-1]  # 5.7 % against 2.6 % at the last look
    # a fixed function of the design: the same levels again, and the cached object is not shared
    again = rd.binding_levels(LOOKS, 0.05, "obrien_fleming", 0.5)
    assert again == binding and again is not binding


def test_binding_levels_raise_power_at_the_same_alpha(rd):
    levels = {"binding": rd.binding_levels(LOOKS, 0.05, "obrien_fleming", 0.5),
              "union": nominal_levels([n / 12 for n in LOOKS], 0.05, "obrien_fleming")}
    paths = _paths(0.5, seed=7, reps=50_000)
    power = {name: _reject_rate(paths, lv, 0.5) for name, lv in levels.items()}
    assert power["binding"] > power["union"] + 0.05  # about 43 % against 34 %


def test_a_single_look_is_the_plain_t_test_level(rd):
    assert rd.binding_levels([9], 0.05, "obrien_fleming", 0.5) == pytest.approx([0.05], rel=1e-12)


@pytest.mark.parametrize("looks", [(), (1, 3), (6, 3), (3, 3)])
def test_invalid_binding_looks_are_refused(rd, looks):
    with pytest.raises(ValueError, match="binding looks"):
        rd.binding_levels(looks, 0.05, "obrien_fleming", 0.5)


def test_binding_needs_each_contenders_own_t_test(rd):
    with pytest.raises(ValueError, match="boundaries 'binding'"):
        rd.ResearchDesign(contenders=2, boundaries="binding", variance="pooled")
    with pytest.raises(ValueError, match="boundaries 'binding'"):
        rd.ResearchDesign(contenders=2, boundaries="binding", variance="pooled", multiplicity="max_t")


def _val(label: str, seed: int) -> ValidationFigures:
    per_class = (0.5, 0.9) if label == "erm" else (0.6, 0.9)
    correct = tuple(round(a * 10) for a in per_class)
    return ValidationFigures(f"{label}@{seed}", seed, sum(per_class) / 2, per_class,
                             half_correct=(correct, correct), half_count=((10, 10), (10, 10)))


def test_the_plan_compares_each_look_with_the_binding_level_and_bonferroni_over_contenders(rd):
    design = rd.ResearchDesign(selection_looks=(2,), contenders=2, confirmation_looks=(3, 6), futility=0.5,
                               boundaries="binding")
    plan = Plan(["erm", "a", "b"], selection_seeds=[1, 2], confirmation_seeds=list(range(10, 16)),
                design=design)
    # per-seed hard-tier differences from ERM: t = 1.73 after 3 seeds (above the futility bound, far
    # from the first level), t = 0.5 after 6 (not significant): both looks are reached, nothing adopted
    diffs = dict(zip(range(10, 16), [0.01, 0.0, 0.005, -0.01, 0.01, -0.005], strict=True))
    while requests := plan.next_round():
        for r in requests:
            if r.phase == "selection":
                plan.record_validation(r.label, r.seed, _val(r.label, r.seed))
            else:
                wobble = 0.05 * math.sin(2.3 * r.seed)
                gain = 0.0 if r.label == "erm" else diffs[r.seed]
                plan.record_test(r.label, r.seed, SeedFigures(0.5 + wobble + gain, 0.8 + wobble, 0.0))
    advice = plan.advice()
    expected = rd.binding_levels([3, 6], 0.05 / 2, "obrien_fleming", 0.5)
    levels = sorted({(look.look, look.boundary) for look in advice.looks})
    assert [level for _, level in levels] == pytest.approx(expected, rel=1e-12)
    assert not advice.adopt
