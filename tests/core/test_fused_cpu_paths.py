"""The CPU kernels of the loss terms (mr2.functional._cpu_kernels) against their plain formulations
(float64 oracles): the same-class pair list built from the keys sorted by class, the sparse pair sums
(both kernels of a batch's own pairs: the unordered pair list and the sampled CSR product), subnormal
flushing and the fused backward of the temperature-scaled cross-entropy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import mr2.functional.margin_losses as margin_losses
from core import oracles
from mr2.functional import _cpu_kernels, logit_margin_loss, representation_margin_loss
from mr2.functional._cpu_kernels import block_layout, flush_subnormal_, same_class_entries, unordered_pairs

#: The sparse path's two kernels for a batch's own pairs, chosen by the pair list's size
#: (PAIR_LIST_MAX_ELEMENTS): "list" below it (every small test batch), "csr" when the limit is 0.
KERNELS = ["list", "csr"]


@pytest.fixture
def kernel(request, monkeypatch):
    """Run the test with one sparse kernel for the batch's own pairs (indirect parameter)."""
    if request.param == "csr":
        monkeypatch.setattr(_cpu_kernels, "PAIR_LIST_MAX_ELEMENTS", 0)
    else:
        monkeypatch.setattr(_cpu_kernels, "PAIR_LIST_MAX_ELEMENTS", 2**62)
    return request.param


