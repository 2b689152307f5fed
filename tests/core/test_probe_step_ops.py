"""The cost of a linear-probe training step of MR2Loss (issue 47): few tensor operations, same values.

- A training step whose features need no gradient defers what only logging reads (the distance margin,
  the NaN of ``parts.representation``) to the first read of ``parts``; what it then reports is that
  step's, whatever happened to the statistics since.
- The number of tensor operations of such a step stays bounded (104 before the statistics update and the
  temperatures were trimmed, 78 after 9137cf2, 52 on the few-classes path and 57 on the many-classes path
  since the target's range is read once, the counts come from bincount and the temperatures' tests are
  folded; 43 and 55 once every class is known to have been seen and the count checks the range): a
  regression guard on the per-operation overhead.
- The target's range is read once per step (it was read twice: the input check and the logit term's;
  on CPU the statistics' bincount now checks it as it counts).
- The moving statistics in float64 use the weight ``1 - m`` of float64 (it was rounded to float32).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.compiled import eager_and_compiled, needs_cpp_compiler
from helpers.ops import CountOps, eager_steady_step
from mr2 import MR2Loss


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """The eager steady step (with numba installed, the compiled call: tests/core/test_fused_step.py
    bounds its operations and holds its values within rounding)."""
    eager_steady_step(monkeypatch)


def _batch(seed: int, k: int, b: int = 48, d: int = 8, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, k, (b,), generator=g)
    target[: min(k, b)] = torch.arange(min(k, b))  # every class present (K <= B)
    features = (torch.randn(b, d, generator=g, dtype=dtype) * (1 + target.unsqueeze(1)) + 1).relu()
    return torch.randn(b, k, generator=g, dtype=dtype, requires_grad=True), features, target


def test_a_probe_steps_parts_are_those_of_its_step_even_when_read_later():
    for dtype in (torch.float32, torch.float64):
        loss = MR2Loss(5).to(dtype)
        for seed in range(3):
            logits, features, target = _batch(seed, 5, dtype=dtype)
            value = loss(logits, features, target)
        assert loss.representation_skipped
        # The eager values of that step, from the statistics as the step left them.
        want_margin = loss.distance_margin()
        want_gamma = loss.logit_temperatures()
        assert float(want_margin) > 0 and not torch.equal(want_gamma, torch.ones_like(want_gamma))
        # The statistics move on before parts is read.
        loss.statistics.update(*_batch(7, 5, dtype=dtype)[1:])
        assert not torch.equal(loss.distance_margin(), want_margin)
        parts = loss.parts
        assert parts is not None
        torch.testing.assert_close(parts.margin, want_margin, rtol=0, atol=0)
        torch.testing.assert_close(parts.logit_margins, want_gamma, rtol=0, atol=0)
        assert torch.isnan(parts.representation) and parts.representation.dtype == dtype
        torch.testing.assert_close(parts.total, value.detach(), rtol=0, atol=0)
        torch.testing.assert_close(parts.logit, value.detach(), rtol=0, atol=0)
        assert loss.parts is parts  # built once


def test_a_step_computing_the_term_reports_its_margin_at_once():
    loss = MR2Loss(5)
    logits, features, target = _batch(0, 5)
    loss(logits, features.requires_grad_(), target)
    assert not loss.representation_skipped and loss.parts is not None
    torch.testing.assert_close(loss.parts.margin, loss.distance_margin(), rtol=0, atol=0)
    assert torch.isfinite(loss.parts.representation)


def test_a_probe_step_stays_within_its_operation_budget():
    for k in (4, 10, 100):
        loss = MR2Loss(k)
        for seed in range(3):
            loss(*_batch(seed, k, b=64))
        batch = _batch(3, k, b=64)
        with CountOps() as ops:
            loss(*batch)
        budget = 43 if 2 * k <= 64 else 55  # the [K, d] lerp path (K <= B / 2), the many-class path
        assert ops.count <= budget, f"K = {k}: {ops.count} tensor operations in a linear-probe step"


class _RangeReads(TorchDispatchMode):
    """Records the min / max / aminmax / bincount operations applied to ``watched`` inside the block."""

    def __init__(self, watched: torch.Tensor) -> None:
        super().__init__()
        self.watched = watched.data_ptr()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        first = args[0] if args else None
        name = func.__name__.split(".")[0]
        reads_range = name in ("aminmax", "min", "max", "amin", "amax", "bincount")
        if reads_range and isinstance(first, torch.Tensor) and first.data_ptr() == self.watched:
            # bincount checks the range only where nothing weights it (the count of the classes)
            weights = (kwargs or {}).get("weights", args[1] if len(args) > 1 else None)
            if name != "bincount" or weights is None:
                self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("logit_margin", ["temperature", "additive"])
@pytest.mark.parametrize("probe", [True, False])
def test_a_step_reads_the_targets_range_once(logit_margin, probe):
    # On CPU the statistics' count of the classes (bincount) checks the range; no aminmax besides it.
    loss = MR2Loss(5, logit_margin=logit_margin)
    logits, features, target = _batch(0, 5)
    if not probe:
        features.requires_grad_()
    with _RangeReads(target) as ops:
        loss(logits, features, target)
    # (the pair term, when computed, counts the classes again for its own layout)
    assert ops.names[0] == "bincount.default" and "aminmax.default" not in ops.names, ops.names
    if probe:
        assert ops.names == ["bincount.default"], ops.names


def test_where_the_statistics_do_not_count_on_the_host_the_loss_reads_the_range_once():
    loss = MR2Loss(5)
    logits, features, target = _batch(0, 5)
    with loss.statistics.accumulate(), _RangeReads(target) as ops:  # deferred sums: no bincount
        loss(logits, features, target)
    assert ops.names == ["aminmax.default"], ops.names
    loss.eval()
    with _RangeReads(target) as ops:  # no update at all (the pair term then counts for its layout)
        loss(logits, features, target)
    assert ops.names[0] == "aminmax.default" and ops.names.count("aminmax.default") == 1, ops.names


@pytest.mark.parametrize("bad, low, high", [(7, 0, 7), (5, 0, 5), (-1, -1, 4)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_a_bad_target_is_still_refused_with_its_range(bad, low, high, dtype):
    loss = MR2Loss(5)
    loss(*_batch(1, 5))  # statistics with values
    logits, features, target = _batch(0, 5)
    target[3] = bad
    target = target.to(dtype)
    before = {name: buffer.clone() for name, buffer in loss.statistics.named_buffers()}
    with pytest.raises(ValueError, match=rf"outside \[0, 5\): smallest {low}, largest {high}"):
        loss(logits, features, target)
    for name, buffer in loss.statistics.named_buffers():  # nothing written
        torch.testing.assert_close(buffer, before[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("k, b", [(4, 40), (30, 40), (50, 20)])  # few classes, K in (B/2, 2B], K > 2B
def test_float64_statistics_follow_the_oracle_to_float64_precision(k, b):
    from core import oracles

    g = torch.Generator().manual_seed(k)
    loss = MR2Loss(k, momentum=0.7).double()
    batches = []
    for step in range(5):
        target = torch.randint(0, k, (b,), generator=g)
        if step == 0:
            target[: min(k, b)] = torch.arange(min(k, b))
        features = torch.randn(b, 6, generator=g, dtype=torch.float64) + target.unsqueeze(1) * 0.1
        loss(torch.randn(b, k, generator=g, dtype=torch.float64, requires_grad=True), features, target)
        batches.append((features, target))
    means, msq, spread = oracles.pooled_statistics(batches, k, 0.7)
    stats = loss.statistics
    torch.testing.assert_close(stats.means(), torch.tensor(means, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(stats.mean_sq_norm(), torch.tensor(msq, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(stats.spread(), torch.tensor(spread, dtype=torch.float64), rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@needs_cpp_compiler
def test_a_probe_step_compiles_with_fullgraph_and_defers_the_same_parts():
    eager, compiled_module, compiled = eager_and_compiled(MR2Loss(4, feature_dim=6))
    for seed in range(3):
        logits, features, target = _batch(seed, 4, b=16, d=6)
        z1, z2 = logits.detach().clone().requires_grad_(), logits.detach().clone().requires_grad_()
        want, got = eager(z1, features, target), compiled(z2, features, target)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        want.backward()
        got.backward()
        torch.testing.assert_close(z2.grad, z1.grad, rtol=1e-4, atol=1e-6)
    assert eager.representation_skipped and compiled_module.representation_skipped
    want_parts, got_parts = eager.parts, compiled_module.parts
    assert want_parts is not None and got_parts is not None
    for name, a, b in zip(want_parts._fields, want_parts, got_parts, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, equal_nan=True, msg=name)
    # The saved state (the eager steady probe step may leave the derived norm cache to its next read),
    # and the moments, which read it.
    for (name, a), (_, b) in zip(eager.state_dict().items(), compiled_module.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    for a, b in zip(eager.statistics.moments(), compiled_module.statistics.moments(), strict=True):
        torch.testing.assert_close(a, b)
