"""The lp5 variant's distance margin against a float64 oracle from first principles: the statistics in
the L5 norm, the margin ``2 s_bar`` in the L2 norm of the pair distances, ``s_k`` the moving-average
weighted variance of class k's features (oracles.pooled_statistics: every sample carries its batch's
weight, no buffer of the implementation is read)."""

from __future__ import annotations

import pytest

from core import oracles
from helpers import classification_batch
from mr2 import MR2Loss


def test_lp5_distance_margin_is_twice_the_mean_l2_spread_of_the_weighted_samples():
    batches = [classification_batch(seed=seed) for seed in (1, 2, 3, 0)]
    lp5 = MR2Loss.from_variant("lp5", 4, momentum=0.5)
    for logits, features, target in batches:
        lp5(logits, features.requires_grad_(), target)  # a gradient: the term is computed
    seen = [(features, target) for _, features, target in batches]
    _, _, l2_spread = oracles.pooled_statistics(seen, 4, 0.5, norm_p=2.0)
    margin = 2.0 * sum(l2_spread) / 4
    assert lp5.parts.margin.item() == pytest.approx(margin, rel=1e-5)
    # The margin is the one of the last batch's representation term.
    _, features, target = batches[-1]
    terms = oracles.representation_terms(features, target, margin)
    assert lp5.parts.representation.item() == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    # Not the L5 spread of the statistics (the released code's margin): the two differ here.
    _, _, l5_spread = oracles.pooled_statistics(seen, 4, 0.5, norm_p=5.0)
    assert 2.0 * sum(l5_spread) / 4 != pytest.approx(margin, rel=1e-2)
