"""LfF: per-sample moving averages, class-max normalisation, the loss, identical models, state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from methods import baseline_oracles as oracle
from methods.baseline_helpers import NUM_CLASSES, TinyNet, make_context, model_factory
from mr2.checks import MR2InputError
from mr2.methods.lff import LfF

K, N = 3, 10


def make(factory, **options) -> LfF:
    method = LfF(K, **options)
    method.setup(make_context(N, torch.full((K,), N // K), factory=factory))
    return method


def steps():
    """Biased logits, debiased logits, target, index; step 2 holds index 4 twice (sampler padding)."""
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, K, (N,), generator=g)
    for index in ([0, 1, 2, 3], [4, 5, 6, 4], [0, 7, 1, 8], [9, 2, 3, 5]):
        index = torch.tensor(index)
        yield (
            2 * torch.randn(4, K, generator=g, dtype=torch.float64),
            2 * torch.randn(4, K, generator=g, dtype=torch.float64),
            labels[index],
            index,
        )


@pytest.mark.parametrize("gce_form", ["reference", "paper"])
def test_loss_and_per_sample_state_match_the_loop_oracle(gce_form):
    method = make(nn.Identity, gce_form=gce_form)  # the biased "model" returns its input: the logits
    state: dict[int, tuple[float, float, int]] = {}
    for biased, debiased, target, index in steps():
        method.on_batch(biased, target, index)
        got = method(debiased, None, target)
        ce_b, ce_d = oracle.cross_entropy(biased, target), oracle.cross_entropy(debiased, target)
        weights = oracle.lff_step(state, index.tolist(), target.tolist(), ce_b, ce_d, 0.7, K)
        gce = (
            oracle.gce_surrogate(biased, target, 0.7)
            if gce_form == "reference"
            else oracle.gce(biased, target, 0.7)
        )
        want = sum(gce) / 4 + sum(w * c for w, c in zip(weights, ce_d)) / 4
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=1e-7)
        for i, (ema_b, ema_d, label) in state.items():
            assert method.ema_biased[i].item() == pytest.approx(ema_b, rel=1e-6)
            assert method.ema_debiased[i].item() == pytest.approx(ema_d, rel=1e-6)
            assert method.sample_label[i] == label and method.visited[i]
    unseen = [i for i in range(N) if i not in state]
    assert not method.visited[unseen].any() and (method.sample_label[unseen] == -1).all()


def test_class_max_normalisation_uses_every_sample_of_the_class():
    method = make(nn.Identity)
    target = torch.tensor([0, 0, 1])
    big = torch.tensor([[-9.0, 9.0, 0.0], [9.0, -9.0, 0.0], [0.0, 9.0, 0.0]], dtype=torch.float64)
    method.on_batch(big, target, torch.tensor([0, 1, 2]))  # sample 0: huge biased loss
    method(big, None, target)
    biased = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    debiased = torch.tensor([[0.0, 0.0, 4.0]], dtype=torch.float64)
    method.on_batch(biased, torch.tensor([0]), torch.tensor([3]))
    method(debiased, None, torch.tensor([0]))
    # Sample 3's averages are normalised by the class-0 maxima held by sample 0 (not in this batch);
    # class 1's sample 2 plays no part.
    class0 = torch.tensor([0, 1, 3])
    assert method.ema_biased[0] > method.ema_biased[3] and method.ema_debiased[0] > method.ema_debiased[3]
    norm_b = method.ema_biased[3] / method.ema_biased[class0].max()
    norm_d = method.ema_debiased[3] / method.ema_debiased[class0].max()
    want = norm_b / (norm_b + norm_d + 1e-8)
    assert abs(want.item() - 0.5) > 0.05
    assert method.log_values()["weight_mean"].item() == pytest.approx(want.item(), rel=1e-6)


def test_identical_models_weight_every_sample_one_half():
    net = TinyNet(NUM_CLASSES)
    method = LfF(NUM_CLASSES)
    method.setup(make_context(8, torch.full((NUM_CLASSES,), 2), factory=lambda: net))
    x, target, index = torch.randn(8, 6), torch.arange(NUM_CLASSES).repeat(2), torch.arange(8)
    method.on_batch(x, target, index)
    logits, _ = net(x)
    loss = method(logits, None, target)
    values = method.log_values()
    assert values["weight_mean"].item() == pytest.approx(0.5, rel=1e-6)
    torch.testing.assert_close(values["loss_debiased"], 0.5 * F.cross_entropy(logits, target).detach())
    torch.testing.assert_close(
        loss.detach(), values["loss_biased"] + 0.5 * F.cross_entropy(logits, target).detach()
    )


def test_evaluation_is_cross_entropy_and_leaves_the_state_alone():
    method = make(nn.Identity)
    method.eval()
    biased, debiased, target, index = next(steps())
    method.on_batch(biased, target, index)
    torch.testing.assert_close(method(debiased, None, target), F.cross_entropy(debiased, target))
    assert not method.visited.any()


def test_training_forward_without_on_batch_is_an_error():
    method = make(nn.Identity)
    with pytest.raises(MR2InputError, match="on_batch"):
        method(torch.randn(2, K), None, torch.tensor([0, 1]))


def test_biased_model_is_a_trainable_submodule_and_state_round_trips():
    method = LfF(NUM_CLASSES)
    method.setup(make_context(16, torch.full((NUM_CLASSES,), 4), factory=model_factory("scratch")))
    assert {n for n, _ in method.named_parameters()} == {
        "biased_model.backbone.0.weight",
        "biased_model.backbone.0.bias",
        "biased_model.classifier.weight",
        "biased_model.classifier.bias",
    }
    g = torch.Generator().manual_seed(5)
    data = [
        (
            torch.randn(4, 6, generator=g),
            torch.randint(0, NUM_CLASSES, (4,), generator=g),
            torch.randperm(16, generator=g)[:4],
            torch.randn(4, NUM_CLASSES, generator=g),
        )
        for _ in range(6)
    ]
    for x, y, i, z in data[:3]:
        method.on_batch(x, y, i)
        method(z, None, y)
    clone = LfF(NUM_CLASSES)
    clone.setup(make_context(16, torch.full((NUM_CLASSES,), 4), factory=model_factory("scratch", seed=123)))
    clone.load_state_dict(method.state_dict())
    for x, y, i, z in data[3:]:
        method.on_batch(x, y, i)
        clone.on_batch(x, y, i)
        assert torch.equal(method(z, None, y), clone(z, None, y))
    for key, value in method.state_dict().items():
        assert torch.equal(value, clone.state_dict()[key]), key
