"""The baselines' pure loss functions against float64 loop oracles, and their degenerate cases."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from methods import baseline_oracles as oracle
from mr2.checks import MR2InputError
from mr2.functional.baselines import (
    cdb_class_weights,
    cdb_dynamic_tau,
    class_loss_sums,
    class_max,
    drw_class_weights,
    focal_loss,
    generalized_cross_entropy,
    generalized_cross_entropy_surrogate,
    group_dro_update,
    jtt_upsampled_indices,
    ldam_logits,
    ldam_margins,
    logit_adjusted_cross_entropy,
    per_sample_ema,
    relative_difficulty,
)

K = 5


def batch(n: int = 9, k: int = K, scale: float = 3.0, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(n, k, generator=g, dtype=torch.float64)
    target = torch.randint(0, k, (n,), generator=g)
    return logits, target


def close(got: torch.Tensor, want: list[float] | float) -> None:
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("q", [0.7, 0.3, 1.0])
def test_generalized_cross_entropy_matches_oracle(q):
    logits, target = batch()
    close(generalized_cross_entropy(logits, target, q, reduction="none"), oracle.gce(logits, target, q))
    close(
        generalized_cross_entropy_surrogate(logits, target, q, reduction="none"),
        oracle.gce_surrogate(logits, target, q),
    )


def test_gce_surrogate_gradient_is_q_times_gce_gradient():
    logits, target = batch()
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    generalized_cross_entropy(a, target, 0.7).backward()
    generalized_cross_entropy_surrogate(b, target, 0.7).backward()
    torch.testing.assert_close(b.grad, 0.7 * a.grad)


def test_gce_tends_to_cross_entropy_as_q_goes_to_zero():
    logits, target = batch()
    torch.testing.assert_close(
        generalized_cross_entropy(logits, target, 1e-7), F.cross_entropy(logits, target), rtol=1e-5, atol=0
    )


def test_per_sample_ema_first_visit_takes_the_value():
    previous = torch.tensor([5.0, 5.0], dtype=torch.float64)
    value = torch.tensor([1.0, 1.0], dtype=torch.float64)
    got = per_sample_ema(previous, value, 0.7, torch.tensor([False, True]))
    close(got, [1.0, 0.7 * 5 + 0.3 * 1])


def test_class_max_and_relative_difficulty():
    values = torch.tensor([0.2, 3.0, 1.0, 7.0, 0.5], dtype=torch.float64)
    labels = torch.tensor([1, 1, 0, -1, 0])
    close(class_max(values, labels, 3), [1.0, 3.0, 0.0])
    close(relative_difficulty(values, values), (values / (2 * values + 1e-8)).tolist())


def test_jtt_upsampled_indices_counts():
    errors = torch.tensor([2, 5, 6])
    for lambda_up in (0, 1, 4):
        indices = jtt_upsampled_indices(8, errors, lambda_up)
        counts = torch.bincount(indices, minlength=8)
        want = torch.ones(8, dtype=torch.long)
        want[errors] += lambda_up
        assert torch.equal(counts, want)
    with pytest.raises(MR2InputError, match="lambda_up"):
        jtt_upsampled_indices(8, errors, -1)


def test_class_loss_sums_matches_loop():
    losses = torch.rand(20, dtype=torch.float64)
    target = torch.randint(0, K, (20,))
    sums, counts = class_loss_sums(losses, target, K)
    for k in range(K):
        close(sums[k], sum(float(v) for v, y in zip(losses, target) if int(y) == k))
        assert counts[k] == int((target == k).sum())


def test_group_dro_update_matches_oracle_and_leaves_absent_classes_exactly_unchanged():
    g = torch.Generator().manual_seed(1)
    q = torch.softmax(torch.randn(K, generator=g, dtype=torch.float64), 0)
    class_loss = torch.rand(K, generator=g, dtype=torch.float64) * 3
    present = torch.tensor([True, False, True, True, False])
    adjustment = torch.rand(K, generator=g, dtype=torch.float64)
    new = group_dro_update(q, class_loss, present, eta=0.3, adjustment=adjustment)
    assert torch.equal(new[~present], q[~present])  # bit-for-bit
    close(new.sum(), 1.0)
    tilted = {k: float(q[k]) * torch.exp(0.3 * (class_loss[k] + adjustment[k])).item() for k in (0, 2, 3)}
    mass = sum(float(q[k]) for k in (0, 2, 3))
    for k, t in tilted.items():
        close(new[k], t * mass / sum(tilted.values()))


def test_group_dro_update_eta_zero_and_empty_batch_keep_q():
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    loss = torch.tensor([5.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(group_dro_update(q, loss, torch.ones(4, dtype=torch.bool), 0.0), q)
    assert torch.equal(group_dro_update(q, loss, torch.zeros(4, dtype=torch.bool), 1.0), q)


def test_group_dro_update_does_not_overflow():
    q = torch.full((3,), 1 / 3, dtype=torch.float64)
    new = group_dro_update(
        q, torch.tensor([1e4, 1e4 - 1, 0.0], dtype=torch.float64), torch.ones(3, dtype=torch.bool), 1.0
    )
    assert torch.isfinite(new).all()
    close(new.sum(), 1.0)


def test_ldam_matches_oracle_with_imbalanced_counts_and_weights():
    cosine = torch.tanh(batch()[0])
    target = batch()[1]
    counts = [50, 10, 5, 80, 20]
    weights = drw_class_weights(torch.tensor(counts), 0.999).double()
    margins = ldam_margins(torch.tensor(counts), 0.5).double()
    got = F.cross_entropy(ldam_logits(cosine, target, margins, 30.0), target, weight=weights)
    want = oracle.ldam_loss(cosine, target, counts, 0.5, 30.0, weights.tolist())
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(
        weights, torch.tensor(oracle.drw_weights(counts, 0.999), dtype=torch.float64), rtol=1e-6, atol=1e-7
    )


def test_ldam_on_balanced_data_is_a_class_agnostic_cosine_margin():
    counts = torch.full((K,), 100)
    margins = ldam_margins(counts, 0.5)
    assert torch.equal(margins, torch.full((K,), 0.5))
    assert torch.equal(drw_class_weights(counts, 0.9999), torch.ones(K))
    cosine, target = torch.tanh(batch()[0]), batch()[1]
    # Same margin for every class: CE(s * (cos - 0.5 * onehot)), whatever the class.
    shifted = 30.0 * (cosine - 0.5 * F.one_hot(target, K))
    torch.testing.assert_close(
        F.cross_entropy(ldam_logits(cosine, target, margins.double(), 30.0), target),
        F.cross_entropy(shifted, target),
    )


@pytest.mark.parametrize("tau", [1.0, 0.5, 2.0])
def test_logit_adjustment_matches_oracle(tau):
    logits, target = batch()
    counts = [40, 10, 5, 30, 15]
    log_prior = torch.tensor(counts, dtype=torch.float64).div(100).log()
    close(
        logit_adjusted_cross_entropy(logits, target, log_prior, tau, reduction="none"),
        oracle.logit_adjusted(logits, target, counts, tau),
    )


def test_logit_adjustment_on_balanced_prior_is_cross_entropy():
    logits, target = batch()
    uniform = torch.full((K,), 1.0 / K, dtype=torch.float64).log()
    for tau in (1.0, 2.5):
        torch.testing.assert_close(
            logit_adjusted_cross_entropy(logits, target, uniform, tau), F.cross_entropy(logits, target)
        )


@pytest.mark.parametrize("gamma", [0.0, 1.0, 2.0])
def test_focal_matches_oracle(gamma):
    logits, target = batch()
    close(focal_loss(logits, target, gamma, reduction="none"), oracle.focal(logits, target, gamma))
    if gamma == 0.0:
        close(focal_loss(logits, target, 0.0), F.cross_entropy(logits, target).item())


def test_cdb_weights_match_oracle_and_edge_cases():
    accuracy = torch.tensor([0.9, 0.5, 0.2, 0.75, 0.6], dtype=torch.float64)
    torch.testing.assert_close(
        cdb_class_weights(accuracy, 1.5).double(),
        torch.tensor(oracle.cdb_weights(accuracy.tolist(), 1.5), dtype=torch.float64),
        rtol=1e-6,
        atol=1e-7,
    )
    assert torch.equal(cdb_class_weights(torch.ones(3), 1.5), torch.ones(3))  # all perfect: uniform
    assert cdb_class_weights(torch.tensor([1.0, 0.5]), 1.0)[0] == 0  # perfect class: weight 0
    equal = torch.full((3,), 0.4)
    assert torch.allclose(cdb_class_weights(equal, 1.5), torch.ones(3))
    assert cdb_dynamic_tau(torch.tensor([0.5, 0.5]), eps=0.0) == pytest.approx(1.0)
    assert 1.0 < cdb_dynamic_tau(accuracy) < 2.0


def test_functions_check_their_inputs():
    logits, target = batch()
    with pytest.raises(MR2InputError):
        generalized_cross_entropy(logits, target, q=0.0)
    with pytest.raises(MR2InputError):
        focal_loss(logits, target, gamma=-1.0)
    with pytest.raises(MR2InputError, match="log_prior"):
        logit_adjusted_cross_entropy(logits, target, torch.zeros(K + 1))
    with pytest.raises(MR2InputError, match="class_counts"):
        ldam_margins(torch.tensor([3, 0]))
    with pytest.raises(MR2InputError, match="beta"):
        drw_class_weights(torch.tensor([3, 4]), beta=1.0)
