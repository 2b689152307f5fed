"""The CPU fast paths of the loss terms against their plain formulations (float64 oracles): the
same-class pair list built from the keys sorted by class, and the fused backward of the
temperature-scaled cross-entropy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mr2.functional import logit_margin_loss
from mr2.functional.margin_losses import _same_class_entries


@pytest.mark.parametrize("seed", range(40))
def test_same_class_entries_are_the_masks_nonzero(seed):
    g = torch.Generator().manual_seed(seed)
    batch = int(torch.randint(1, 40, (1,), generator=g))
    pool = batch + int(torch.randint(0, 60, (1,), generator=g))
    classes = int(torch.randint(1, 12, (1,), generator=g))
    target = torch.randint(0, classes, (batch,), generator=g)
    key_target = torch.randint(0, classes + 3, (pool,), generator=g)  # classes absent from the batch too
    offset = int(torch.randint(0, pool - batch + 1, (1,), generator=g))
    key_target[offset:offset + batch] = target
    want = (target.unsqueeze(1) == key_target.unsqueeze(0)).nonzero(as_tuple=True)
    got = _same_class_entries(target, key_target)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_fused_scaled_cross_entropy_matches_autograd_of_the_plain_formula(reduction):
    g = torch.Generator().manual_seed(3)
    logits = (3.0 * torch.randn(37, 11, generator=g, dtype=torch.float64)).requires_grad_()
    target = torch.randint(0, 11, (37,), generator=g)
    gamma = 0.05 + 3.0 * torch.rand(11, generator=g, dtype=torch.float64)
    weights = torch.rand(37, generator=g, dtype=torch.float64)  # a non-uniform upstream gradient
    got = logit_margin_loss(logits, target, gamma, reduction=reduction)
    plain = F.cross_entropy(logits / gamma[target].unsqueeze(1), target, reduction=reduction)
    assert torch.allclose(got, plain, rtol=1e-12, atol=1e-12)
    outer = (got * weights).sum() if reduction == "none" else got
    want_outer = (plain * weights).sum() if reduction == "none" else plain
    (grad,) = torch.autograd.grad(outer, logits)
    (want,) = torch.autograd.grad(want_outer, logits)
    assert torch.allclose(grad, want, rtol=1e-10, atol=1e-12)


def test_fused_scaled_cross_entropy_in_low_precision_returns_a_gradient_of_the_input_dtype():
    logits = torch.randn(8, 5, dtype=torch.bfloat16, requires_grad=True)
    target = torch.arange(8) % 5
    loss = logit_margin_loss(logits, target, torch.full((5,), 2.0))
    assert loss.dtype == torch.float32
    (grad,) = torch.autograd.grad(loss, logits)
    want = torch.autograd.grad(F.cross_entropy(logits.float() / 2.0, target), logits)[0]
    assert grad.dtype == torch.bfloat16 and torch.equal(grad, want)
