"""The steady training step of MR2Loss (issue 47): a CPU step whose features need a gradient, once every
class is known to have been seen, as straight-line code with the general path's values.

``MR2Loss._steady_train_step`` shares the linear-probe step's statistics update, ``a_k = Q_k / n_k`` and
logit temperatures (:meth:`MR2Loss._steady_probe_step`), computes the spreads of the distance margin from the
state (no norm cache, no seen mask: every class is seen) and then the representation term as the general
path does. These tests hold it to the general path (``steady_probe_path = False``) bit for bit: the loss,
both gradients, the parts and the state.
"""

from __future__ import annotations

import pytest
import torch

from helpers.ops import (
    CountOps,
    assert_same_state,
    count_calls,
    eager_steady_step,
    fast_and_full,
    steady_batch,
)
from mr2 import MR2Loss


def _batch(seed: int, k: int, b: int, d: int = 6, dtype: torch.dtype = torch.float32):
    """:func:`steady_batch` with random classes in half the rows, so that same-class pairs occur."""
    return steady_batch(seed, k, b, d, dtype, distinct=min(k, b // 2))


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """The eager steady step: these tests hold it to the general path bit for bit."""
    eager_steady_step(monkeypatch)


@pytest.fixture
def steady_calls(monkeypatch):
    return count_calls(monkeypatch, MR2Loss, "_steady_train_step")


def _step(loss: MR2Loss, logits: torch.Tensor, features: torch.Tensor, target: torch.Tensor):
    z, x = logits.detach().clone().requires_grad_(), features.detach().clone().requires_grad_()
    value = loss(z, x, target)
    value.backward()
    return value.detach(), z.grad, x.grad


# The [K, d] lerp path (K <= B / 2), the many-class path (B / 2 < K <= B), K > B; the three pair paths.
@pytest.mark.parametrize("k, b", [(5, 40), (30, 40), (70, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", [None, "paper"])
def test_the_steady_train_step_gives_the_general_paths_values_bit_for_bit(k, b, dtype, variant, steady_calls):
    fast, full = fast_and_full(k, dtype, variant)
    representation = []
    for seed in range(10):
        batch = _batch(seed, k, b, dtype=dtype)
        for got, want in zip(_step(fast, *batch), _step(full, *batch), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert not fast.representation_skipped and not full.representation_skipped
        representation.append(float(fast.parts.representation))
        for name, a, b_ in zip(fast.parts._fields, fast.parts, full.parts, strict=True):
            torch.testing.assert_close(a, b_, rtol=0, atol=0, msg=name)
        assert_same_state(fast, full)
    assert fast.statistics.all_seen_known()
    assert len(steady_calls) >= 5 and all(loss is fast for loss in steady_calls)
    assert max(representation) > 0 and fast.parts.margin > 0


def test_the_steady_train_step_takes_fewer_operations_than_the_general_path(steady_calls):
    fast, full = MR2Loss(40), MR2Loss(40)
    full.steady_probe_path = False
    fast.collapse_guard = full.collapse_guard = None
    for seed in range(4):
        _step(fast, *_batch(seed, 40, 64))
        _step(full, *_batch(seed, 40, 64))
    counts = []
    for loss in (fast, full):
        logits, features, target = _batch(4, 40, 64)
        features.requires_grad_()
        with CountOps() as ops:
            loss(logits, features, target)
        counts.append(ops.count)
    assert steady_calls and steady_calls[-1] is fast
    assert counts[0] < counts[1], counts


def test_a_refused_batch_leaves_the_state_and_the_last_parts(steady_calls):
    loss = MR2Loss(5)
    for seed in range(3):
        _step(loss, *_batch(seed, 5, 20))
    parts, state = loss.parts, {k: v.clone() for k, v in loss.state_dict().items()}
    logits, features, target = _batch(3, 5, 20)
    features[2, 1] = float("nan")
    with pytest.raises(ValueError, match="features"):
        loss(logits.requires_grad_(), features.requires_grad_(), target)
    assert loss.parts is parts
    for name, value in loss.state_dict().items():
        torch.testing.assert_close(value, state[name], rtol=0, atol=0, msg=name)


def test_a_linear_probe_step_after_a_train_step_and_back():
    # The probe step defers its parts; a train step after it settles nothing wrongly and sets its own.
    loss, full = MR2Loss(6), MR2Loss(6)
    full.steady_probe_path = False
    for seed in range(6):
        logits, features, target = _batch(seed, 6, 24)
        if seed % 2:
            for m in (loss, full):
                m(logits.clone().requires_grad_(), features, target)
            assert loss.representation_skipped
        else:
            for got, want in zip(_step(loss, logits, features, target), _step(full, logits, features, target),
                                 strict=True):
                torch.testing.assert_close(got, want, rtol=0, atol=0)
        for name, a, b_ in zip(loss.parts._fields, loss.parts, full.parts, strict=True):
            torch.testing.assert_close(a, b_, rtol=0, atol=0, equal_nan=True, msg=name)
