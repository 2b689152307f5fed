"""``boundaries="recursive"`` of benchmarks/tune_research_design.py (measured and not shipped): the
group-sequential boundaries for normal statistics, against published values and by Monte Carlo, and
the nominal levels and plan they give."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from helpers import load_script
from mr2.tune.design import nominal_levels

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_research_design.py"
# under the name the benchmark scripts import it by (shared with them)
RD = sys.modules.get("tune_research_design") or load_script(SCRIPT, "tune_research_design")
spending_boundaries = RD.spending_boundaries


def test_spending_boundaries_match_published_values():
    # gsDesign (Anderson), sfLDOF / sfLDPocock, one-sided 0.025, equally spaced looks.
    assert spending_boundaries([0.5, 1], 0.025, "obrien_fleming") == pytest.approx([2.9626, 1.9686], abs=2e-4)
    assert spending_boundaries([0.5, 1], 0.025, "pocock") == pytest.approx([2.1570, 2.2009], abs=2e-4)
    # Bonferroni: the normal quantile of alpha / L at every look, no integration.
    assert spending_boundaries([0.5, 1], 0.05, "bonferroni") == pytest.approx([stats.norm.isf(0.025)] * 2)


@pytest.mark.parametrize("rule", ["obrien_fleming", "pocock"])
def test_spending_boundaries_spend_their_level_by_monte_carlo(rule):
    """Brownian motion observed at the looks: the crossing probabilities per look are the spent ones."""
    fractions = np.array([0.3, 0.6, 1.0])
    bounds = np.array(spending_boundaries(fractions, 0.05, rule))
    rng = np.random.default_rng(0)
    reps = 400_000
    score = np.cumsum(rng.normal(size=(reps, 3)) * np.sqrt(np.diff(np.concatenate([[0], fractions]))), axis=1)
    z = score / np.sqrt(fractions)
    crossed = z >= bounds
    first = np.where(crossed.any(1), crossed.argmax(1), -1)
    observed = np.array([(first == j).mean() for j in range(3)])
    if rule == "obrien_fleming":
        spent = 2 * stats.norm.sf(stats.norm.isf(0.025) / np.sqrt(fractions))
    else:
        spent = 0.05 * np.log1p((math.e - 1) * fractions)
    expected = np.diff(np.concatenate([[0], spent]))
    assert np.all(np.abs(observed - expected) <= 4 * np.sqrt(expected / reps) + 1e-4), (observed, expected)
    assert observed.sum() == pytest.approx(0.05, abs=0.002)


def test_recursive_levels_are_the_normal_tails_of_the_boundaries_and_union_is_the_shipped_rule():
    fractions = [1 / 3, 2 / 3, 1.0]
    bounds = spending_boundaries(fractions, 0.05, "obrien_fleming")
    assert RD.levels(fractions, 0.05, "obrien_fleming", "recursive") == pytest.approx(
        [float(stats.norm.sf(c)) for c in bounds], rel=1e-12)
    assert RD.levels(fractions, 0.05, "pocock") == nominal_levels(fractions, 0.05, "pocock")
    # recursive spends more at the last look than union (no overlap lost): 2.45 % against 2.35 %
    assert RD.levels([0.5, 1.0], 0.025, "obrien_fleming", "recursive")[1] == pytest.approx(0.0245, abs=5e-5)
    assert nominal_levels([0.5, 1.0], 0.025, "obrien_fleming")[1] == pytest.approx(0.0235, abs=5e-5)
    with pytest.raises(ValueError, match="boundaries 'binding' not in"):
        RD.levels(fractions, 0.05, "pocock", "binding")  # binding levels need the seed counts
