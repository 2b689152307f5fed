"""The steady linear-probe step of MR2Loss (issue 47): straight-line code, the general path's values.

Once every class is known to have been seen, a CPU training step whose features need no gradient (a linear
probe) takes ``MR2Loss._steady_probe_step``: the statistics' update, ``a_k = Q_k / n_k``, the logit
temperatures and the logit term in 33 dispatched operations (43 before), and the spreads of the distance
margin computed only when ``parts`` is read, or before the statistics next change (their ``before_write``
hook). These tests hold it to the general path (``steady_probe_path = False``) bit for bit, to the float64
oracles, and check that the deferred parts stay those of their step.
"""

from __future__ import annotations

import pytest
import torch

from helpers.ops import (
    CountOps,
    assert_same_state,
    assert_same_step,
    change_statistics,
    count_calls,
    eager_steady_step,
    fast_and_full,
    steady_batch,
)
from mr2 import MR2Loss


def _batch(seed: int, k: int, b: int, d: int = 6, dtype: torch.dtype = torch.float32):
    """:func:`steady_batch` with logits that need a gradient: every class seen within a few steps."""
    logits, features, target = steady_batch(seed, k, b, d, dtype)
    return logits.requires_grad_(), features, target


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """The eager steady step: these tests hold it to the general path bit for bit."""
    eager_steady_step(monkeypatch)


@pytest.fixture
def steady_calls(monkeypatch):
    """Counts the calls of the steady path."""
    return count_calls(monkeypatch, MR2Loss, "_steady_probe_step")


