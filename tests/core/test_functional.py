"""The pure MR2 functions against float64 loop oracles."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import mr2.functional as MF
from core import oracles
from helpers import classification_batch
from mr2.checks import MR2InputError

#: Standard normal features, random class ids (tests/helpers.py).
GAUSSIAN = {"balanced": False, "spread_by_class": False}


def test_logit_margin_loss_matches_oracle():
    logits, _, target = classification_batch(12, 4, 5, **GAUSSIAN)
    gamma = torch.rand(4, dtype=torch.float64) * 2 + 0.2
    got = MF.logit_margin_loss(logits, target, gamma)
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(oracles.logit_margin_loss(logits, target, gamma), rel=1e-12)


def test_logit_margin_loss_with_unit_temperatures_is_cross_entropy():
    logits, _, target = classification_batch(12, 4, 5, dtype=torch.float32, **GAUSSIAN)
    got = MF.logit_margin_loss(logits, target, torch.ones(4))
    torch.testing.assert_close(got, F.cross_entropy(logits, target))


def test_logit_margin_loss_stable_for_small_temperature():
    logits = torch.tensor([[50.0, -50.0], [-50.0, 50.0]], requires_grad=True)
    loss = MF.logit_margin_loss(logits, torch.tensor([1, 0]), torch.full((2,), 1e-3))
    loss.backward()
    assert math.isfinite(loss.item()) and loss.item() == pytest.approx(1e5, rel=1e-6)
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("pair_mode", ["dense", "sparse", "auto"])
@pytest.mark.parametrize("temperature", [1.0, 7.5])
def test_representation_margin_loss_matches_oracle(temperature, pair_mode):
    _, features, target = classification_batch(14, 3, 4, **GAUSSIAN)
    margin = 1.7
    got = MF.representation_margin_loss(
        features, target, margin, temperature=temperature, reduction="none", pair_mode=pair_mode
    )
    want = oracles.representation_terms(features, target, margin, temperature)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-10, atol=1e-10)
    mean = MF.representation_margin_loss(features, target, margin, temperature=temperature, pair_mode=pair_mode)
    assert mean.item() == pytest.approx(sum(want) / len(want), rel=1e-10)


def test_sparse_and_dense_pairs_agree_in_value_and_gradient_with_many_classes():
    _, features, target = classification_batch(40, 25, 6, scale=2.0, **GAUSSIAN)
    grads = []
    for mode in ("dense", "sparse"):
        f = features.clone().requires_grad_()
        value = MF.representation_margin_loss(f, target, 3.0, temperature=2.0, pair_mode=mode)
        value.backward()
        grads.append((value.detach(), f.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-10, atol=1e-12)
    f = features[:10].clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: MF.representation_margin_loss(x, target[:10] % 3, 2.0, pair_mode="sparse"), (f,)
    )


@pytest.mark.parametrize("pair_mode", ["dense", "sparse"])
def test_representation_margin_loss_partner_pool_matches_full_batch(pair_mode):
    _, features, target = classification_batch(10, 3, 4, **GAUSSIAN)
    full = MF.representation_margin_loss(features, target, 0.5, reduction="none", pair_mode=pair_mode)
    part = MF.representation_margin_loss(
        features[4:7],
        target[4:7],
        0.5,
        reduction="none",
        partner_features=features,
        partner_target=target,
        self_offset=4,
        pair_mode=pair_mode,
    )
    torch.testing.assert_close(part, full[4:7])


@pytest.mark.parametrize("pair_mode", ["dense", "sparse"])
def test_representation_margin_loss_large_norms_and_singletons_are_finite(pair_mode):
    features = (torch.randn(6, 8) * 1e4).requires_grad_()
    target = torch.tensor([0, 0, 1, 2, 2, 3])  # classes 1 and 3 have a single sample
    per_sample = MF.representation_margin_loss(features, target, 0.0, reduction="none", pair_mode=pair_mode)
    assert torch.isfinite(per_sample).all()
    assert per_sample[2].item() == 0.0 and per_sample[5].item() == 0.0
    per_sample.sum().backward()
    assert torch.isfinite(features.grad).all()
    assert features.grad[2].abs().sum().item() == 0.0


def test_gradients_match_finite_differences():
    logits, features, target = classification_batch(8, 3, 3, **GAUSSIAN)
    gamma = torch.tensor([0.7, 1.0, 1.6], dtype=torch.float64)
    logits.requires_grad_()
    features.requires_grad_()
    assert torch.autograd.gradcheck(lambda z: MF.logit_margin_loss(z, target, gamma), (logits,))
    assert torch.autograd.gradcheck(
        lambda f: MF.representation_margin_loss(f, target, 2.0, temperature=3.0), (features,)
    )


def test_margin_allocation_matches_oracle_and_keeps_mean():
    a = torch.rand(7, dtype=torch.float64) * 20
    got = MF.gamma_allocation(a, c_bar=1.3)
    torch.testing.assert_close(got, torch.tensor(oracles.gamma_allocation(a.tolist(), 1.3)).double())
    assert got.mean().item() == pytest.approx(1.3)


def test_margin_allocation_minimises_the_bound_at_fixed_mean():
    a = torch.tensor([1.0, 4.0, 30.0, 2.0], dtype=torch.float64)
    best = MF.class_sensitive_bound(a, MF.gamma_allocation(a, 1.0), num_samples=50).complexity
    for _ in range(50):
        other = torch.rand(4, dtype=torch.float64) + 0.1
        other = other / other.mean()
        assert MF.class_sensitive_bound(a, other, num_samples=50).complexity >= best - 1e-12


def test_class_sensitive_bound_matches_formula():
    a = torch.tensor([2.0, 3.0, 5.0], dtype=torch.float64)
    g = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    terms = MF.class_sensitive_bound(a, g, num_samples=400, weight_norm_bound=2.0)
    per_class = [2.0 / 0.25, 3.0, 5.0 / 4.0]
    expected = 4 * math.sqrt(2) * 2.0 * 3 / math.sqrt(400) * math.sqrt(sum(per_class))
    assert terms.complexity.item() == pytest.approx(expected)
    torch.testing.assert_close(terms.shares, torch.tensor(per_class).double() / sum(per_class))


def test_class_sums_two_halves_equal_one_batch():
    _, features, target = classification_batch(20, 5, 3, **GAUSSIAN)
    whole = MF.class_sums(features, target, 5)
    first, second = MF.class_sums(features[:9], target[:9], 5), MF.class_sums(features[9:], target[9:], 5)
    for w, a, b in zip(whole, first, second):
        torch.testing.assert_close(w, a + b)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: MF.gamma_allocation(torch.tensor([1.0, -1.0])), "must be >= 0"),
        (lambda: MF.gamma_allocation(torch.ones(2, 2)), "must be a 1-D tensor"),
        (lambda: MF.gamma_allocation(torch.ones(3), c_bar=0), "c_bar"),
        (lambda: MF.gamma_allocation(torch.tensor([1.0, float("nan")])), "non-finite"),
        (lambda: MF.logit_margin_loss(torch.ones(2, 3), torch.tensor([0, 3]), torch.ones(3)), "outside [0, 3)"),
        (lambda: MF.logit_margin_loss(torch.ones(2, 3), torch.tensor([0, 1]), torch.ones(2)), "temperatures must have shape [num_classes]=3; got (2,)."),
        (lambda: MF.additive_margin_loss(torch.ones(2, 3), torch.tensor([0, 1]), torch.ones(4)), "margins must have shape [num_classes]=3; got (4,)."),
        (lambda: MF.additive_margin_loss(torch.ones(2, 3), torch.tensor([0, 3]), torch.ones(3)), "outside [0, 3)"),
        (lambda: MF.logit_margin_loss(torch.ones(2, 3), torch.tensor([0.0, 1.0]), torch.ones(3)), "integer class ids"),
        (lambda: MF.representation_margin_loss(torch.ones(2, 3, 1), torch.tensor([0, 1]), 0.0), "features must have shape"),
        (lambda: MF.representation_margin_loss(torch.ones(2, 3), torch.tensor([0, 1]), 0.0, temperature=0), "temperature"),
        (lambda: MF.representation_margin_loss(torch.ones(2, 3), torch.tensor([0, 1]), 0.0, pair_mode="all"), "pair_mode"),
        (lambda: MF.class_sensitive_bound(torch.ones(2), torch.zeros(2), num_samples=3), "must all be > 0"),
    ],
)
def test_bad_input_messages(call, message):
    with pytest.raises(MR2InputError, match=__import__("re").escape(message)):
        call()


@pytest.mark.parametrize(
    ("value", "integer", "number"),
    [(3, True, True), (0, True, True), (2.5, False, True), (True, False, False), (False, False, False),
     ("3", False, False), (None, False, False), (torch.tensor(3), False, False)],
)
def test_option_type_checks_reject_bools_and_non_numbers(value, integer, number):
    from mr2.checks import is_int, is_number

    assert is_int(value) is integer and is_number(value) is number
