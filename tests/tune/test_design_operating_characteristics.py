"""A fast null scenario of benchmarks/tune_operating_characteristics.py: the shipped design's rate of
"adopt" when every candidate equals ERM stays at its stated 5 %.

Three calibrated cells (the noisiest validation split, the largest false-selection rate of the old
rule at K = 100, and the cell where the test split is cleanest), 17 candidates against ERM, 200 tunes
each, fixed seeds. The bound is 5 % plus three binomial standard errors of the pooled rate (600 tunes:
7.7 %); a gate that no longer controls its level (the 38 % of the old "confirmed or supported" message,
or the old margin alone, 76 %) fails it, which the second test checks with a deliberately broken level.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from helpers import load_script
from mr2.tune.design import DEFAULT_DESIGN, Design

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_operating_characteristics.py"
CELLS = ("cnn-n100", "glyphs-mlp-n300", "mlp-n1000")
REPS = 200


@pytest.fixture(scope="module")
def bench():
    name = "tune_operating_characteristics_under_test"
    try:
        yield load_script(SCRIPT, name)
    finally:
        sys.modules.pop(name, None)


def _null_rate(bench, design: Design, cells=CELLS, reps: int = REPS, count: int = 17) -> tuple[float, int]:
    by_name = {c["name"]: bench.Cell.from_dict(c) for c in bench.load_cells()}
    labels = bench.labels_for(count)
    pools = (bench.SELECTION_POOL[:design.selection_seeds], bench.CONFIRMATION_POOL[:design.confirmation_seeds])
    adopted = 0
    for i, name in enumerate(cells):
        sim = bench.Simulator(by_name[name], np.random.default_rng([11, i]))
        outcome = bench.run_scenario(sim, design, labels, 0.0, reps, pools)
        assert outcome.right.sum() == 0  # nothing to find under the null
        adopted += int(outcome.adopt.sum())
    return adopted / (reps * len(cells)), reps * len(cells)


def _bound(n: int, alpha: float = 0.05) -> float:
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / n)


def test_the_default_design_adopts_a_useless_candidate_at_most_at_its_level(bench):
    rate, n = _null_rate(bench, DEFAULT_DESIGN)
    assert rate <= _bound(n), f"adopt under the null: {rate:.3f} over {n} tunes (bound {_bound(n):.3f})"


def test_a_gate_at_a_broken_level_fails_the_check(bench):
    """The check can fail: the same design at alpha = 0.3 adopts far more often than the bound."""
    broken = replace(DEFAULT_DESIGN, alpha=0.3)
    rate, n = _null_rate(bench, broken, cells=("cnn-n100",), reps=150)
    assert rate > _bound(n)
