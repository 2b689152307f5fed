"""The collapse guard (issue 39): a warning when the features collapse, none on a healthy run."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from mr2 import MR2Loss
from mr2.losses import CollapseGuard, FeatureCollapseWarning
from mr2.losses import collapse as collapse_module
from mr2.losses.collapse import batch_feature_scale, is_collapsed


def _oracle_scale(features, target):
    """float64 loops: mean squared norm, mean squared deviation from the sample's batch class mean."""
    rows = [[float(v) for v in row] for row in features]
    labels = [int(y) for y in target]
    norm = sum(sum(v * v for v in row) for row in rows) / len(rows)
    deviation = 0.0
    for row, label in zip(rows, labels):
        members = [r for r, y in zip(rows, labels) if y == label]
        mean = [sum(col) / len(members) for col in zip(*members)]
        deviation += sum((a - b) ** 2 for a, b in zip(row, mean))
    return norm, deviation / len(rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batch_feature_scale_matches_a_loop_oracle(dtype):
    g = torch.Generator().manual_seed(1)
    features = torch.randn(13, 5, generator=g, dtype=dtype) * 3 + 1
    target = torch.tensor([0, 2, 2, 4, 0, 0, 2, 4, 4, 4, 1, 2, 0])  # class 3 absent, class 1 a singleton
    got = batch_feature_scale(features, target, 5)
    assert got.tolist() == pytest.approx(_oracle_scale(features, target), rel=1e-5 if dtype == torch.float32 else 1e-12)
    assert not got.requires_grad


class _Shapes(TorchDispatchMode):
    """The shapes of every tensor an aten operation returns inside the block."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor):
                self.shapes.append(tuple(value.shape))
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batch_feature_scale_with_more_classes_than_samples_sums_only_the_batch_classes(dtype):
    # K = 50 > B = 13 (as K = 1,000, B = 512): the oracle's values, and no [K, d] buffer (issue 47:
    # at K = 1,000, d = 2048 filling and norming one cost about a quarter of a training step).
    g = torch.Generator().manual_seed(2)
    features = torch.randn(13, 7, generator=g, dtype=dtype) * 2 - 1
    target = torch.tensor([40, 3, 3, 49, 40, 40, 3, 49, 49, 0, 17, 3, 40])
    with _Shapes() as seen:
        got = batch_feature_scale(features, target, 50)
    assert got.tolist() == pytest.approx(_oracle_scale(features, target), rel=1e-5 if dtype == torch.float32 else 1e-12)
    assert (50, 7) not in seen.shapes and (50,) not in seen.shapes
    assert (5, 7) in seen.shapes  # the batch's five classes
    # The same values as the [K, d] sums give (K = 13 rows cover the relabelled classes).
    relabelled = torch.unique(target, return_inverse=True)[1]
    assert got.tolist() == pytest.approx(batch_feature_scale(features, relabelled, 13).tolist(), rel=1e-6)


@pytest.mark.parametrize(
    ("first", "now", "logit", "expected"),
    [
        ((8.0, 4.0), (0.79, 3.0), 2.25, True),  # the norm fell more than 10-fold, logit 0.98 log 10
        ((8.0, 4.0), (6.0, 0.39), 2.25, True),  # the spread fell more than 10-fold
        ((8.0, 4.0), (0.8, 0.4), 2.25, True),  # exactly a tenth: collapsed
        ((8.0, 4.0), (0.81, 0.41), 2.25, False),  # less than 10-fold
        ((8.0, 4.0), (0.1, 0.1), 2.0, False),  # 0.87 log 10: the logit term learns
        ((8.0, 4.0), (0.1, 0.1), 0.9 * math.log(10), True),
        ((0.0, 0.0), (0.0, 0.0), 2.3, False),  # no scale to fall from
        ((8.0, 4.0), (float("nan"), 0.1), 2.3, False),
        ((8.0, 4.0), (60.0, 30.0), 2.3, False),  # grown
    ],
)
def test_the_rule_against_its_statement(first, now, logit, expected):
    assert is_collapsed(first, now, logit, 10) is expected


def _train(loss_fn, steps, seed=0, num_classes=10, dim=1024, hidden=128, batch=64):
    """A small model that collapses under the paper's T = 1 with Adadelta at lr 1.0, as
    pytorch/examples' MNIST script does: non-negative inputs of large fan-in (post-ReLU features),
    a ReLU layer of 128 and dropout (docs/mr2.md, "The default"). Returns the logit terms."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(num_classes, dim, generator=g) * 0.5
    torch.manual_seed(seed)
    body = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(0.5))
    head = nn.Linear(hidden, num_classes)
    optimizer = torch.optim.Adadelta([*body.parameters(), *head.parameters()], lr=1.0)
    logit_terms = []
    for _ in range(steps):
        target = torch.randint(0, num_classes, (batch,), generator=g)
        x = torch.relu(centers[target] + torch.randn(batch, dim, generator=g))
        features = body(x)
        loss = loss_fn(head(features), features, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        logit_terms.append(loss_fn.parts.logit.item())
    return logit_terms


def test_the_papers_t_equal_one_collapses_a_small_model_and_the_guard_warns_once():
    loss_fn = MR2Loss.from_variant("paper", 10)
    with pytest.warns(FeatureCollapseWarning) as caught:
        logit_terms = _train(loss_fn, steps=20)
    assert len(caught) == 1 and loss_fn.collapse_guard.warned_at == 5
    message = str(caught[0].message)
    assert message.startswith("mr2: the penultimate features collapsed by training step 5: ")
    assert "distance temperature T = 1, the paper's formula" in message
    assert "MR2Loss(num_classes), whose default is T = d (here 128)" in message and "lambda_rep" in message
    assert "learning rate" in message
    assert min(logit_terms) > 0.9 * math.log(10)  # it never learned
    assert caught[0].filename.endswith("mr2/losses/mr2.py")  # from mr2


def test_the_default_trains_the_same_model_without_a_warning():
    loss_fn = MR2Loss(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        logit_terms = _train(loss_fn, steps=20)
    assert loss_fn.collapse_guard.warned_at is None and loss_fn.collapse_guard.steps == 20
    assert logit_terms[-1] < 0.5 * math.log(10)  # it learns


def test_the_guard_reads_the_batch_only_on_check_steps_and_not_in_eval(monkeypatch):
    calls = []
    real = collapse_module.batch_feature_scale
    monkeypatch.setattr(collapse_module, "batch_feature_scale", lambda *a: calls.append(1) or real(*a))
    loss_fn = MR2Loss(3)
    # Zero logits: the logit term is log K, so every check step reads the batch (below).
    logits, features, target = torch.zeros(6, 3), torch.randn(6, 4, requires_grad=True), torch.arange(6) % 3
    for _ in range(12):
        loss_fn(logits, features, target)
    assert len(calls) == 3 and loss_fn.collapse_guard.steps == 12  # steps 1, 5 and 10
    loss_fn(logits, features.detach(), target)  # features without a gradient (a linear probe): not watched
    assert len(calls) == 3 and loss_fn.collapse_guard.steps == 12
    loss_fn.eval()
    loss_fn(logits, features, target)
    assert len(calls) == 3 and loss_fn.collapse_guard.steps == 12
    loss_fn.train()
    loss_fn.collapse_guard = None  # switched off
    loss_fn(logits, features, target)
    assert len(calls) == 3


def test_on_cpu_a_check_step_whose_logit_term_rules_out_collapse_does_not_read_the_batch(monkeypatch):
    """The rule needs the logit term at >= 0.9 log K; on CPU it is read first (no device to wait for),
    and a check step below it skips the batch's class sums (the rule is False whatever they are)."""
    calls = []
    real = collapse_module.batch_feature_scale
    monkeypatch.setattr(collapse_module, "batch_feature_scale", lambda *a: calls.append(1) or real(*a))
    guard = CollapseGuard(num_classes=4, every=1)
    target = torch.tensor([0, 1, 2, 3, 0, 1])
    high, low = torch.tensor(0.95 * math.log(4)), torch.tensor(0.85 * math.log(4))
    guard.observe(torch.ones(6, 3), target, low, lambda d: "")  # step 1, the reference: always read
    assert len(calls) == 1
    for _ in range(3):
        guard.observe(torch.full((6, 3), 0.01), target, low, lambda d: "")  # fell, but learning
    assert len(calls) == 1 and guard.steps == 4 and guard.warned_at is None
    guard.observe(torch.full((6, 3), 0.01), target, torch.tensor(float("nan")), lambda d: "")
    assert len(calls) == 1 and guard.warned_at is None  # a NaN logit term: the rule is False
    with pytest.warns(FeatureCollapseWarning):
        guard.observe(torch.full((6, 3), 0.01), target, high, lambda d: "")
    assert len(calls) == 2 and guard.warned_at == 6


def test_after_the_warning_the_guard_stops_checking():
    guard = CollapseGuard(num_classes=2, every=1)
    target = torch.tensor([0, 1, 0, 1])
    logit = torch.tensor(math.log(2))
    guard.observe(torch.ones(4, 3), target, logit, lambda d: "")
    with pytest.warns(FeatureCollapseWarning):
        guard.observe(torch.full((4, 3), 0.01), target, logit, lambda d: "")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            guard.observe(torch.full((4, 3), 0.01), target, logit, lambda d: "")
    assert guard.warned_at == 2 and guard.steps == 2


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"lambda_rep": 0.0}, "lambda_rep = 0, so the representation term is not the cause: lower the learning rate"),
        ({}, "distance temperature T = 64): raise T further (distance_temperature=10, "),
        ({"distance_temperature": 4.0}, "distance temperature T = 4): use MR2Loss(num_classes), whose default is T = d"),
    ],
)
def test_the_advice_names_the_cause_of_the_configuration(options, expected):
    assert expected in MR2Loss(10, **options).collapse_advice(64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (no GPU on this machine)")
def test_on_cuda_the_guard_never_syncs_and_warns_once_the_copy_has_landed():
    device = torch.device("cuda")
    loss_fn = MR2Loss.from_variant("paper", 4, feature_dim=6).to(device)
    logits = torch.randn(16, 4, device=device)
    target = (torch.arange(16) % 4).to(device)
    features = torch.randn(16, 6, device=device) + 3
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(12):  # checks at steps 1, 5 and 10: no collapse
            loss_fn(logits, features, target)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert loss_fn.collapse_guard.steps == 12 and loss_fn.collapse_guard.warned_at is None
    guard = CollapseGuard(num_classes=4, every=1)
    logit = torch.tensor(math.log(4), device=device)
    guard.observe(features, target, logit, lambda d: "")  # step 1: the reference
    guard.observe(features * 0.01, target, logit, lambda d: "")  # step 2: copied without waiting
    torch.cuda.synchronize()
    with pytest.warns(FeatureCollapseWarning, match="collapsed by training step 2"):
        guard.observe(features * 0.01, target, logit, lambda d: "")  # step 3 reads step 2's values
