"""Issue 47: the pair term at its own cost (per-class blocks) and no representation term without a
trainable path (a linear probe).

- The blocks path gives the float64 oracle's values and the dense path's gradients, for balanced and
  skewed batches, lonely samples and batches without a pair; ``auto`` chooses the blocks for a few
  classes and the sparse kernel for many (the dense path costs ``B^2`` entries, the blocks ``C n^2``).
- A training step whose features need no gradient leaves the representation term out (``parts``: NaN;
  the loss is the logit term) with the same statistics and the same logit gradient as a step that
  computes it; eval mode and no-grad evaluation still compute it.
"""

from __future__ import annotations

import pytest
import torch

from core import oracles
from mr2 import MR2Loss
from mr2.checks import MR2InputError
from mr2.functional import _cpu_kernels
from mr2.functional.margin_losses import representation_margin_loss
from mr2.methods.registry import build_method


def _targets(kind, batch, classes, g):
    if kind == "balanced":
        return torch.randint(0, classes, (batch,), generator=g)
    if kind == "skewed":  # one large class, a tail of small ones and lonely samples
        head = torch.zeros(batch // 2, dtype=torch.long)
        tail = torch.randint(1, classes, (batch - batch // 2,), generator=g)
        return torch.cat([head, tail])[torch.randperm(batch, generator=g)]
    if kind == "lonely":  # every class once: no pair at all
        return torch.randperm(batch, generator=g) % max(batch, classes)
    raise AssertionError(kind)


def _value_and_grad(features, target, mode, margin=0.8, temperature=1.5):
    x = features.detach().clone().requires_grad_()
    values = representation_margin_loss(x, target, margin, temperature=temperature, reduction="none",
                                        pair_mode=mode)
    weights = torch.linspace(0.5, 1.5, x.shape[0], dtype=x.dtype)
    (grad,) = torch.autograd.grad((values * weights).sum(), x)
    return values.detach(), grad


@pytest.mark.parametrize(("kind", "batch", "classes"), [
    ("balanced", 40, 3), ("balanced", 60, 10), ("skewed", 48, 12), ("lonely", 9, 12), ("balanced", 2, 1),
])
def test_blocks_equal_the_float64_oracle_and_the_dense_gradient(kind, batch, classes):
    g = torch.Generator().manual_seed(batch + classes)
    target = _targets(kind, batch, classes, g)
    features = torch.randn(batch, 5, generator=g, dtype=torch.float64) * 0.7
    want = torch.tensor(oracles.representation_terms(features, target, 0.8, temperature=1.5), dtype=torch.float64)
    blocks, blocks_grad = _value_and_grad(features, target, "blocks")
    _, dense_grad = _value_and_grad(features, target, "dense")
    torch.testing.assert_close(blocks, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(blocks_grad, dense_grad, rtol=1e-10, atol=1e-12)
    lonely = torch.bincount(target)[target] == 1
    assert torch.all(blocks[lonely] == 0) and torch.all(blocks_grad[lonely] == 0)


def test_blocks_in_float32_match_the_dense_path():
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, 10, (256,), generator=g)
    features = torch.randn(256, 64, generator=g).relu_()
    margin, temperature = 2 * 64 * 0.34, 64.0
    blocks = _value_and_grad(features, target, "blocks", margin, temperature)
    dense = _value_and_grad(features, target, "dense", margin, temperature)
    torch.testing.assert_close(blocks[0], dense[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(blocks[1], dense[1], rtol=1e-4, atol=1e-6)


def test_blocks_take_no_partner_pool():
    x, y = torch.randn(4, 3), torch.tensor([0, 0, 1, 1])
    with pytest.raises(MR2InputError, match="pairs a batch with itself"):
        representation_margin_loss(x, y, 1.0, partner_features=x, partner_target=y, pair_mode="blocks")


@pytest.mark.parametrize(("classes", "expected"), [(10, "blocks"), (1000, "sparse"), (1, "dense")])
def test_auto_takes_the_cheapest_path(classes, expected):
    target = torch.randint(0, classes, (512,), generator=torch.Generator().manual_seed(1))
    path, layout = _cpu_kernels.pair_path(target)
    counts = torch.bincount(target)
    assert path == expected
    assert layout.largest == int(counts.max()) and layout.blocks == int((counts >= 2).sum())


def test_auto_at_ten_classes_runs_the_blocks_and_equals_the_dense_path(monkeypatch):
    calls = []
    real = _cpu_kernels.class_block_log_sum_exp
    import mr2.functional.margin_losses as margin_losses

    monkeypatch.setattr(margin_losses, "class_block_log_sum_exp", lambda *a: calls.append(1) or real(*a))
    g = torch.Generator().manual_seed(2)
    target = torch.randint(0, 10, (200,), generator=g)
    features = torch.randn(200, 16, generator=g, dtype=torch.float64)
    auto = _value_and_grad(features, target, "auto")
    dense = _value_and_grad(features, target, "dense")
    assert calls == [1]  # auto ran the blocks
    torch.testing.assert_close(auto[0], dense[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(auto[1], dense[1], rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------- linear probe
def _probe_batch(seed, k=4, d=6):
    g = torch.Generator().manual_seed(seed)
    target = torch.arange(24) % k
    features = torch.randn(24, d, generator=g, dtype=torch.float64) * (1 + target.unsqueeze(1)) + 1
    return torch.randn(24, k, generator=g, dtype=torch.float64), features, target


@pytest.mark.parametrize("variant", ["distance_1d", "paper"])
def test_a_step_without_feature_gradient_skips_the_term_and_keeps_the_rest(variant, monkeypatch):
    probe, full = MR2Loss.from_variant(variant, 4), MR2Loss.from_variant(variant, 4)
    import mr2.losses.mr2 as mr2_module

    calls = []
    real = mr2_module.representation_margin_loss
    monkeypatch.setattr(mr2_module, "representation_margin_loss", lambda *a, **o: calls.append(1) or real(*a, **o))
    for seed in range(3):
        logits, features, target = _probe_batch(seed)
        z1, z2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        skipped = probe(z1, features, target)  # cached features: no gradient
        computed = full(z2, features.clone().requires_grad_(), target)
        assert len(calls) == seed + 1  # only the loss whose features need a gradient computed it
        assert probe.representation_skipped and not full.representation_skipped
        assert torch.isnan(probe.parts.representation) and torch.isfinite(full.parts.representation)
        # The loss returned is the logit term: the same as the full loss's logit term.
        torch.testing.assert_close(skipped, full.parts.logit, rtol=0, atol=0)
        torch.testing.assert_close(probe.parts.total, skipped.detach(), rtol=0, atol=0)
        # The same gradient for the logits (the term does not depend on them), the same statistics.
        (g1,) = torch.autograd.grad(skipped, z1)
        (g2,) = torch.autograd.grad(computed, z2)
        torch.testing.assert_close(g1, g2, rtol=0, atol=0)
        for (name, a), (_, b) in zip(probe.named_buffers(), full.named_buffers(), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_evaluation_and_no_gradient_calls_still_compute_the_term():
    loss = MR2Loss(4)
    logits, features, target = _probe_batch(0)
    loss(logits, features.requires_grad_(), target)
    loss.eval()
    value = loss(logits, features.detach(), target)
    assert not loss.representation_skipped and torch.isfinite(loss.parts.representation)
    want = oracles.representation_terms(features, target, float(loss.parts.margin), temperature=6.0)
    assert loss.parts.representation.item() == pytest.approx(sum(want) / len(want), rel=1e-9)
    assert value.item() == pytest.approx(loss.parts.logit.item() + 0.1 * loss.parts.representation.item())


def test_the_engine_method_logs_no_representation_value_for_a_probe():
    method = build_method("mr2", 4)
    logits, features, target = _probe_batch(1)
    method(logits.requires_grad_(), features, target)
    assert set(method.log_values()) == {"loss_logit"}
    method(logits, features.requires_grad_(), target)
    assert set(method.log_values()) == {"loss_logit", "loss_rep"}
