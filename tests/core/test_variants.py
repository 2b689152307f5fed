"""The labelled variants: additive_margin (float64 oracle), the released variant's L5 margin (lp5: test_lp5_margin.py),
the variance allocation's warm-up."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from core import oracles
from mr2 import MR2Loss
from mr2.checks import MR2InputError
from mr2.functional import additive_margin_loss
from mr2.losses import ReleasedMR2Loss


def _batch(b=24, k=4, d=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    target = torch.arange(b) % k
    features = (torch.randn(b, d, generator=g, dtype=dtype) * (1 + target.unsqueeze(1))).relu() + 0.5
    logits = torch.randn(b, k, generator=g, dtype=dtype) * 2
    # features that need a gradient: a training step without one leaves the representation term out
    return logits, features.requires_grad_(), target


def test_additive_margin_loss_matches_float64_oracle_and_reduces_to_cross_entropy():
    logits, _, target = _batch()
    margins = torch.tensor([0.3, 1.2, 0.0, 2.5], dtype=torch.float64)
    got = additive_margin_loss(logits, target, margins)
    assert got.item() == pytest.approx(oracles.additive_margin_loss(logits, target, margins), rel=1e-12)
    torch.testing.assert_close(
        additive_margin_loss(logits, target, torch.zeros(4, dtype=torch.float64)),
        F.cross_entropy(logits, target),
    )
    # Only the true logit moves: the gradient of the other logits is softmax(shifted) as in CE.
    z = logits.clone().requires_grad_()
    additive_margin_loss(z, target, margins, reduction="sum").backward()
    shifted = logits.clone()
    shifted[torch.arange(24), target] -= margins[target]
    expected = torch.softmax(shifted, 1) - F.one_hot(target, 4).double()
    torch.testing.assert_close(z.grad, expected)


def test_additive_margin_variant_uses_the_allocation_normalised_by_its_mean():
    logits, features, target = _batch()
    loss_fn = MR2Loss.from_variant("additive_margin", 4, margin_scale=0.7, c_bar=3.0)
    assert loss_fn.logit_margin == "additive"
    total = loss_fn(logits, features, target)
    a = loss_fn.statistics.second_moment()
    gamma = torch.tensor(oracles.gamma_allocation(a.tolist(), 1.0), dtype=torch.float64)
    delta = 0.7 * gamma / gamma.mean()  # independent of c_bar
    logit_term = oracles.additive_margin_loss(logits, target, delta)
    s_bar = float(loss_fn.statistics.spread().mean())
    rep = oracles.representation_terms(features, target, 2 * s_bar)
    assert total.item() == pytest.approx(logit_term + 0.1 * sum(rep) / len(rep), rel=1e-8)
    torch.testing.assert_close(loss_fn.parts.logit_margins.double(), delta, rtol=1e-6, atol=1e-7)


def test_additive_margin_is_zero_during_warmup_and_when_margins_are_disabled():
    logits, features, target = _batch()
    loss_fn = MR2Loss.from_variant("additive_margin", 5, lambda_rep=0.0)  # class 4 never seen
    wide = torch.cat([logits, torch.zeros(24, 1, dtype=logits.dtype)], dim=1)
    torch.testing.assert_close(loss_fn(wide, features, target), F.cross_entropy(wide, target))
    loss_fn = MR2Loss.from_variant("additive_margin", 4, lambda_rep=0.0)
    loss_fn.gammas_enabled = False
    torch.testing.assert_close(loss_fn(logits, features, target), F.cross_entropy(logits, target))


def test_additive_margin_is_a_method_option_and_bad_scale_is_an_error():
    from mr2.methods.mr2 import MR2Method

    method = MR2Method(4, variant="additive_margin", margin_scale=0.25)
    assert method.loss.logit_margin == "additive" and method.loss.margin_scale == 0.25
    with pytest.raises(MR2InputError, match="margin_scale"):
        MR2Loss(4, logit_margin="additive", margin_scale=-1.0)
    with pytest.raises(MR2InputError, match="logit_margin must be"):
        MR2Loss(4, logit_margin="multiplicative")


def test_the_released_variant_keeps_the_l5_spread_in_its_margin():
    # lp5's own margin (the L2 spread) is checked from first principles in test_lp5_margin.py.
    logits, features, target = _batch()
    released = ReleasedMR2Loss.from_variant("released", 4)
    released(logits, features, target)
    assert released.parts.margin.item() == pytest.approx(
        2 * released.statistics.spread().mean().item(), rel=1e-6
    )


def test_variance_allocation_waits_until_every_class_has_two_samples():
    loss_fn = MR2Loss.from_variant("variance", 3)
    features = torch.tensor([[1.0, 0.0], [3.0, 1.0], [0.0, 2.0], [5.0, 5.0]], dtype=torch.float64)
    loss_fn(torch.zeros(4, 3, dtype=torch.float64), features, torch.tensor([0, 0, 1, 2]))
    # Classes 1 and 2 were seen once (s_k = 0): the allocation must not start yet.
    assert loss_fn.logit_temperatures().tolist() == [1.0, 1.0, 1.0]
    loss_fn(torch.zeros(4, 3, dtype=torch.float64), features + 1, torch.tensor([1, 2, 1, 2]))
    gamma = loss_fn.logit_temperatures()
    assert not torch.allclose(gamma, torch.ones_like(gamma))
    assert gamma.mean().item() == pytest.approx(1.0, rel=1e-6)  # c_bar, no class clamped


@pytest.mark.parametrize(
    ("options", "released"),
    [
        ({}, False),
        ({"variant": "distance_1d"}, False),
        ({"variant": "released"}, True),
        ({"estimator": "batch"}, True),
        ({"rep_reduction": "released"}, True),
        ({"variant": "lp5", "distance_margin_norm": "statistics"}, True),
        ({"distance_temperature": "1d"}, True),
    ],
)
def test_the_method_builds_released_mr2_loss_only_for_a_released_knob(options, released):
    from mr2.methods.mr2 import MR2Method

    loss = MR2Method(4, **options).loss
    assert isinstance(loss, ReleasedMR2Loss) is released and isinstance(loss, MR2Loss)


def test_released_knobs_are_not_options_of_the_main_loss():
    with pytest.raises(MR2InputError, match=r"MR2Loss has no option\(s\) \['distance_margin_norm', 'estimator'"):
        MR2Loss.from_variant("released", 4)
    with pytest.raises(TypeError, match="estimator"):
        MR2Loss(4, estimator="batch")  # type: ignore[call-arg]
    # ReleasedMR2Loss with its defaults is the paper's loss: same values on the same batches.
    logits, features, target = _batch()
    paper, released = MR2Loss(4), ReleasedMR2Loss(4)
    for step in range(2):
        assert torch.equal(paper(logits, features + step, target), released(logits, features + step, target))


def test_a_given_distance_temperature_replaces_the_variants_whole():
    d = 6
    assert MR2Loss.from_variant("distance_1d", 4).distance_temperature_value(d) == 6.0
    assert MR2Loss.from_variant("distance_1d", 4, distance_temperature=3.0).distance_temperature_value(d) == 3.0
    released = ReleasedMR2Loss.from_variant("paper", 4, distance_temperature="10d")
    assert released.distance_temperature_value(d) == 60.0 and released.distance_temperature == "10d"


def test_forward_records_its_profiler_labels_under_a_profiler():
    from torch.profiler import ProfilerActivity, profile

    from mr2.losses import PROFILER_LABELS

    logits, features, target = _batch()
    for lambda_rep, labels in ((0.1, PROFILER_LABELS), (0.0, PROFILER_LABELS[:3])):
        loss_fn = MR2Loss(4, lambda_rep=lambda_rep)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                loss_fn(logits, features, target)
        counts = {e.key: e.count for e in prof.key_averages() if e.key.startswith("mr2.")}
        assert counts == dict.fromkeys(labels, 2)