# The [K, d] lerp path (K <= B / 2), the many-class path (B / 2 < K <= B), K > B.
@pytest.mark.parametrize("k, b", [(5, 40), (30, 40), (70, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", [None, "paper"])
def test_the_steady_step_gives_the_general_paths_values_bit_for_bit(k, b, dtype, variant, steady_calls):
    fast, full = fast_and_full(k, dtype, variant)
    for seed in range(10):
        logits, features, target = _batch(seed, k, b, dtype=dtype)
        assert_same_step(fast, full, logits, features, target)
        assert fast.representation_skipped and full.representation_skipped
        assert_same_state(fast, full)
    assert fast.statistics.all_seen_known()
    assert len(steady_calls) >= 5 and all(loss is fast for loss in steady_calls)


@pytest.mark.parametrize("k, b", [(4, 64), (10, 64), (40, 64)])
def test_the_steady_step_stays_within_its_operation_budget(k, b, steady_calls):
    # 43 before (the general path with every class known to have been seen; 42 now): the norms of the
    # [K, d] state and the moments are left to parts, the weights take one operation, the guard is
    # added to the logits' sum with alpha = 4. 34 since the loss kept for the parts is detached in
    # the step (one operation more; the step's autograd graph, kept until the next step, cost
    # 0.03-0.06x of a K = 10 linear-probe step in a scratch loop, docs/benchmarks/log.md).
    loss = MR2Loss(k)
    for seed in range(4):
        loss(*_batch(seed, k, b))
    batch = _batch(4, k, b)
    with CountOps() as ops:
        loss(*batch)
    assert steady_calls and steady_calls[-1] is loss
    assert ops.count <= 34, f"K = {k}: {ops.count} tensor operations in a steady linear-probe step"


@pytest.mark.parametrize("change", ["update", "load", "accumulate"])
def test_deferred_parts_are_those_of_their_step_after_the_statistics_change(change, steady_calls):
    k, b = 5, 40
    loss = MR2Loss(k)
    for seed in range(3):
        value = loss(*_batch(seed, k, b))
    assert steady_calls
    want_margin, want_gamma = loss.distance_margin(), loss.logit_temperatures()
    loss = change_statistics(loss, change, lambda seed: _batch(seed, k, b))
    assert not torch.equal(loss.distance_margin(), want_margin)  # the statistics did change
    parts = loss.parts
    assert parts is not None
    torch.testing.assert_close(parts.margin, want_margin, rtol=0, atol=0)
    torch.testing.assert_close(parts.logit_margins, want_gamma, rtol=0, atol=0)
    torch.testing.assert_close(parts.total, value.detach(), rtol=0, atol=0)
    assert torch.isnan(parts.representation)
    assert loss.statistics.before_write is None  # the hook ran once and was cleared


def test_a_steady_step_leaves_no_hook_work_to_the_next_step():
    k, b = 5, 40
    loss = MR2Loss(k)
    for seed in range(3):
        loss(*_batch(seed, k, b))
    assert loss.statistics.before_write is not None
    settled = []
    original = loss._settle_deferred_parts
    loss.statistics.before_write = lambda: (settled.append(1), original())
    loss(*_batch(3, k, b))  # the next steady step replaces the parts: nothing to settle
    assert settled == [1]  # the hook still runs once: it finds nothing deferred
    assert loss._deferred_parts is not None and isinstance(loss._deferred_parts[3], tuple)


def test_a_steady_step_keeps_no_autograd_graph_for_its_parts(steady_calls):
    # What the parts are finished from is kept until the next step: the loss detached, so the step's
    # graph is freed with its backward, not a step later (docs/benchmarks/log.md), and the parts read
    # the same values.
    loss = MR2Loss(4)
    for seed in range(4):
        loss(*_batch(seed, 4, 32))
    logits, features, target = _batch(5, 4, 32)
    logits.requires_grad_()
    value = loss(logits, features, target)
    assert steady_calls and steady_calls[-1] is loss
    kept = [part for part in loss.__dict__["_deferred_parts"] if isinstance(part, torch.Tensor)]
    assert kept and all(part.grad_fn is None and not part.requires_grad for part in kept)
    value.backward()
    assert loss.parts.total == value.detach() and loss.parts.logit == value.detach()


def test_a_refused_batch_keeps_the_last_steps_parts_and_state():
    k, b = 5, 40
    loss = MR2Loss(k)
    for seed in range(3):
        loss(*_batch(seed, k, b))
    want_margin = loss.distance_margin()
    state = {name: value.clone() for name, value in loss.state_dict().items()}
    logits, features, target = _batch(3, k, b)
    features[2, 1] = float("nan")
    with pytest.raises(ValueError, match="features"):
        loss(logits, features, target)
    for name, value in loss.state_dict().items():
        torch.testing.assert_close(value, state[name], rtol=0, atol=0, msg=name)
    loss.statistics.update(*_batch(4, k, b)[1:])  # the hook was kept: these parts are still the step's
    assert loss.parts is not None
    torch.testing.assert_close(loss.parts.margin, want_margin, rtol=0, atol=0)


def test_a_state_changed_in_place_by_other_code_gives_a_nan_margin():
    k, b = 5, 40
    loss = MR2Loss(k)
    for seed in range(3):
        loss(*_batch(seed, k, b))
    loss.statistics.feature_sum.mul_(2.0)  # not through the statistics' methods: no hook
    assert loss.parts is not None and torch.isnan(loss.parts.margin)


def test_the_allocation_statistic_is_the_moving_second_moment():
    # a_k = Q_k / n_k, the float64 oracle's ||mu_k||^2 + s_k.
    from core import oracles

    k, b, momentum = 6, 30, 0.7
    loss = MR2Loss(k, momentum=momentum).double()
    batches = []
    for seed in range(6):
        logits, features, target = _batch(seed, k, b, dtype=torch.float64)
        loss(logits, features, target)
        batches.append((features, target))
    _, msq, spread = oracles.pooled_statistics(batches, k, momentum)
    want = torch.tensor([m + s for m, s in zip(msq, spread, strict=True)], dtype=torch.float64)
    torch.testing.assert_close(loss.allocation_statistic(), want, rtol=1e-12, atol=0)
    torch.testing.assert_close(loss.statistics.second_moment(), want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("how", ["deepcopy", "save"])
def test_a_copy_keeps_the_deferred_parts_of_the_step(how, tmp_path):
    import copy

    k, b = 5, 40
    loss = MR2Loss(k)
    for seed in range(3):
        loss(*_batch(seed, k, b))
    want = loss.distance_margin()
    if how == "deepcopy":
        other = copy.deepcopy(loss)
    else:
        torch.save(loss, tmp_path / "loss.pt")
        other = torch.load(tmp_path / "loss.pt", weights_only=False)
    other.statistics.update(*_batch(7, k, b)[1:])
    for copied in (other, loss):
        assert copied.parts is not None
        torch.testing.assert_close(copied.parts.margin, want, rtol=0, atol=0)
