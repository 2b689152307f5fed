"""benchmarks/tune_research_design.py's ResearchDesign: the research options of issue 44 travel with
the design into the shipped Plan (it asks the design for its levels and spreads), the shipped rule is
what it does with the options at their defaults, and its record reads as Design's did before the move."""

from __future__ import annotations

import dataclasses
import doctest
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import load_script
from mr2.tune.design import DEFAULT_DESIGN, Design, Plan
from mr2.tune.selection import ValidationFigures
from mr2.tune.verdict import SeedFigures

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# under the name the benchmark scripts import it by (shared with them)
RD = sys.modules.get("tune_research_design") or load_script(BENCHMARKS / "tune_research_design.py",
                                                            "tune_research_design")
#: Design.to_dict's keys before the research options moved out (the records of that time).
OLD_KEYS = ["alpha", "selection_looks", "keep", "gate", "contenders", "confirmation_looks", "spending",
            "boundaries", "futility", "reference_alone", "variance", "multiplicity", "selection_guard",
            "screen", "screen_tiers", "screen_reuse"]


def test_the_module_examples_hold():
    result = doctest.testmod(RD, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0


def test_a_research_design_writes_the_fields_in_the_old_order_and_the_shipped_one_without_them():
    design = RD.research(DEFAULT_DESIGN, boundaries="binding")
    assert list(design.to_dict()) == OLD_KEYS
    assert design.to_dict() == {**DEFAULT_DESIGN.to_dict(), "boundaries": "binding", "variance": "own",
                                "multiplicity": "bonferroni"}
    assert isinstance(design, Design) and design != DEFAULT_DESIGN
    assert RD.research(design, boundaries="union").boundaries == "union"  # a research design again


@pytest.mark.parametrize(("options", "message"), [
    ({"multiplicity": "max_t"}, "needs variance 'pooled'"),
    ({"boundaries": "binding", "variance": "pooled"}, "boundaries 'binding'"),
    ({"screen": 2, "variance": "pooled"}, "a screen tests one finalist"),
    ({"boundaries": "exact"}, "boundaries 'exact' not in"),
    ({"variance": "shared"}, "variance 'shared' not in"),
    ({"contenders": 0, "boundaries": "binding"}, "contenders 0 must be >= 1"),  # the shipped checks first
])
def test_invalid_research_designs_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        RD.ResearchDesign(**{"contenders": 2, **options})


def _val(label: str, seed: int, hard: float) -> ValidationFigures:
    per_class = (hard, hard, 0.8, 0.8, 0.9, 0.9)
    correct = tuple(round(a * 10) for a in per_class)
    return ValidationFigures(f"{label}@{seed}", seed, sum(per_class) / 6, per_class,
                             half_correct=(correct, correct), half_count=((10,) * 6, (10,) * 6))


def _advice(design: Design, y: np.ndarray):
    labels = ["erm", "a", "b", "c"]
    plan = Plan(labels, selection_seeds=[0, 1, 2], confirmation_seeds=list(range(10, 19)), design=design)
    while requests := plan.next_round():
        for r in requests:
            row = labels.index(r.label)
            if r.phase == "selection":
                plan.record_validation(r.label, r.seed, _val(r.label, r.seed, 0.5 + 0.01 * row))
            else:
                plan.record_test(r.label, r.seed, SeedFigures(float(y[row, r.seed - 10]), 0.9))
    return plan.advice()


BASE = Design(selection_looks=(1, 3), keep=(3,), contenders=3, confirmation_looks=(3, 6, 9), futility=0.5)


@pytest.mark.parametrize("rep", range(12))
def test_a_research_design_at_its_defaults_decides_as_the_shipped_one_and_each_option_uses_its_levels(rep):
    rng = np.random.default_rng([7, rep])
    y = 0.7 + 0.02 * rng.standard_normal((1, 9)) + 0.01 * rng.standard_normal((4, 9))
    y[1 + rep % 3] += 0.004 * (rep % 4)  # some tunes with a gain, some without
    shipped = _advice(BASE, y)
    same = _advice(RD.research(BASE), y)
    assert same.to_dict() | {"design": None} == shipped.to_dict() | {"design": None}
    # recursive / binding: every look is compared with the research module's level for it
    for boundaries, expected in (("recursive", RD.levels([1 / 3, 2 / 3, 1.0], 0.05 / 3, "obrien_fleming",
                                                         "recursive")),
                                 ("binding", RD.binding_levels([3, 6, 9], 0.05 / 3, "obrien_fleming", 0.5))):
        advice = _advice(RD.research(BASE, boundaries=boundaries), y)
        assert [look.boundary for look in advice.looks] == [expected[look.look] for look in advice.looks]
    # pooled + max-t: each look's level is max_t_level at the pooled df of the looks so far
    advice = _advice(RD.research(BASE, variance="pooled", multiplicity="max_t"), y)
    union = RD.levels([1 / 3, 2 / 3, 1.0], 0.05, "obrien_fleming")
    for look in advice.looks:
        n = (look.look + 1) * 3
        blocks = [y[:, 3 * j:3 * j + 3] for j in range(look.look + 1)]  # every contender ran every look here
        if len({lk.contender for lk in advice.looks if lk.look == look.look}) == 3:
            df = RD.pooled_spread(blocks)[1]
            assert df == 3 * 2 * (look.look + 1)
            assert look.boundary == pytest.approx(RD.max_t_level(3, df, union[look.look]), rel=1e-12), n


def test_the_benchmarks_designs_carry_their_options():
    oc = sys.modules.get("tune_oc_research_check") or load_script(
        BENCHMARKS / "tune_operating_characteristics.py", "tune_oc_research_check")
    designs = {name: entry[0] for name, entry in oc.DESIGNS.items()}
    assert designs["default"] is DEFAULT_DESIGN
    assert type(designs["racing"]) is Design and type(designs["s1-scr2-m14-L3,6,9,12"]) is Design
    binding = designs["s1-scr2-m14-L3,6,9,12-binding"]
    assert isinstance(binding, RD.ResearchDesign) and binding.boundaries == "binding"
    assert dataclasses.replace(binding, boundaries="union") == RD.research(designs["s1-scr2-m14-L3,6,9,12"])
    pooled = designs["pooled-maxt"]
    assert (pooled.variance, pooled.multiplicity) == ("pooled", "max_t")
    assert math.isclose(pooled.alpha, 0.05)
