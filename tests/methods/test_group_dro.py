"""Group DRO over classes: oracle, absent classes, eta = 0, evaluation, state round trip."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from methods import baseline_oracles as oracle
from methods.baseline_helpers import make_context
from mr2.methods.group_dro import GroupDRO

K = 5


def steps(n_steps: int = 4, batch: int = 7, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_steps):
        logits = 2 * torch.randn(batch, K, generator=g, dtype=torch.float64)
        target = torch.randint(0, K - 1, (batch,), generator=g)  # class K-1 never present
        yield logits, target


def make(counts=(10, 20, 30, 40, 50), **options) -> GroupDRO:
    method = GroupDRO(K, **options)
    method.setup(make_context(sum(counts), torch.tensor(counts)))
    return method


def test_matches_the_loop_oracle_over_several_steps():
    counts = (10, 20, 30, 40, 50)
    method = make(counts, eta=0.5, adjustment=2.0)
    data = list(steps())
    want_q, want_loss = oracle.group_dro(
        [(oracle.cross_entropy(z, y), y.tolist()) for z, y in data],
        K,
        eta=0.5,
        adjustment=[2.0 / c**0.5 for c in counts],
    )
    for (logits, target), q, loss in zip(data, want_q, want_loss):
        got = method(logits, None, target)
        torch.testing.assert_close(got, torch.tensor(loss, dtype=torch.float64))
        torch.testing.assert_close(method.q, torch.tensor(q, dtype=torch.float64))


def test_absent_classes_keep_their_weight_and_add_nothing_to_the_loss():
    method = make(eta=1.0)
    for logits, target in steps():
        absent = torch.bincount(target, minlength=K) == 0
        before = method.q.clone()
        method(logits, None, target)
        assert torch.equal(method.q[absent], before[absent])
        torch.testing.assert_close(method.q.sum(), torch.tensor(1.0, dtype=torch.float64))
    # The never-present class still holds its initial weight 1/K: it was never treated as zero-loss.
    assert method.q[K - 1] == 1.0 / K


def test_gradient_of_an_absent_class_logit_row_is_that_of_the_present_classes_only():
    method = make(eta=0.0)
    logits, target = next(steps())
    z = logits.clone().requires_grad_()
    method(z, None, target).backward()
    counts = torch.bincount(target, minlength=K).double()
    want = torch.autograd.functional.jacobian(
        lambda x: (F.cross_entropy(x, target, reduction="none") / counts[target]).sum() / K, logits
    )
    torch.testing.assert_close(z.grad, want)


def test_eta_zero_on_a_class_balanced_batch_is_cross_entropy():
    method = make(eta=0.0)
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        target = torch.arange(K).repeat(3)[torch.randperm(3 * K, generator=g)]
        logits = torch.randn(3 * K, K, generator=g, dtype=torch.float64)
        torch.testing.assert_close(method(logits, None, target), F.cross_entropy(logits, target))
        assert torch.equal(method.q, torch.full((K,), 1.0 / K, dtype=torch.float64))


def test_evaluation_does_not_move_q():
    method = make(eta=1.0)
    method.eval()
    for logits, target in steps():
        method(logits, None, target)
    assert torch.equal(method.q, torch.full((K,), 1.0 / K, dtype=torch.float64))


def test_state_dict_round_trip_gives_identical_subsequent_losses():
    data = list(steps(6))
    method = make(eta=0.7)
    for logits, target in data[:3]:
        method(logits, None, target)
    clone = make(eta=0.7)
    clone.load_state_dict(method.state_dict())
    for logits, target in data[3:]:
        assert torch.equal(method(logits, None, target), clone(logits, None, target))
    assert torch.equal(method.q, clone.q)
