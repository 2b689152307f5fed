"""ERM, logit adjustment, focal, LDAM-DRW and CDB-CE as methods: oracles and reductions to CE."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods import baseline_oracles as oracle
from methods.baseline_helpers import TinyNet, make_context
from mr2.checks import MR2InputError
from mr2.methods.registry import build_method

K = 4


def batch(n: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return 2 * torch.randn(n, K, generator=g, dtype=torch.float64), torch.randint(0, K, (n,), generator=g)


def setup(name: str, counts: list[int], epochs: int = 10, **options):
    method = build_method(name, K, **options)
    method.setup(make_context(sum(counts), torch.tensor(counts), epochs=epochs))
    return method


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_erm_matches_oracle(smoothing):
    logits, target = batch()
    got = setup("erm", [5] * K, label_smoothing=smoothing)(logits, None, target)
    want = sum(oracle.cross_entropy(logits, target, smoothing)) / len(target)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))


def test_logit_adjustment_method_uses_the_training_prior():
    logits, target = batch()
    counts = [30, 5, 10, 55]
    got = setup("logit_adjustment", counts, tau=1.5)(logits, None, target)
    want = sum(oracle.logit_adjusted(logits, target, counts, 1.5)) / len(target)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=1e-7)


def test_logit_adjustment_on_balanced_data_is_exactly_cross_entropy():
    logits, target = batch()
    got = setup("logit_adjustment", [25] * K, tau=1.0)(logits, None, target)
    torch.testing.assert_close(got, F.cross_entropy(logits, target))


def test_focal_method_matches_oracle():
    logits, target = batch()
    got = setup("focal", [5] * K, gamma=2.0)(logits, None, target)
    want = sum(oracle.focal(logits, target, 2.0)) / len(target)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))


def test_ldam_swaps_in_a_cosine_head_and_applies_drw_late():
    counts = [40, 10, 20, 5]
    method = setup("ldam", counts, epochs=10)
    model = method.adapt_model(TinyNet(K))
    assert type(model.classifier).__name__ == "NormedLinear"
    assert all(p.requires_grad for p in model.classifier.parameters())
    cosine, _ = model(torch.randn(6, 6))
    assert cosine.abs().max() <= 1 + 1e-6
    cosine = torch.tanh(batch()[0])
    target = batch()[1]
    for epoch, weights in ((7, [1.0] * K), (8, oracle.drw_weights(counts, 0.9999))):
        method.on_epoch_start(epoch)  # round(0.8 * 10) = 8: DRW from epoch 8 on
        want = oracle.ldam_loss(cosine, target, counts, 0.5, 30.0, weights)
        torch.testing.assert_close(
            method(cosine, None, target), torch.tensor(want, dtype=torch.float64), rtol=1e-5, atol=1e-6
        )


def test_ldam_on_balanced_data_is_one_cosine_margin_for_all_classes():
    method = setup("ldam", [30] * K, epochs=10)
    method.on_epoch_start(9)
    cosine, target = torch.tanh(batch()[0]), batch()[1]
    want = F.cross_entropy(30.0 * (cosine - 0.5 * F.one_hot(target, K)), target)
    torch.testing.assert_close(method(cosine, None, target), want)


def test_ldam_needs_a_linear_classifier():
    method = setup("ldam", [3] * K)
    with pytest.raises(MR2InputError, match=r"model\.classifier"):
        method.adapt_model(nn.Sequential(nn.Linear(3, K)))


def test_cdb_weights_follow_validation_accuracy():
    logits, target = batch()
    method = setup("cdb", [5] * K, tau=1.5)
    torch.testing.assert_close(method(logits, None, target), F.cross_entropy(logits, target))  # starts at 1
    accuracy = torch.tensor([0.9, 0.4, float("nan"), 0.7], dtype=torch.float64)
    method.on_validation(0, accuracy)
    # NaN class keeps its last accuracy (0: difficulty 1).
    weights = oracle.cdb_weights([0.9, 0.4, 0.0, 0.7], 1.5)
    per_sample = oracle.cross_entropy(logits, target)
    want = sum(weights[y] * ce for y, ce in zip(target.tolist(), per_sample)) / len(per_sample)
    torch.testing.assert_close(method(logits, None, target), torch.tensor(want, dtype=torch.float64))


def test_cdb_fixed_uses_the_reference_models_accuracy_from_the_context():
    accuracy = torch.tensor([0.9, 0.5, 0.5, 0.1])
    method = build_method("cdb", K, update="fixed", tau="dynamic")
    method.setup(make_context(20, torch.full((K,), 5), validation_class_accuracy=accuracy))
    before = method.class_weights.clone()
    assert before[3] > before[1] > before[0]
    method.on_validation(0, torch.full((K,), 0.5))
    assert torch.equal(method.class_weights, before)


def test_losses_are_zero_dim_with_detached_log_values():
    logits, target = batch()
    logits = logits.float().requires_grad_()
    for name in ("erm", "logit_adjustment", "focal", "ldam", "cdb", "group_dro"):
        method = setup(name, [5] * K)
        loss = method(torch.tanh(logits) if name == "ldam" else logits, None, target)
        assert loss.dim() == 0 and loss.dtype == torch.float32
        loss.backward()
        assert all(not v.requires_grad for v in method.log_values().values())
