"""MR2Loss: reductions to known cases, released-code compatibility, invariances, resume."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from core import oracles
from mr2 import MR2Loss
from mr2.checks import MR2InputError
from mr2.functional import representation_margin_loss
from mr2.losses import ReleasedMR2Loss


def _batch(b=24, k=4, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    target = torch.arange(b) % k
    features = torch.randn(b, d, generator=g) * (1 + target.unsqueeze(1)) + 2
    logits = torch.randn(b, k, generator=g) * 2
    # features that need a gradient: a training step without one leaves the representation term out
    return logits, features.requires_grad_(), target


def test_unit_temperatures_and_no_representation_term_is_cross_entropy():
    logits, features, target = _batch()
    loss_fn = MR2Loss(4, lambda_rep=0.0)
    loss_fn.gammas_enabled = False
    torch.testing.assert_close(loss_fn(logits, features, target), F.cross_entropy(logits, target))
    assert loss_fn.logit_temperatures().tolist() == [1.0] * 4


def test_identical_classes_get_unit_temperatures_and_loss_is_ce():
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).repeat(6, 1)
    target = torch.tensor([0, 0, 1, 1]).repeat(3)  # both classes see both vectors equally
    logits = torch.randn(12, 2)
    loss_fn = MR2Loss(2, lambda_rep=0.0)
    torch.testing.assert_close(loss_fn(logits, features, target), F.cross_entropy(logits, target))
    torch.testing.assert_close(loss_fn.logit_temperatures(), torch.ones(2))


def test_loss_equals_its_formula_from_the_statistics():
    """The whole loss against float64 oracles: statistics by explicitly weighted samples, the
    allocation by Corollary 1, both terms by loops (nothing taken from the implementation)."""
    logits, features, target = _batch()
    loss_fn = MR2Loss(
        4, c_bar=1.5, lambda_rep=0.3, momentum=0.5, distance_temperature=2.0, distance_temperature_per_dim=True
    )
    batches = []
    for seed in range(3):  # statistics accumulate over a few steps
        _, f, y = _batch(seed=seed + 10)
        loss_fn(logits, f, y)
        batches.append((f, y))
    got = loss_fn(logits, features, target)
    batches.append((features, target))  # the step's own batch updates the statistics first
    _, mean_sq_norm, spread = oracles.pooled_statistics(batches, 4, momentum=0.5)
    gamma = oracles.gamma_allocation([m + s for m, s in zip(mean_sq_norm, spread)], 1.5)
    s_bar = sum(spread) / 4
    logit_term = oracles.logit_margin_loss(logits.double(), target, torch.tensor(gamma, dtype=torch.float64))
    rep = oracles.representation_terms(features.double(), target, 2 * s_bar, temperature=12.0)
    assert got.item() == pytest.approx(logit_term + 0.3 * sum(rep) / len(rep), rel=1e-5)
    parts = loss_fn.parts
    assert parts is not None
    assert parts.logit_margins.tolist() == pytest.approx(gamma, rel=1e-5)
    assert parts.logit.item() == pytest.approx(logit_term, rel=1e-5)
    assert parts.representation.item() == pytest.approx(sum(rep) / len(rep), rel=1e-5)
    assert not parts.total.requires_grad


def test_released_variant_reproduces_released_arithmetic():
    oracle = oracles.ReleasedArithmetic(num_classes=4, momentum=0.9, lambda_rep=0.1)
    loss_fn = ReleasedMR2Loss.from_variant("released", 4, momentum=0.9)
    for seed in range(4):
        logits, features, target = _batch(b=10, seed=seed)
        target = target[torch.randperm(10, generator=torch.Generator().manual_seed(seed))]
        want, gamma = oracle(logits, features, target)
        got = loss_fn(logits, features, target)
        assert got.item() == pytest.approx(want, rel=1e-4)
        torch.testing.assert_close(loss_fn.logit_temperatures().double(), torch.tensor(gamma).double(), rtol=1e-4, atol=1e-6)


def test_permuting_class_ids_permutes_temperatures_and_keeps_loss():
    perm = torch.tensor([3, 1, 0, 2])
    inverse = torch.argsort(perm)
    a, b = MR2Loss(4), MR2Loss(4)
    for seed in range(3):
        logits, features, target = _batch(seed=seed)
        permuted_logits = torch.empty_like(logits)
        permuted_logits[:, perm] = logits
        la = a(logits, features, target)
        lb = b(permuted_logits, features, perm[target])
        torch.testing.assert_close(la, lb)
    torch.testing.assert_close(b.logit_temperatures()[perm], a.logit_temperatures())
    del inverse


def test_larger_spread_class_gets_larger_temperature():
    loss_fn = MR2Loss(4, lambda_rep=0.0)
    logits, features, target = _batch()
    loss_fn(logits, features - 2, target)  # centred; spread grows with the class id
    gamma = loss_fn.logit_temperatures()
    assert torch.all(gamma[1:] > gamma[:-1])
    assert gamma.mean().item() == pytest.approx(1.0)


def test_warmup_keeps_unit_temperatures_until_all_classes_seen():
    loss_fn = MR2Loss(3, lambda_rep=0.0)
    logits, features = torch.randn(4, 3), torch.randn(4, 2) * 5
    loss = loss_fn(logits, features, torch.tensor([0, 1, 0, 1]))
    torch.testing.assert_close(loss, F.cross_entropy(logits, torch.tensor([0, 1, 0, 1])))
    loss_fn(logits, features, torch.tensor([2, 2, 2, 2]))
    assert not torch.allclose(loss_fn.logit_temperatures(), torch.ones(3))


def test_eval_mode_freezes_statistics_and_state_dict_resumes_identically():
    loss_fn = MR2Loss(4, momentum=0.8)
    for seed in range(3):
        loss_fn(*_batch(seed=seed))
    state = {k: v.clone() for k, v in loss_fn.state_dict().items()}
    loss_fn.eval()
    loss_fn(*_batch(seed=99))
    for key, value in loss_fn.state_dict().items():
        torch.testing.assert_close(value, state[key], msg=key)
    loss_fn.train()
    resumed = MR2Loss(4, momentum=0.8)
    resumed.load_state_dict(state)
    for seed in range(3, 6):
        batch = _batch(seed=seed)
        torch.testing.assert_close(loss_fn(*batch), resumed(*batch))


def test_gradients_flow_to_logits_and_features_and_rep_term_pulls_classes_together():
    logits, features, target = _batch()
    features = features.detach().clone().requires_grad_()
    logits = logits.clone().requires_grad_()
    loss_fn = MR2Loss(4, lambda_rep=1.0, distance_temperature=1.0, distance_temperature_per_dim=True)
    loss_fn(logits, features, target).backward()
    assert logits.grad.abs().sum() > 0 and features.grad.abs().sum() > 0
    # A gradient step on the representation term alone shrinks the within-class spread.
    f = features.detach().clone().requires_grad_()
    rep = representation_margin_loss(f, target, 0.0, temperature=6.0)
    rep.backward()
    stepped = f.detach() - 0.05 * f.grad
    def spread(x):
        return sum(((x[target == k] - x[target == k].mean(0)) ** 2).sum() for k in range(4))
    assert spread(stepped) < spread(f.detach())


def test_bf16_autocast_stays_finite():
    model = torch.nn.Linear(6, 4)
    loss_fn = MR2Loss(4)
    _, features, target = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        feats = torch.nn.functional.relu(features * 3)
        logits = model(feats)
        assert logits.dtype == torch.bfloat16
        loss = loss_fn(logits, feats, target)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f(torch.ones(3, 5), torch.ones(3, 2), torch.tensor([0, 1, 2])), "logits have 5 columns"),
        (lambda f: f(torch.ones(3, 4), torch.ones(3, 2), torch.tensor([0, 1, 4])), "outside [0, 4)"),
        (lambda f: f(torch.ones(3, 4), torch.ones(3, 2, 2), torch.tensor([0, 1, 2])), "features must have shape"),
        (lambda f: f(torch.full((3, 4), float("nan")), torch.ones(3, 2), torch.tensor([0, 1, 2])), "logits contain 12 non-finite"),
        (lambda f: f(torch.ones(3, 4), torch.ones(2, 2), torch.tensor([0, 1, 2])), "features has 2 rows"),
        (lambda f: f(torch.ones(4), torch.ones(3, 2), torch.tensor([0, 1, 2])), "logits must have shape"),
        (lambda f: f(torch.ones(3, 4), torch.ones(3, 2), torch.tensor([[0, 1, 2]])), "target must be a 1-D"),
    ],
)
def test_bad_input_messages(call, message):
    with pytest.raises(MR2InputError, match=__import__("re").escape(message)):
        call(MR2Loss(4))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 1}, "num_classes must be an integer >= 2"),
        ({"num_classes": 3, "lambda_rep": -1}, "lambda_rep"),
        ({"num_classes": 3, "c_bar": 0.0}, "c_bar"),
        ({"num_classes": 3, "distance_temperature": "tend"}, "distance_temperature must be a positive number"),
        ({"num_classes": 3, "distance_temperature": "1d"}, "the string '<c>d' is ReleasedMR2Loss's spelling"),
        ({"num_classes": 3, "distance_temperature_per_dim": "yes"}, "distance_temperature_per_dim must be"),
        ({"num_classes": 3, "allocation": "cube"}, "allocation"),
        ({"num_classes": 3, "pairs": "all"}, "pairs"),
        ({"num_classes": 3, "warmup_samples_per_class": 0}, "warmup_samples_per_class"),
    ],
)
def test_bad_construction_messages(kwargs, message):
    with pytest.raises(MR2InputError, match=__import__("re").escape(message)):
        MR2Loss(**kwargs)


def test_unknown_variant_lists_choices():
    with pytest.raises(MR2InputError, match="choose one of: additive_margin, centered, distance_1d, logit_only, lp5, paper, released, variance"):
        MR2Loss.from_variant("best", 3)


def test_recommended_variants_change_only_their_setting():
    torch.manual_seed(3)
    logits, features = torch.randn(12, 4, dtype=torch.float64), torch.randn(12, 6, dtype=torch.float64)
    features.requires_grad_()  # a training step without a feature gradient leaves the term out
    target = torch.tensor([0, 1, 2, 3] * 3)
    paper, logit_only = MR2Loss.from_variant("paper", 4), MR2Loss.from_variant("logit_only", 4)
    distance_1d = MR2Loss.from_variant("distance_1d", 4)
    assert logit_only.lambda_rep == 0.0 and distance_1d.distance_temperature_value(6) == 6.0
    total = paper(logits, features, target)
    assert torch.allclose(logit_only(logits, features, target), paper.parts.logit)
    # T = d: the representation term of the same batch with squared distances divided by d = 6.
    distance_1d(logits, features, target)
    gamma = paper.logit_temperatures()
    assert torch.allclose(distance_1d.logit_temperatures(), gamma)
    margin = 2 * distance_1d.statistics.mean_spread()
    expected = representation_margin_loss(features, target, margin, temperature=6.0)
    assert torch.allclose(distance_1d.parts.representation, expected)
    assert torch.allclose(total, paper.parts.logit + 0.1 * paper.parts.representation)


def test_finiteness_check_counts_bad_values_and_accepts_sums_that_overflow():
    from mr2.checks import check_finite

    huge = torch.full((4, 3), 3.0e38)  # every value finite; their float32 sum overflows to inf
    check_finite("features", huge)  # no error: the exact count finds nothing
    bad = huge.clone()
    bad[1, 2], bad[3, 0] = float("inf"), float("nan")
    with pytest.raises(MR2InputError, match="features contain 2 non-finite"):
        check_finite("features", bad)
    half = torch.ones(8, 2, dtype=torch.float16)
    half[0, 0] = float("-inf")
    with pytest.raises(MR2InputError, match="logits contain 1 non-finite"):
        check_finite("logits", half)