@pytest.mark.parametrize("seed", range(40))
def testsame_class_entries_are_the_masks_nonzero(seed):
    g = torch.Generator().manual_seed(seed)
    batch = int(torch.randint(1, 40, (1,), generator=g))
    pool = batch + int(torch.randint(0, 60, (1,), generator=g))
    classes = int(torch.randint(1, 12, (1,), generator=g))
    target = torch.randint(0, classes, (batch,), generator=g)
    key_target = torch.randint(0, classes + 3, (pool,), generator=g)  # classes absent from the batch too
    offset = int(torch.randint(0, pool - batch + 1, (1,), generator=g))
    key_target[offset:offset + batch] = target
    want = (target.unsqueeze(1) == key_target.unsqueeze(0)).nonzero(as_tuple=True)
    got = same_class_entries(target, key_target)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # partnered_only: the rows with at least one same-class key besides their own entry.
    mask = target.unsqueeze(1) == key_target.unsqueeze(0)
    mask[mask.sum(1) < 2] = False
    want = mask.nonzero(as_tuple=True)
    got = same_class_entries(target, key_target, partnered_only=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("seed", range(30))
def test_unordered_pairs_list_every_same_class_pair_once(seed):
    g = torch.Generator().manual_seed(seed)
    batch = int(torch.randint(1, 50, (1,), generator=g))
    target = torch.randint(0, int(torch.randint(1, 30, (1,), generator=g)), (batch,), generator=g)
    layout, pairs = block_layout(target)
    first, second = unordered_pairs(target, layout.counts, pairs)
    got = sorted((min(i, j), max(i, j)) for i, j in zip(first.tolist(), second.tolist(), strict=True))
    want = [(i, j) for i in range(batch) for j in range(i + 1, batch) if target[i] == target[j]]
    assert got == want and pairs == 2 * len(want)


@pytest.mark.parametrize("kernel", KERNELS, indirect=True)
@pytest.mark.parametrize(("batch", "classes"), [(40, 60), (64, 8), (30, 1)])
def test_sparse_pairs_equal_the_float64_oracle(batch, classes, kernel):
    g = torch.Generator().manual_seed(batch + classes)
    target = torch.randint(0, classes, (batch,), generator=g)
    features = torch.randn(batch, 6, generator=g, dtype=torch.float64)
    got = representation_margin_loss(features, target, 5.0, temperature=3.0, reduction="none", pair_mode="sparse")
    want = torch.tensor(oracles.representation_terms(features, target, 5.0, temperature=3.0), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS, indirect=True)
def test_sparse_pairs_in_float32_match_the_float64_dense_path(kernel):
    # Features of a trained network's scale (ReLU, d = 512, T = d, the margin 2 s_bar of such
    # features): both kernels within float32 rounding of the float64 values and gradients.
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, 300, (256,), generator=g)
    features = torch.randn(256, 512, generator=g).relu_()
    margin, temperature = 2 * 512 * 0.34, 512.0

    def value_and_grad(x, mode):
        x = x.detach().clone().requires_grad_()
        values = representation_margin_loss(x, target, margin, temperature=temperature, reduction="none",
                                            pair_mode=mode)
        weights = torch.linspace(0.5, 1.5, 256, dtype=x.dtype)
        return values.detach(), torch.autograd.grad((values * weights).sum(), x)[0]

    want = value_and_grad(features.double(), "dense")
    got = value_and_grad(features, "sparse")
    assert bool((want[0] > 0).any())
    torch.testing.assert_close(got[0].double(), want[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1].double(), want[1], rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize(("classes", "dim", "kernel"), [(1000, 2048, "list"), (100, 2048, "csr")])
def test_auto_at_many_classes_takes_the_pair_list_only_while_it_is_small(classes, dim, kernel, monkeypatch):
    calls = []
    for name in ("pair_list_log_sum_exp", "same_pair_log_sum_exp"):
        real = getattr(margin_losses, name)
        monkeypatch.setattr(margin_losses, name, lambda *a, _n=name, _r=real, **o: calls.append(_n) or _r(*a, **o))
    g = torch.Generator().manual_seed(5)
    target = torch.randint(0, classes, (512,), generator=g)
    features = torch.randn(512, dim, generator=g) * 0.03
    representation_margin_loss(features, target, 1.0, temperature=float(dim))
    assert calls == ["pair_list_log_sum_exp" if kernel == "list" else "same_pair_log_sum_exp"]


def _value_and_gradients(features, target, pair_mode, margin=0.8, temperature=1.5, **partners):
    queries = features.clone().requires_grad_()
    keys = partners.pop("partner_features", None)
    if keys is not None:
        keys = keys.clone().requires_grad_()
        partners["partner_features"] = keys
    per_sample = representation_margin_loss(
        queries, target, margin, temperature=temperature, reduction="none", pair_mode=pair_mode, **partners
    )
    weights = torch.linspace(0.5, 2.0, per_sample.numel(), dtype=per_sample.dtype)
    inputs = (queries,) if keys is None else (queries, keys)
    return per_sample.detach(), torch.autograd.grad((per_sample * weights).sum(), inputs)


@pytest.mark.parametrize("kernel", KERNELS, indirect=True)
@pytest.mark.parametrize("seed", range(6))
def test_sparse_pairs_skip_the_rows_without_a_partner_and_equal_the_dense_path(seed, kernel):
    # Many classes: most rows have no partner (value 0, gradient 0), some have one or two.
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(48, 7, generator=g, dtype=torch.float64)
    target = torch.randint(0, 60, (48,), generator=g)
    sparse = _value_and_gradients(features, target, "sparse")
    dense = _value_and_gradients(features, target, "dense")
    torch.testing.assert_close(sparse[0], dense[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sparse[1][0], dense[1][0], rtol=1e-10, atol=1e-12)
    lonely = torch.bincount(target, minlength=60)[target] == 1
    assert lonely.any() and (~lonely).any()
    assert torch.all(sparse[0][lonely] == 0) and torch.all(sparse[1][0][lonely] == 0)
    # A pool of partners (the global batch): queries whose class has no other key in the pool too.
    pool = torch.cat([torch.randn(20, 7, generator=g, dtype=torch.float64), features])
    pool_target = torch.cat([torch.randint(0, 60, (20,), generator=g), target])
    partners = {"partner_features": pool, "partner_target": pool_target, "self_offset": 20}
    sparse = _value_and_gradients(features, target, "sparse", **partners)
    dense = _value_and_gradients(features, target, "dense", **partners)
    torch.testing.assert_close(sparse[0], dense[0], rtol=1e-12, atol=1e-12)
    for got, want in zip(sparse[1], dense[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS, indirect=True)
@pytest.mark.parametrize("pool", [False, True])
def test_sparse_pairs_of_a_batch_without_any_pair_are_zero(pool, kernel):
    features = torch.randn(9, 4, dtype=torch.float64)
    target = torch.arange(9)
    partners = {}
    if pool:  # three more keys, of classes the batch does not hold
        partners = {
            "partner_features": torch.cat([torch.randn(3, 4, dtype=torch.float64), features]),
            "partner_target": torch.cat([torch.tensor([20, 21, 22]), target]),
            "self_offset": 3,
        }
    values, grads = _value_and_gradients(features, target, "sparse", **partners)
    assert torch.equal(values, torch.zeros(9, dtype=torch.float64))
    assert all(torch.equal(grad, torch.zeros_like(grad)) for grad in grads)


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


def testflush_subnormal_zeroes_exactly_the_entries_below_the_smallest_normal_number():
    tiny32 = torch.finfo(torch.float32).tiny
    values = torch.tensor([1e-39, -1e-39, tiny32, -tiny32, 0.0, 1.0, -2e-45, 3e-38])
    got = flush_subnormal_(values.clone())
    want = torch.tensor([0.0, 0.0, tiny32, -tiny32, 0.0, 1.0, 0.0, 3e-38])
    assert torch.equal(got, want)
    doubles = torch.tensor([1e-39, 1e-310, -1e-320, 2.5e-308], dtype=torch.float64)
    assert torch.equal(
        flush_subnormal_(doubles.clone()), torch.tensor([1e-39, 0.0, 0.0, 2.5e-308], dtype=torch.float64)
    )


@pytest.mark.parametrize("kernel", KERNELS, indirect=True)
def test_sparse_pair_gradient_has_no_subnormal_entries_from_vanishing_pair_weights(kernel):
    # Pairs far inside the margin: exp((d^2 - m) / T) is about e^-95, a float32 subnormal. The sparse
    # path drops those weights (CPU arithmetic on subnormals is slow); the loss keeps its value.
    target = torch.tensor([0, 0, 1, 1, 2])
    features = torch.zeros(5, 3)
    features[1, 0] = 10.0  # ||x_0 - x_1||^2 = 100
    features[3, 1] = 10.0
    features[4, 2] = 1.0
    margin = 195.0  # (100 - 195) / 1 = -95: a weight of e^-95 = 5.5e-42
    sparse = _value_and_gradients(features, target, "sparse", margin=margin, temperature=1.0)
    dense = _value_and_gradients(features, target, "dense", margin=margin, temperature=1.0)
    assert torch.equal(sparse[0], dense[0])  # log(1 + 5.5e-42) is 0 in float32 either way
    grad = sparse[1][0]
    tiny = torch.finfo(grad.dtype).tiny
    assert not ((grad != 0) & (grad.abs() < tiny)).any()
    # Same values, and the same gradient up to the dropped sub-1e-38 terms.
    assert ((dense[1][0] != 0) & (dense[1][0].abs() < tiny)).any()  # the dense path keeps them
    torch.testing.assert_close(grad, dense[1][0], rtol=0, atol=1e-36)


@pytest.mark.parametrize("kernel", KERNELS, indirect=True)
@pytest.mark.parametrize("pool", [False, True])
def test_sparse_pair_gradient_is_the_same_when_a_retained_graph_runs_backward_twice(pool, kernel):
    # The kernel's backward must not overwrite what it saved (a retained graph runs it again).
    g = torch.Generator().manual_seed(11)
    features = torch.randn(30, 5, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 12, (30,), generator=g)
    partners = {}
    if pool:
        pool_features = torch.cat([torch.randn(6, 5, generator=g, dtype=torch.float64), features])
        partners = {"partner_features": pool_features, "partner_target": torch.cat([target[:6], target]),
                    "self_offset": 6}
    loss = representation_margin_loss(features, target, 1.0, temperature=2.0, pair_mode="sparse", **partners)
    (first,) = torch.autograd.grad(loss, features, retain_graph=True)
    (second,) = torch.autograd.grad(loss, features)
    assert torch.equal(first, second) and first.abs().sum() > 0


def test_logit_margin_loss_of_an_empty_batch_is_zero_and_its_mean_is_cross_entropys():
    empty = logit_margin_loss(torch.zeros(0, 3, requires_grad=True), torch.zeros(0, dtype=torch.long), torch.ones(3))
    assert empty.item() == 0.0
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(9, 4, generator=g, dtype=torch.float64)
    target = torch.randint(0, 4, (9,), generator=g)
    gamma = 0.5 + torch.rand(4, generator=g, dtype=torch.float64)
    want = sum(-torch.log_softmax(logits[i] / gamma[target[i]], 0)[target[i]] for i in range(9)) / 9
    assert torch.allclose(logit_margin_loss(logits, target, gamma), want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("logit_margin", ["temperature", "additive"])
def test_int32_class_ids_give_the_int64_loss(logit_margin):
    from mr2 import MR2Loss

    g = torch.Generator().manual_seed(4)
    target = torch.randint(0, 5, (24,), generator=g)
    target[:5] = torch.arange(5)
    logits = torch.randn(24, 5, generator=g, dtype=torch.float64)
    features = torch.randn(24, 3, generator=g, dtype=torch.float64)
    values = []
    for ids in (target, target.int()):
        loss = MR2Loss(5, logit_margin=logit_margin).double()
        for _ in range(2):  # the second step has logit margins
            value = loss(logits.clone().requires_grad_(), features.clone().requires_grad_(), ids)
        values.append(value)
    torch.testing.assert_close(values[1], values[0], rtol=0, atol=0)
