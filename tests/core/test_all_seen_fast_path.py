"""The step's shortcut once every class has been seen (issue 47): fewer operations, the same values.

``ClassFeatureStatistics.all_seen_known`` lets a training step skip what only a first observation needs
(the moving-average weights' ``where``, the seen mask, the logit temperatures' readiness test, the
many-class path's host read). These tests hold the shortcut to the full path bit for bit, to the float64
oracles, and check that anything else that changes ``samples_seen`` turns it off.
"""

from __future__ import annotations

import pytest
import torch

from helpers.ops import assert_same_step, eager_steady_step
from mr2 import MR2Loss
from mr2.functional.allocation import gamma_allocation


def _batch(seed: int, k: int, b: int, d: int = 6, dtype: torch.dtype = torch.float32, present: int | None = None):
    """A batch whose classes are drawn from the first ``present`` classes (all K when None)."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, present or k, (b,), generator=g)
    features = (torch.randn(b, d, generator=g, dtype=dtype) + 0.2 * target.unsqueeze(1)).relu()
    logits = torch.randn(b, k, generator=g, dtype=dtype, requires_grad=True)
    return logits, features, target


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    """The eager steady step: these tests hold it to the full path bit for bit."""
    eager_steady_step(monkeypatch)


def _without_shortcut(loss: MR2Loss, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loss.statistics, "all_seen_known", lambda: False)
    monkeypatch.setattr(loss.statistics, "note_all_seen", lambda: False)


def _steps(k: int, b: int, dtype: torch.dtype = torch.float32):
    """Three warm-up batches missing classes, then batches of every class."""
    for seed in range(8):
        yield _batch(seed, k, b, dtype=dtype, present=max(2, k // 2) if seed < 3 else None)


@pytest.mark.parametrize("k, b", [(5, 40), (30, 40)])  # the [K, d] lerp path and the many-class path
@pytest.mark.parametrize("probe", [True, False])
def test_the_shortcut_gives_the_full_paths_values_bit_for_bit(k, b, probe, monkeypatch):
    fast, full = MR2Loss(k), MR2Loss(k)
    _without_shortcut(full, monkeypatch)
    for logits, features, target in _steps(k, b):
        if not probe:
            features.requires_grad_()
        assert_same_step(fast, full, logits, features, target)
        # The saved state; the derived norm cache may be left stale by the steady probe step (it is
        # rebuilt when read): compared through moments().
        for (name, a), (_, b_) in zip(fast.statistics.state_dict().items(), full.statistics.state_dict().items(), strict=True):
            torch.testing.assert_close(a, b_, rtol=0, atol=0, msg=name)
        for a, b_ in zip(fast.statistics.moments(), full.statistics.moments(), strict=True):
            torch.testing.assert_close(a, b_, rtol=0, atol=0)
    assert fast.statistics.all_seen_known()  # the shortcut was taken by the last steps
    assert not full.statistics.all_seen_known()


def test_a_probe_step_follows_the_float64_oracles_through_the_warm_up():
    from core import oracles

    k, b, momentum = 6, 30, 0.7
    loss = MR2Loss(k, momentum=momentum, c_bar=1.3).double()
    batches = []
    for logits, features, target in _steps(k, b, dtype=torch.float64):
        got = loss(logits, features, target)
        batches.append((features, target))
        means, msq, spread = oracles.pooled_statistics(batches, k, momentum)
        all_seen = all(bool((t == c).any()) for c in range(k) for t in [torch.cat([y for _, y in batches])])
        gamma = oracles.gamma_allocation([m + s for m, s in zip(msq, spread)], 1.3) if all_seen else [1.0] * k
        want = oracles.logit_margin_loss(logits, target, torch.tensor(gamma, dtype=torch.float64))
        assert got.item() == pytest.approx(want, rel=1e-12)
        parts = loss.parts
        assert parts is not None
        torch.testing.assert_close(parts.logit_margins, torch.tensor(gamma, dtype=torch.float64), rtol=1e-12, atol=0)
        seen = [c for c in range(k) if any(bool((y == c).any()) for _, y in batches)]
        s_bar = sum(spread[c] for c in seen) / len(seen)
        assert parts.margin.item() == pytest.approx(2 * s_bar, rel=1e-12)
        torch.testing.assert_close(loss.statistics.means(), torch.tensor(means, dtype=torch.float64), rtol=1e-12, atol=1e-12)
        assert loss.statistics.all_seen_known() == all_seen


def test_the_inline_allocation_is_gamma_allocation_bit_for_bit():
    loss = MR2Loss(7, c_bar=0.8)
    for logits, features, target in _steps(7, 40):
        loss(logits, features, target)
    stat = loss.allocation_statistic()
    want = torch.nan_to_num(gamma_allocation(stat, 0.8, check_values=False).clamp_min(loss.min_logit_temperature), nan=1.0)
    torch.testing.assert_close(loss.logit_temperatures(), want, rtol=0, atol=0)
    zeros = (torch.zeros(7), torch.zeros(7))  # no spread anywhere: every gamma is 0 / 0, so 1
    torch.testing.assert_close(loss.logit_temperatures(zeros), torch.ones(7), rtol=0, atol=0)


def test_anything_else_that_changes_the_counts_turns_the_shortcut_off():
    loss = MR2Loss(4)
    stats = loss.statistics
    for logits, features, target in _steps(4, 32):
        loss(logits, features, target)
    assert stats.all_seen_known()
    state = {name: value.clone() for name, value in loss.state_dict().items()}
    stats.samples_seen.zero_()  # a reset by hand: warm-up again
    assert not stats.all_seen_known()
    logits, features, target = _batch(20, 4, 32, present=2)
    loss(logits, features, target)
    assert not stats.all_seen_known()
    torch.testing.assert_close(loss.parts.logit_margins, torch.ones(4), rtol=0, atol=0)  # type: ignore[union-attr]
    loss.load_state_dict(state)  # a loaded state is checked as it is loaded (one host read on CPU)
    assert stats.all_seen_known()
    fresh = MR2Loss(4)
    fresh(*_batch(21, 4, 32))
    loss.load_state_dict(fresh.state_dict())  # a loaded state of a loss that has not seen every class
    assert stats.all_seen_known() == bool(fresh.statistics.samples_seen.all())
    assert stats.note_all_seen() == bool(fresh.statistics.samples_seen.all())
    stats.samples_seen.fill_(1)
    stats.count.fill_(1.0)
    stats.to(torch.float64)  # samples_seen stays int64: same tensor, still known after a check
    assert stats.note_all_seen()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_many_class_paths_norm_cache_is_that_of_the_state(dtype):
    # K >= B on CPU: the changed rows' norms are gathered after the update instead of a pass over the
    # [K, d] state; the cache must equal that pass (and the moments the float64 oracle's).
    from core import oracles

    k, b = 40, 24
    loss = MR2Loss(k, momentum=0.8).to(dtype)
    stats = loss.statistics
    batches = []
    for seed in range(6):
        logits, features, target = _batch(seed, k, b, dtype=dtype)
        if seed == 0:
            target[:b] = torch.arange(b)
        loss(logits, features, target)
        batches.append((features, target))
        assert stats._norm_cache_valid or seed == 0
        full = torch.linalg.vector_norm(stats.feature_sum, dim=1).square()
        torch.testing.assert_close(stats.feature_sum_norm_sq, full, rtol=1e-6 if dtype == torch.float32 else 1e-14, atol=0)
    _, msq, spread = oracles.pooled_statistics(batches, k, 0.8)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(stats.mean_sq_norm(), torch.tensor(msq, dtype=dtype), rtol=tol, atol=tol)
    torch.testing.assert_close(stats.spread(), torch.tensor(spread, dtype=dtype), rtol=tol * 100, atol=tol)
